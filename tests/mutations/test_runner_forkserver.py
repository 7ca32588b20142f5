"""The fork server (mutations/forkserver_main.py) and the sandbox compiled once (sandbox.seed_bytecode): a gate forked
from the warm server runs as one started afresh, and a mutant runs its own code, never the seeded bytecode."""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import time
from pathlib import Path

import pytest

from mutations.forkserver import ForkServer, ForkServerError
from mutations.judge import PYTEST_ARGS, gate_env, run_files
from mutations.model import Verdict
from mutations.sandbox import make_sandbox, seed_bytecode, tracked_files
from tests.helpers import ends_within
from tests.mutations.runner_rig import BREAK_SCALE, M, T, run

PROBES = "tests/test_fork_probes.py"
PROBE_SOURCE = '''
import multiprocessing
import os
import subprocess
import sys
import time


def _square_into(x, queue):
    queue.put(x * x)


def test_a_spawned_process_runs_the_gates_code():
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_square_into, args=(3, queue))
    proc.start()
    proc.join(30)
    proc.kill()
    assert proc.exitcode == 0 and queue.get(timeout=5) == 9, f"the spawned process ended {proc.exitcode}"


def test_a_subprocess_exit_code_reaches_its_waiter():
    # polled, as the engine's launchers poll their ranks: SIGCHLD lands between polls, where a handler could reap it
    proc = subprocess.Popen(["sh", "-c", "sleep 0.2; exit 3"])
    while proc.poll() is None:
        time.sleep(0.01)
    assert proc.returncode == 3


def test_the_gate_env_is_the_gates_own():
    assert os.environ.get("VT_FORK_PROBE") == "on"


def test_the_sandbox_comes_first_on_the_path():
    import calc

    assert os.path.dirname(os.path.abspath(calc.__file__)) == os.getcwd()
'''
PROBE_IDS = {f"{PROBES}::{name}" for name in (
    "test_a_spawned_process_runs_the_gates_code", "test_a_subprocess_exit_code_reaches_its_waiter",
    "test_the_gate_env_is_the_gates_own", "test_the_sandbox_comes_first_on_the_path")}


def _probe_sandbox(project: Path, tmp_path: Path) -> Path:
    (project / PROBES).write_text(PROBE_SOURCE)
    return make_sandbox(project, tracked_files(project), tmp_path / "sandbox")


def test_a_gate_forked_by_the_server_runs_as_one_started_afresh(project: Path, tmp_path: Path) -> None:
    sandbox = _probe_sandbox(project, tmp_path)
    env = (("VT_FORK_PROBE", "on"),)
    fresh = run_files(sandbox, (PROBES,), env, timeout=120)
    assert fresh.passed == PROBE_IDS, f"non-vacuity: the probes pass in a fresh interpreter\n{fresh.log}"
    server = ForkServer(gate_env(None))
    try:
        forked = run_files(sandbox, (PROBES,), env, timeout=120, server=server)
        again = run_files(sandbox, (PROBES,), env, timeout=120, server=server)
    finally:
        server.close()
    assert forked.passed == PROBE_IDS and not forked.failed and not forked.errors, \
        f"probes that failed forked but passed afresh: {sorted(forked.failed) + sorted(forked.errors)}\n{forked.log}"
    assert again.passed == PROBE_IDS, f"the server forks a second gate as it did the first\n{again.log}"


def test_a_failing_forked_gate_reads_failed_with_its_assertion(project: Path, tmp_path: Path) -> None:
    sandbox = _probe_sandbox(project, tmp_path)
    server = ForkServer(gate_env(None))
    try:  # no VT_FORK_PROBE given: the env probe fails, and says so, the rest pass
        out = run_files(sandbox, (PROBES,), (), timeout=120, server=server)
    finally:
        server.close()
    env_probe = f"{PROBES}::test_the_gate_env_is_the_gates_own"
    assert set(out.failed) == {env_probe} and "VT_FORK_PROBE" in out.failed[env_probe], out.log
    assert out.rc == 1 and out.passed == PROBE_IDS - {env_probe}


def test_the_sandbox_is_compiled_once_and_a_mutant_still_runs_its_own_code(project: Path, tmp_path: Path) -> None:
    template = make_sandbox(project, tracked_files(project), tmp_path / "template")
    pyc = seed_bytecode(template, [T], gate_env(template), list(PYTEST_ARGS))
    assert any(p.startswith("__pycache__/calc.") for p in pyc), pyc
    assert any(p.startswith("tests/__pycache__/test_calc.") and "-pytest-" in p for p in pyc), \
        f"pytest's rewritten gate module is seeded too: {pyc}"
    res = run(project, M("killed", **BREAK_SCALE, gates=(f"{T}::test_scale",)),
              M("survived", old="    out = 0", new="    out = 0  # harmless", gates=(f"{T}::test_total",)))
    assert res["killed"].verdict is Verdict.KILLED, "the mutated module ran from its seeded, unmutated bytecode"
    assert res["survived"].verdict is Verdict.SURVIVED


def test_a_gate_whose_fork_server_dies_ends_in_its_typed_error_not_a_wait(project: Path, tmp_path: Path) -> None:
    """The server reaps each gate and writes its exit code: with the server gone, a gate's wait would never end."""
    (project / "tests/test_slow_probe.py").write_text("import time\n\n\ndef test_slow():\n    time.sleep(30)\n")
    sandbox = make_sandbox(project, tracked_files(project), tmp_path / "sandbox")
    server = ForkServer(gate_env(None))
    started = time.monotonic()
    try:
        gate = server.start(["-q", "tests/test_slow_probe.py"], sandbox, gate_env(sandbox), sandbox / "gate.log")
        os.killpg(server._proc.pid, signal.SIGKILL)  # the server alone: its session; the gate has its own
        box = ends_within(lambda: gate.wait(timeout=60), 12)  # ends in ~2 s: the bound is a mutant's wait
    finally:
        with contextlib.suppress(ProcessLookupError):  # a gate not yet in its own session went with the server's
            os.killpg(gate.pid, signal.SIGKILL)
        server.close()
    assert isinstance(box.get("error"), ForkServerError), box
    assert "ended" in str(box["error"]) and time.monotonic() - started < 12


def test_without_room_on_dev_shm_sandboxes_take_the_temp_folder_and_verdicts_hold(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine whose /dev/shm is small (or absent) gets its sandboxes in the default temp folder, and the fork
    server judges there as it does on /dev/shm."""
    from mutations import runner, sandbox

    free, real_statvfs = {"bytes": sandbox.SHM_ROOM_BYTES - 1}, os.statvfs

    def statvfs(path: str) -> os.statvfs_result:  # a file system of 1-byte blocks, free["bytes"] of them free
        st = real_statvfs("/")
        return os.statvfs_result((st.f_bsize, 1, st.f_blocks, free["bytes"], free["bytes"], *tuple(st)[5:]))

    monkeypatch.setattr(sandbox.os, "statvfs", statvfs)
    assert sandbox.sandbox_parent() is None, "a /dev/shm without the room is not used"
    free["bytes"] = sandbox.SHM_ROOM_BYTES
    assert sandbox.sandbox_parent() == ("/dev/shm" if os.access("/dev/shm", os.W_OK) else None), \
        "non-vacuity: with the room, a writable /dev/shm is used"
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setattr(runner, "sandbox_parent", lambda: None)
    made: list[Path] = []
    real_make = runner.make_sandbox
    monkeypatch.setattr(runner, "make_sandbox", lambda root, files, dest: made.append(dest) or real_make(root, files,
                                                                                                        dest))
    res = run(project, M("killed", **BREAK_SCALE, gates=(f"{T}::test_scale",)),
              M("survived", old="    out = 0", new="    out = 0  # harmless", gates=(f"{T}::test_total",)))
    assert res["killed"].verdict is Verdict.KILLED and res["survived"].verdict is Verdict.SURVIVED, res
    assert made and all(temp in d.parents for d in made), f"sandboxes outside the temp folder: {made}"
