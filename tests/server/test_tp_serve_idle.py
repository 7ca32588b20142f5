"""`vt serve` with tensor parallelism, idle: a worker killed between requests stops the server (exit 1, naming
the rank) within seconds. Apart from test_tp_serve.py (a killed worker mid-stream): the idle health check's
mutant needs this test alone, and each runs a TP server of its own."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from tests.server.processes import exit_code_within, serve_tp2, stacks_if_running, workers_of

pytest.importorskip("torch.distributed")


def test_a_worker_killed_while_the_server_idles_stops_it_within_seconds() -> None:
    proc, url = serve_tp2()
    try:
        workers = workers_of(proc.pid)
        assert len(workers) == 1 and httpx.get(url + "/health", timeout=5).status_code == 200, "non-vacuity"
        os.kill(workers[0], signal.SIGKILL)
        killed = time.monotonic()
        rc = exit_code_within(proc, 10)  # the bound asserted below: a server still running then fails as late
        took = time.monotonic() - killed
        assert rc == 1, (f"the idle server exits 1 once a worker died, not {rc} (None: still running; its "
                         f"stacks: {stacks_if_running(proc)})")
        err = proc.stderr.read() if proc.stderr else ""
        assert "WorkerDied" in err and "rank 1" in err, err[-2000:]
        assert took < 10, f"noticed after {took:.1f} s of idling"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
