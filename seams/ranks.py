"""One process per rank of a group, waited for in bounded time whatever a rank does.

The two-GPU lane's tests had started their ranks with pipes for stdout and stderr and then read them one rank
after the other (`communicate` on rank 0, then on rank 1). A rank that writes more than a pipe holds (64 KiB:
warnings, a traceback, NCCL's or CuPy's logging) blocks on the write while rank 0's reader waits for rank 0
only, and rank 0 waits in a collective for the blocked rank: neither ends before the caller's timeout, and the
timeout left both running. Here each rank writes to a file of its own; the ranks are polled together; the
first rank that fails ends the others at once (they would wait in a collective for it), and past the deadline
every rank still running is ended (its whole process group: NCCL's and CuPy's threads and children too).
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class RankResult:
    rank: int
    returncode: int
    stdout: str
    stderr: str
    ended: str | None  # why this rank was ended before it exited by itself: None when it did exit

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.ended is None


def run_ranks(argvs: list[list[str]], timeout: float, env: dict[str, str] | None = None) -> list[RankResult]:
    """Runs argvs[r] as rank r, all at once; returns when every rank has exited or been ended."""
    with tempfile.TemporaryDirectory(prefix="vt-ranks-") as d:
        outs = [open(os.path.join(d, f"rank{r}.out"), "w+") for r in range(len(argvs))]
        errs = [open(os.path.join(d, f"rank{r}.err"), "w+") for r in range(len(argvs))]
        try:
            procs = [subprocess.Popen(argv, stdout=o, stderr=e, text=True, env=env, start_new_session=True)
                     for argv, o, e in zip(argvs, outs, errs)]
            ended = _wait(procs, time.monotonic() + timeout, timeout)
            return [RankResult(r, p.returncode, _read(o), _read(e), ended.get(r))
                    for r, (p, o, e) in enumerate(zip(procs, outs, errs))]
        finally:
            for f in outs + errs:
                f.close()


def _wait(procs: list[subprocess.Popen], deadline: float, timeout: float) -> dict[int, str]:
    ended: dict[int, str] = {}
    while None in (codes := [p.poll() for p in procs]):  # every rank polled, each round
        failed = next((r for r, c in enumerate(codes) if c not in (None, 0)), None)
        if failed is not None:
            why = f"ended: rank {failed} failed first (exit {procs[failed].returncode})"
        elif time.monotonic() > deadline:
            why = f"ended: still running after the deadline of {timeout:g} s"
        else:
            time.sleep(POLL_S)
            continue
        for r, p in enumerate(procs):
            if p.poll() is None:
                ended[r] = why
                _end(p)
    return ended


def _end(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def _read(f) -> str:  # type: ignore[no-untyped-def]
    f.flush()
    f.seek(0)
    return f.read()


def first_failure(results: list[RankResult]) -> str:
    """The rank that went wrong first, and the tail of what it wrote: an assertion's message."""
    bad = next((r for r in results if r.returncode not in (0, -signal.SIGKILL) and r.ended is None),
               next((r for r in results if not r.ok), None))
    if bad is None:
        return "every rank exited 0"
    return (f"rank {bad.rank}: exit {bad.returncode}{', ' + bad.ended if bad.ended else ''}\n"
            f"{bad.stderr[-3000:]}")
