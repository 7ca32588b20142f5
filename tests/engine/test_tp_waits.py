"""Tensor parallelism's bounded waits, with stand-in processes (no rank spawned): a worker that never gets
ready ends rank 0's start-up wait at its deadline, one that dies while loading is named at once by its exit
code, a collective's wait ends as soon as the watch finds a dead peer, and a gather's temporaries are back
in the pool when its launch returns, whatever gloo still holds. Apart from the TP runs of
test_tensor_parallel.py, so a mutant that makes one of these waits hang stalls nothing else."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers import ends_within
from vt.engine.worker.tp import LAST_WORDS, READY_KEY, Workers
from vt.errors import WorkerDied
from vt.parallel import _all_gather_gloo, gloo_wait, host_store


def _workers_around(procs: list[subprocess.Popen], tmp_path: Path) -> Workers:
    """A Workers handle on stand-in processes (no rank spawned), with a real store of its own."""
    w = Workers.__new__(Workers)
    w.logdir, w.store, w.procs = str(tmp_path), host_store(len(procs) + 1, 10.0), procs
    for rank in range(1, len(procs) + 1):
        Path(w.log(rank)).write_text(f"{LAST_WORDS} {rank}: stand-in\n")
    return w


def test_a_worker_that_never_gets_ready_ends_the_startup_wait_at_its_deadline(tmp_path: Path) -> None:
    stuck = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        w = _workers_around([stuck], tmp_path)
        # 10 s for a 1 s deadline (an unbounded wait is what a mutant makes: it waits this out)
        err = ends_within(lambda: w.wait_ready(deadline_s=1.0), 10).get("error")
        assert isinstance(err, WorkerDied) and "did not finish loading within 1 s" in str(err), repr(err)
        w.store.add(READY_KEY, 1)  # non-vacuity: a ready worker ends the wait at once, without an error
        assert ends_within(lambda: w.wait_ready(deadline_s=1.0), 10).get("error") is None
    finally:
        stuck.kill()
        stuck.wait()


def test_a_worker_that_dies_while_loading_is_named_before_the_deadline(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    dead.wait(30)
    w = _workers_around([dead], tmp_path)
    t0 = time.monotonic()
    # the deadline is the bound asserted below: a wait that ran to it fails as it would have later
    err = ends_within(lambda: w.wait_ready(deadline_s=10.0), 20).get("error")
    assert isinstance(err, WorkerDied) and "rank 1" in str(err) and "exit code 3" in str(err), repr(err)
    assert time.monotonic() - t0 < 10, "found by its exit code, not by the deadline"


class _Collective:
    """A stand-in for gloo's asynchronous work: completes at a given time."""

    def __init__(self, done_after_s: float) -> None:
        self.done_at = time.monotonic() + done_after_s

    def is_completed(self) -> bool:
        return time.monotonic() >= self.done_at

    def wait(self) -> None:
        pass


def test_a_collective_wait_ends_as_soon_as_the_watch_finds_a_dead_peer() -> None:
    """gloo can wait out its whole timeout on a send to a killed peer: the polled wait asks the watch."""
    watched = []

    def watch() -> None:
        watched.append(time.monotonic())
        if len(watched) == 3:
            raise WorkerDied("rank 1 died")

    err = ends_within(lambda: gloo_wait(_Collective(done_after_s=15.0), watch), 5).get("error")
    assert isinstance(err, WorkerDied), f"the watch's error ends the wait, not the collective: {err!r}"
    assert ends_within(lambda: gloo_wait(_Collective(done_after_s=0.05), watch), 5).get("error") is None, (
        "non-vacuity: a collective that completes ends the wait without an error")


class _GlooKeepingTensors:
    """A stand-in for gloo's all_gather whose work object keeps the tensors it was given after the wait, as
    gloo's own thread may until it drops them: every output gets the input's rows."""

    kept: list = []

    def __call__(self, outputs: list, local: Any, group: Any, async_op: bool) -> _Collective:
        for out in outputs:
            out.copy_(local)
        self.kept.append((outputs, local))
        return _Collective(done_after_s=0.0)


def test_a_gathers_temporaries_are_free_when_its_launch_returns_whatever_gloo_still_holds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool block that gloo's work object holds comes back when a gloo thread lets go, at no predictable
    moment: a capture right after the gather could find its class empty and allocate (CaptureUnsupported,
    one TP run in many). The gather's temporaries must be back on the free lists when its launch returns."""
    import torch.distributed as dist

    from backends.cpu import CpuBackend

    b = CpuBackend()
    monkeypatch.setattr(dist, "all_gather", _GlooKeepingTensors())
    local = b.pool.empty((3, 4), np.float32)
    full = b.pool.empty((3, 8), np.float32)
    b.copy_h2d(local, np.arange(12, dtype=np.float32).reshape(3, 4))
    live_before = sum(sc.live for sc in b.pool._classes.values())
    for _ in range(2):  # the charged first launch, then the planned one
        b.launch(_all_gather_gloo, local, full, pg=None, watch=None)
        live = sum(sc.live for sc in b.pool._classes.values())
        assert live == live_before, f"{live - live_before} pool block(s) still held after the gather returned"
    got = b.host_view(full)
    assert np.array_equal(got, np.tile(np.arange(12, dtype=np.float32).reshape(3, 4), (1, 2))), (
        "non-vacuity: the gather ran, every rank's columns in place")
    assert _GlooKeepingTensors.kept, "non-vacuity: the stand-in still holds what it was given"
