"""The mutation runner's timeouts, on the fixture project: a hanging mutant reads Timeout, and a timed-out
mutant's gate takes what it started with it. Apart from test_runner_timeouts.py: each waits out a deadline."""

from __future__ import annotations

import os
import time
from pathlib import Path

from mutations.model import Verdict
from tests.helpers import ends_within
from tests.mutations.runner_rig import M, T, run


def test_a_hanging_mutant_reads_timeout(project: Path) -> None:
    res = run(project, M("hang", old="    return x * k", new="    while True:\n        pass",
                         gates=(f"{T}::test_scale",)), floor=3.0, factor=0.0)
    assert res["hang"].verdict is Verdict.TIMEOUT


def _alive_with(marker: str) -> list[int]:
    """Processes (not zombies) whose command line holds marker."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if d.name.isdigit() and marker in cmd and int(d.name) != os.getpid():
            found.append(int(d.name))
    return found


def test_a_timed_out_mutant_takes_what_it_started_with_it(project: Path, tmp_path: Path) -> None:
    """A gate that starts a process (a server, a rank) and hangs: the timeout ends the run and that process."""
    started = tmp_path / "leftover-started"
    leftover = (f"    import subprocess, sys\n    subprocess.Popen([sys.executable, '-c', \"import sys, time; "
                f"open(sys.argv[1], 'w').write('up'); time.sleep(60)\", {str(started)!r}])\n"
                f"    import time\n    time.sleep(60)\n")
    # a 6 s limit: the gate's pytest starts its process in ~0.6 s (solo), ten times over on a loaded machine
    box = ends_within(lambda: run(project, M("leave", old="    return x * k\n", new=leftover,
                                              gates=(f"{T}::test_scale",)), floor=6.0, factor=0.0), 50)
    assert box["value"]["leave"].verdict is Verdict.TIMEOUT, box
    deadline = time.monotonic() + 5  # a SIGKILLed process is gone in milliseconds
    while _alive_with(str(started)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert started.exists(), "non-vacuity: the gate started its process before it hung"
    assert not _alive_with(str(started)), "the process the timed-out gate started is still running"
