"""On the GPU lane a gate file that sizes the KV cache to the device (gpu_memory_utilization) runs with nothing beside
it: its baseline in a pytest run of its own without xdist workers, its mutants after the others, one at a time. At
--jobs 8 on the H200 its 0.9 of the device left the other baseline tests out of memory (session 28)."""

from __future__ import annotations

from pathlib import Path

from mutations.model import Verdict
from mutations.runner import BaselineError
from tests.helpers import ends_within
from tests.mutations.runner_rig import BREAK_ADD, BREAK_SCALE, M, T, run

# Each test logs when it ran, in which process and under which xdist worker, and holds the "device" a moment.
LOGGED = '''import os, time
from calc import add, scale, total


def logged(name, check):
    with open({log!r}, "a") as f:
        f.write(f"{{name}} start {{time.time()}} {{os.getpid()}} {{os.environ.get('PYTEST_XDIST_WORKER', '-')}}\\n")
    time.sleep(0.4)
    check()
    with open({log!r}, "a") as f:
        f.write(f"{{name}} end {{time.time()}} {{os.getpid()}} -\\n")
'''
DEVICE = LOGGED + '''

def test_scale_on_the_whole_device():
    logged("device", lambda: None)
    assert scale(2, 3) == 6
'''
BUSY = LOGGED + '''

def test_add_slowly():
    logged("busy-add", lambda: None)
    assert add(2, 3) == 5


def test_total_slowly():
    logged("busy-total", lambda: None)
    assert total([1, 2, 3]) == 6
'''


def intervals(log: Path) -> list[tuple[str, float, float, str]]:
    """(name, start, end, xdist worker) per test run, from the tests' own log."""
    open_: dict[tuple[str, str], tuple[float, str]] = {}
    out = []
    for line in log.read_text().splitlines():
        name, what, t, pid, worker = line.split()
        if what == "start":
            open_[(name, pid)] = (float(t), worker)
        else:
            start, w = open_.pop((name, pid))
            out.append((name, start, float(t), w))
    return out


def overlap(a: tuple, b: tuple) -> bool:
    return a[1] < b[2] and b[1] < a[2]


def test_a_whole_device_gate_file_runs_alone_in_the_baseline_and_its_mutants_after_the_others(project: Path,
                                                                                              tmp_path: Path) -> None:
    log = tmp_path / "runs.log"
    (project / "tests" / "test_device.py").write_text(DEVICE.format(log=str(log)))
    (project / "tests" / "test_busy.py").write_text(BUSY.format(log=str(log)))
    entries = (M("device-scale", **BREAK_SCALE, gates=("tests/test_device.py::test_scale_on_the_whole_device",)),
               M("busy-add", **BREAK_ADD, gates=("tests/test_busy.py::test_add_slowly",
                                                 "tests/test_busy.py::test_total_slowly")),
               M("busy-total", old="        out = add(out, x)", new="        out = add(out, x) + 1",
                 gates=("tests/test_busy.py::test_total_slowly",)))
    res = run(project, *entries, jobs=3, whole_device=frozenset({"tests/test_device.py"}))
    assert {r.verdict for r in res.values()} == {Verdict.KILLED}, {k: r.reason for k, r in res.items()}
    runs = intervals(log)
    device = [r for r in runs if r[0] == "device"]
    others = [r for r in runs if r[0] != "device"]
    assert len(device) == 2, f"the device file's baseline and its mutant's run: {device}"
    assert all(w == "-" for *_, w in device), f"the device file ran under an xdist worker: {device}"
    beside = [(d, o) for d in device for o in others if overlap(d, o)]
    assert not beside, f"the device file's tests ran beside others: {beside}"
    # non-vacuity: the other gates did run side by side (the baseline's two workers, the two busy mutants at once)
    assert any(overlap(a, b) for i, a in enumerate(others) for b in others[i + 1:]), f"nothing ran in parallel: {runs}"


def test_a_hang_in_the_shared_gates_stops_the_baseline_before_the_whole_device_group(project: Path,
                                                                                   tmp_path: Path) -> None:
    """The shared gates' baseline runs first: where it hangs, the run stops naming those files, and the whole-device
    group never starts (it would only wait out a limit of its own)."""
    calc = project / "calc.py"
    hangs = "    import time\n    time.sleep(90)\n    return x * k"
    calc.write_text(calc.read_text().replace("    return x * k", hangs))
    marker = tmp_path / "device-ran"
    (project / "tests" / "test_device.py").write_text(f"def test_marks():\n    open({str(marker)!r}, 'w').close()\n")
    any_ = M("any", **BREAK_ADD, gates=(f"{T}::test_add", "tests/test_device.py::test_marks"))
    box = ends_within(lambda: run(project, any_, baseline_timeout=3.0,
                                  whole_device=frozenset({"tests/test_device.py"})), 15)
    error = str(box.get("error"))
    assert isinstance(box.get("error"), BaselineError) and "a hang" in error, box
    assert T in error.splitlines()[0] and "test_device" not in error.splitlines()[0], error.splitlines()[0]
    assert not marker.exists(), "the whole-device group ran after the hang"
