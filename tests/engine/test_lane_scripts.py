"""The GPU lane's measurement scripts (scripts/gpu-idle, tpot-split, replay-ab, c1-anatomy, skinny-anatomy,
env-ab) refuse bad input as vt's CLI does: exit 2 and one line naming the problem, never a traceback. No GPU needed:
each refusal comes before any device."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CASES = {  # name: (arguments, what the line must name)
    "unknown-model": (["--model", "/nonexistent/ckpt", "--backend", "cpu"], "CheckpointError: unknown model"),
    "unknown-shape": (["--shape", "9B", "--backend", "cpu"], "invalid choice: '9B'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("script", ["gpu-idle", "tpot-split", "replay-ab", "c1-anatomy", "prefix-ttft", "largest-step",
                                    "profile-step"])
def test_a_lane_script_refuses_bad_input_with_one_typed_line(script: str, case: str) -> None:
    args, names = CASES[case]
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / script), *args], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith("usage:") and not x.startswith("  ")]
    assert (r.returncode, "Traceback" in r.stderr) == (2, False), r.stderr[-2000:]
    assert len(lines) == 1 and names in lines[0], r.stderr


def test_replay_ab_refuses_kernel_times_without_a_gpu_backend() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "replay-ab"), "--kernels", "--backend", "cpu",
                        "--model", "tiny-qwen3"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "--kernels needs --backend cuda" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr


def test_gpu_idle_refuses_a_mode_it_does_not_know() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu-idle"), "--modes", "on,sometimes"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "--modes 'on,sometimes'" in r.stderr, r.stderr[-2000:]


SKINNY_REFUSALS = {  # name: (arguments, what the one line must name)
    "not-a-case": (["--cases", "1x1024"], "--cases '1x1024': MxNxK"),
    "too-many-rows": (["--cases", "1x1024x1024,9x1024x1024"], "'9x1024x1024': not a shape the skinny GEMM serves"),
    "swiglu-half-pairs": (["--cases", "1x1000x64+swiglu"], "'1x1000x64+swiglu': not a shape the skinny GEMM serves"),
    "no-reps": (["--reps", "0"], "--reps must be at least 1"),
}


@pytest.mark.parametrize("case", sorted(SKINNY_REFUSALS))
def test_skinny_anatomy_refuses_a_case_it_cannot_time_before_any_device(case: str) -> None:
    args, names = SKINNY_REFUSALS[case]
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "skinny-anatomy"), *args], capture_output=True,
                       text=True, timeout=120, cwd=ROOT)
    lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith("usage:") and not x.startswith("  ")]
    assert (r.returncode, "Traceback" in r.stderr) == (2, False), r.stderr[-2000:]
    assert len(lines) == 1 and names in lines[0], r.stderr


def test_skinny_anatomy_without_cuda_is_one_line() -> None:
    """The default cases pass the checks above (non-vacuity: they refuse only what they name) and stop at the device
    check on a machine without CUDA."""
    try:
        import cupy  # noqa: F401

        pytest.skip("CuPy is here: this machine may time the kernels")
    except ImportError:
        pass
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "skinny-anatomy"), "--reps", "1"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "skinny-anatomy: needs CUDA" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


ENV_AB_REFUSALS = {  # name: (arguments, what the one line must name)
    "not-a-flag": (["--set", "PDL=1,0", "--", "true"], "--set 'PDL=1,0': expected VT_NAME=value"),
    "empty-value": (["--set", "VT_PDL=1,", "--", "true"], "--set 'VT_PDL=1,': expected VT_NAME=value"),
    "twice": (["--set", "VT_PDL=1", "--set", "VT_PDL=0", "--", "true"], "VT_PDL is set twice"),
    "a-typo": (["--set", "VT_DECODE_MIN_PARTITONS=64", "--", "true"], "is not a flag vt/env.py reads"),
    "no-set": (["--", "true"], "--set: at least one flag"),
    "no-command": (["--set", "VT_PDL=1,0"], "no command"),
    "no-rounds": (["--set", "VT_PDL=1,0", "--rounds", "0", "--", "true"], "--rounds must be at least 1"),
    "no-such-command": (["--set", "VT_PDL=1", "--", "no-such-command-vt"], "'no-such-command-vt': no such command"),
    "out-not-writable": (["--set", "VT_PDL=1", "--out", "/proc/vt-ab", "--", "true"], "--out '/proc/vt-ab':"),
    "a-value-vt-refuses": (["--set", "VT_ROPE_MAX_ROWS=8,3", "--", "true"],
                           "--set 'VT_ROPE_MAX_ROWS=8,3': VT_ROPE_MAX_ROWS='3': expected one of"),
}


@pytest.mark.parametrize("case", sorted(ENV_AB_REFUSALS))
def test_env_ab_refuses_bad_input_with_one_line(case: str) -> None:
    args, names = ENV_AB_REFUSALS[case]
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "env-ab"), *args], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith("usage:") and not x.startswith("  ")]
    assert (r.returncode, "Traceback" in r.stderr) == (2, False), r.stderr[-2000:]
    assert len(lines) == 1 and names in lines[0], r.stderr


def test_env_ab_runs_each_setting_in_its_own_process_and_alternates_them(tmp_path: Path) -> None:
    """Each process sees its setting (its figure is computed from the flag it got), the settings' order flips every
    other round, and a setting whose process fails is named while the others' figures still come back (rc 1)."""
    log = tmp_path / "order.log"
    child = ("import json, os, sys; v = os.environ.get('VT_DECODE_MIN_PARTITION', '0'); "
             "open(sys.argv[1], 'a').write(v + '\\n'); "
             "sys.exit('no such mode') if v == '64' else print(json.dumps({'n': {'twice': 2 * int(v)}}))")
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "env-ab"), "--set", "VT_DECODE_MIN_PARTITION=256,128,64",
                        "--rounds", "2",
                        "--figures", "n.twice", "--out", str(tmp_path / "ab"), "--", sys.executable, "-c", child,
                        str(log)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    rows = {ln.split("|")[1].strip(): ln.split("|")[3].strip() for ln in r.stdout.splitlines()
            if ln.startswith("| VT_DECODE_MIN_PARTITION=")}
    assert rows == {"VT_DECODE_MIN_PARTITION=256": "512; 512, 512", "VT_DECODE_MIN_PARTITION=128": "256; 256, 256",
                    "VT_DECODE_MIN_PARTITION=64": "-"}, r.stdout
    assert log.read_text().split() == ["256", "128", "64", "64", "128", "256"], "round 0 in order, round 1 reversed"
    assert r.returncode == 1 and "failed: round 0 VT_DECODE_MIN_PARTITION=64: rc 1, no such mode" in r.stdout, \
        r.stdout
    saved = sorted(p.name for p in (tmp_path / "ab").iterdir())
    assert len(saved) == 6, f"a file per run: {saved}"
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+", n) for n in saved), f"names the device runner returns: {saved}"


def test_env_ab_reads_a_ladders_array_of_rows_by_index(tmp_path: Path) -> None:
    """`vt ladder --json` prints its rows as one JSON array: 1.tpot_ms is the second concurrency's figure. An index
    past the array, or a key its row lacks, is a '-' cell, not a crash."""
    child = ("import json, os; v = int(os.environ['VT_DECODE_MIN_PARTITION']) // 64; "
             "print('vt: log line'); print(json.dumps([{'c': 1, 'tpot_ms': v}, {'c': 128, 'tpot_ms': 10 * v}]))")
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "env-ab"), "--set", "VT_DECODE_MIN_PARTITION=64,128",
                        "--rounds", "1",
                        "--figures", "1.tpot_ms,0.tpot_ms,2.tpot_ms,0.ttft_ms", "--", sys.executable, "-c", child],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    rows = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[3:7]] for ln in r.stdout.splitlines()
            if ln.startswith("| VT_DECODE_MIN_PARTITION=")}
    assert rows == {"VT_DECODE_MIN_PARTITION=64": ["10; 10", "1; 1", "-", "-"],
                    "VT_DECODE_MIN_PARTITION=128": ["20; 20", "2; 2", "-", "-"]}, r.stdout
    assert r.returncode == 0, r.stdout + r.stderr


def test_env_ab_ends_a_run_past_its_timeout_with_what_it_started(tmp_path: Path) -> None:
    """A measuring process that hangs, having started one of its own (a rank, a server): both are killed at the
    timeout, the run is named as failed, and the call ends."""
    pid_file = tmp_path / "grandchild.pid"
    child = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; "
             "time.sleep(40)']); open(sys.argv[1], 'w').write(str(p.pid)); time.sleep(40)")
    try:  # its own process holds the output pipes: killed alone, the hung run would keep the call waiting 40 s
        r = subprocess.run([sys.executable, str(ROOT / "scripts" / "env-ab"), "--set", "VT_PDL=1", "--rounds", "1",
                            "--timeout", "3", "--", sys.executable, "-c", child, str(pid_file)],
                           capture_output=True, text=True, timeout=25, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail("env-ab waited out the hung run's own process")
    assert r.returncode == 1 and "ran past 3 s: killed" in r.stdout, (r.stdout, r.stderr[-2000:])
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and "Z" not in _state(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists() or "Z" in _state(pid), "the hung run's own process is still running"


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].split()[0]
    except (OSError, IndexError):
        return "gone"


NCU_CSV = """==PROF== Connected to process 7 (python3)
"ID","Process ID","Kernel Name","Block Size","Grid Size","gpu__time_duration.sum"
"","","","","","nsecond"
"0","7","void vt::paged_rows_attention<bf16, bf16, 128>(const float *, int)","(128, 1, 1)","(8, 8, 16)","13,500"
"1","7","void vt::paged_decode_reduce<bf16, 128>(const float *, int)","(128, 1, 1)","(16, 16, 1)","3,000"
"2","7","void vt::paged_rows_attention<bf16, bf16, 128>(const float *, int)","(128, 1, 1)","(8, 8, 16)","12,500"
==PROF== Disconnected from process 7
"""


def test_kernel_times_sums_ncus_durations_by_kernel(tmp_path: Path) -> None:
    """scripts/kernel-times: each kernel's launches and microseconds (ns in ncu's raw page, thousands separated),
    divided by --per, largest first; the name without its argument list (template arguments kept)."""
    (tmp_path / "hit.csv").write_text(NCU_CSV)
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "kernel-times"), str(tmp_path / "hit.csv"), "--per",
                        "2"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| `")]
    assert rows == ["| `vt::paged_rows_attention<bf16, bf16, 128>` | 1 | 13.0 | 89.7% |",
                    "| `vt::paged_decode_reduce<bf16, 128>` | 0.5 | 1.5 | 10.3% |"], r.stdout
    assert "| total | 1.5 | 14.5 | |" in r.stdout


def test_kernel_times_and_prefix_ttft_refuse_what_they_cannot_read(tmp_path: Path) -> None:
    (tmp_path / "log.txt").write_text("==PROF== no kernels were profiled\n")
    (tmp_path / "ps.csv").write_text(NCU_CSV.replace('"nsecond"', '"psecond"'))
    no_duration = '"0","7","void k()","(1, 1, 1)","(1, 1, 1)","n/a"'
    (tmp_path / "na.csv").write_text("\n".join([*NCU_CSV.splitlines()[:3], no_duration]) + "\n")
    for args, names in ((["kernel-times", str(tmp_path / "log.txt")], "no ncu CSV header"),
                        (["kernel-times", str(tmp_path / "ps.csv")], "unit is 'psecond'"),
                        (["kernel-times", str(tmp_path / "na.csv")], "no kernel with a duration (1 rows without one)"),
                        (["kernel-times", str(tmp_path / "absent.csv")], "No such file"),
                        (["prefix-ttft", "--model", "tiny-qwen3", "--backend", "cpu", "--nvtx"],
                         "needs --backend cuda"),
                        (["prefix-ttft", "--model", "tiny-qwen3", "--backend", "cpu", "--anatomy", "--prompt-len",
                          "256"], "needs --prompt-len above 256"),
                        (["prefix-ttft", "--model", "tiny-qwen3", "--backend", "cpu", "--anatomy", "--host-profile",
                          "3"], "take it apart from --anatomy"),
                        (["prefix-ttft", "--model", "tiny-qwen3", "--backend", "cpu", "--host-profile", "-1"],
                         "--host-profile >= 0")):
        r = subprocess.run([sys.executable, str(ROOT / "scripts" / args[0]), *args[1:]], capture_output=True,
                           text=True, timeout=60, cwd=ROOT)
        lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith(("usage:", " "))]
        assert (r.returncode, len(lines), "Traceback" in r.stderr) == (2, 1, False), r.stderr[-2000:]
        assert names in lines[0], r.stderr


def _prefix_ttft(tmp_path: Path, *flags: str, graphs: str = "1") -> subprocess.CompletedProcess:
    # graphs on or off whatever the lane's own flags (the pool-bypass lane captures none)
    env = {**os.environ, "VT_CUDAGRAPH": graphs, "VT_POOL_BYPASS": "0"}
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "prefix-ttft"), "--model", "tiny-qwen3",
                           "--backend", "cpu", "--rounds", "3", *flags, "--out", str(tmp_path)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env=env)


def _prefix_ttft_row(tmp_path: Path, *flags: str) -> tuple[str, dict]:
    r = _prefix_ttft(tmp_path, *flags)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout, json.loads((tmp_path / "prefix-ttft.json").read_text())


def test_prefix_ttft_profiles_the_hits_host_work(tmp_path: Path) -> None:
    """--host-profile N prints the hits' cProfile (the engine's step among the functions), in both orders; the row
    records whether the engine overlapped (on the CPU it never does, so --sync's effect on CUDA is the lane's)."""
    out, row = _prefix_ttft_row(tmp_path, "--host-profile", "5", "--sync")
    for order in ("cumulative", "tottime"):
        assert f"host profile of 3 hits, by {order} time" in out, out[-3000:]
    assert "llm_engine.py" in out and "(step)" in out, out[-3000:]
    assert row["async_scheduling"] is False and row["ttft_hit_ms"] > 0, row


def test_prefix_ttft_splits_the_hits_ttft_at_its_graphs_launch(tmp_path: Path) -> None:
    """--anatomy: the host's part until the hit's graph launches lies inside its TTFT (a stamp at the decode step's
    staging, after the first token, does not), and the graphs are the tail's (16 rows, run whole) then the one-row
    decode step's (swapped, they fail here). The rest (TTFT less the other two) is not asserted: the graph's time is
    taken apart from the TTFT, at the run's end, and a loaded machine can make it the larger."""
    out, row = _prefix_ttft_row(tmp_path, "--anatomy")
    assert (row["hit_graph_rows"], row["decode_graph_rows"]) == (16, 1), row
    assert 0 < row["hit_prelaunch_ms"] < row["ttft_hit_ms"], row
    assert row["hit_graph_ms"] > 0 and row["decode_graph_ms"] > 0, row
    assert "hit anatomy (ms): host until its graph's launch" in out, out[-2000:]
    off = _prefix_ttft(tmp_path, "--anatomy", graphs="0")  # no graph to replay: refused before the engine is built
    lines = [x for x in off.stderr.splitlines() if x.strip() and not x.startswith(("usage:", " "))]
    assert (off.returncode, len(lines)) == (2, 1) and "needs graphs captured" in lines[0], off.stderr[-2000:]
