"""scripts/env-ab ends a run past its --timeout with what that run started (a rank, a server): both killed, the run
named as failed, and the call ends. Apart from test_lane_env_ab.py: where gate files run whole (the mutation
runner's --whole-files), the seconds this one waits would be paid by every mutant gated there."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_env_ab_ends_a_run_past_its_timeout_with_what_it_started(tmp_path: Path) -> None:
    """A measuring process that hangs, having started one of its own (a rank, a server): both are killed at the
    timeout, the run is named as failed, and the call ends."""
    pid_file = tmp_path / "grandchild.pid"
    child = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; "
             "time.sleep(40)']); open(sys.argv[1], 'w').write(str(p.pid)); time.sleep(40)")
    try:  # its own process holds the output pipes: killed alone, the hung run would keep the call waiting 40 s
        r = subprocess.run([sys.executable, str(ROOT / "scripts" / "env-ab"), "--set", "VT_PDL=1", "--rounds", "1",
                            "--timeout", "3", "--", sys.executable, "-c", child, str(pid_file)],
                           capture_output=True, text=True, timeout=15, cwd=ROOT)  # ends in ~3 s
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
