"""The seam pattern on every rank of a tensor-parallel group, one process per rank:
`python -m seams.tp MODEL RANK SIZE PORT [cpu|cuda]` prints one JSON line of what the rank measured. Every
rank joins the store that the caller hosts at 127.0.0.1:PORT (`vt.parallel.host_store`).

First, on a group that has run no collective: the driver's pre-grow, then a capture of every kind of
collective; NCCL would set each kind up (allocate) at its first enqueue, so only the pre-grow's warm-up
keeps that allocation out of the capture. Then the decode seam: cold step, drain, capture, zero driver
allocations inside it, with the drain and the pre-grow's allocations as non-vacuity guards.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np


def rank_seams(model: str, rank: int, size: int, port: int, backend_name: str = "cpu") -> dict[str, Any]:
    from seams.harness import SeamHarness
    from vt.capture import GraphCaptureScope
    from vt.parallel import init_group, join_store
    from vt.registry import make_backend

    if backend_name == "cuda":
        import cupy

        cupy.cuda.Device(rank).use()
    backend = make_backend(backend_name)
    group = init_group(backend, rank, size, join_store(port, size, 60.0), 60.0)
    h = SeamHarness(model, backend_obj=backend, group=group)
    out: dict[str, Any] = {"rank": rank}
    # the warm-up's own shapes: its temporaries, back on the free lists, are what the capture draws (the pool
    # demand is not under test here, the collectives' lazy setup is)
    x, full = backend.pool.empty((1, 8), np.float32), backend.pool.empty((1, 8 * size), np.float32)
    h.driver._pregrow({})
    out["lazy_setups_before_capture"] = len(group.lazy_buffers)
    backend.reset_counters()
    scope = GraphCaptureScope(backend, h.driver.stream, enabled=True)
    with scope:
        group.all_reduce(x)
        group.all_gather(x, full)
    out["first_collectives"] = {"failed": repr(scope.error) if scope.capture_failed else None,
                                "allocs_in_capture": backend.allocs_in_capture}
    h.start(4)
    h.step()
    out["cold_captured"] = h.is_captured
    out["freed"] = h.pool.drain()
    backend.reset_counters()
    try:
        h.step()
        out["capture_error"] = None
    except Exception as e:  # noqa: BLE001 - reported to the test, which fails on it by name
        out["capture_error"] = repr(e)
    out["captured"] = h.is_captured
    out["allocs_in_step"] = backend.allocs_in_step
    out["allocs_in_capture"] = backend.allocs_in_capture
    return out


if __name__ == "__main__":
    import os

    m, r, n, p = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    print(json.dumps(rank_seams(m, r, n, p, sys.argv[5] if len(sys.argv) > 5 else "cpu")), flush=True)
    # The rank's result is out. Leave without the group's teardown: after a capture that failed (what a seam
    # mutant provokes), gloo's threads could abort the process as it exited ("terminate called without an active
    # exception": 1 run in 11, then 1 in 60, in two loops on a 2-core machine), and the caller took that for a
    # failed rank.
    sys.stderr.flush()
    os._exit(0)
