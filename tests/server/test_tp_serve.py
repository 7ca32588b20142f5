"""`vt serve` with tensor parallelism: a killed worker fails the stream in flight with one error frame
naming the rank, then [DONE]; the server exits 1 within a bounded time, saying why."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import httpx
import pytest

from tests.server.processes import processes, start_serve

pytest.importorskip("torch.distributed")


def _workers_of(pid: int) -> list[int]:
    """Descendant processes of pid running a tensor-parallel rank (the engine core's children, when the engine
    runs in a process of its own)."""
    procs = processes()
    family, grew = {pid}, True
    while grew:
        more = {p for p, (pp, _) in procs.items() if pp in family} - family
        family |= more
        grew = bool(more)
    return [p for p in family if p != pid and "vt.engine.worker.tp" in procs[p][1]]


def _exit_code_within(proc: subprocess.Popen, seconds: float) -> int | None:
    deadline = time.monotonic() + seconds
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc.poll()


def _serve_tp2() -> tuple[subprocess.Popen, str]:
    return start_serve(["tiny-qwen3", "--tensor-parallel-size", "2", "--max-model-len", "2048", "--num-blocks", "256"])


def test_a_killed_worker_fails_the_stream_and_the_server_exits_1() -> None:
    proc, url = _serve_tp2()
    try:
        workers = _workers_of(proc.pid)
        assert len(workers) == 1, f"non-vacuity: one worker process, found {workers}"
        body = {"model": "tiny-qwen3", "prompt": [5, 6, 7], "max_tokens": 1800, "stream": True, "ignore_eos": True}
        frames = []
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
            lines = r.iter_lines()
            for line in lines:
                if line.startswith("data: {"):
                    break
            os.kill(workers[0], signal.SIGKILL)
            frames = [line[6:] for line in lines if line.startswith("data: ")]
        assert frames[-1] == "[DONE]", "the stream ends cleanly"
        errors = [json.loads(f)["error"] for f in frames[:-1] if f.startswith('{"error"')]
        assert len(errors) == 1 and "rank 1" in errors[0]["message"], f"one error frame naming the rank: {errors}"
        rc = _exit_code_within(proc, 15)
        assert rc == 1, f"the server exits 1 once its engine died, not {rc} (None: still running)"
        err = proc.stderr.read() if proc.stderr else ""
        assert "the engine died" in err and "WorkerDied" in err, err[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_worker_killed_while_the_server_idles_stops_it_within_seconds() -> None:
    proc, url = _serve_tp2()
    try:
        workers = _workers_of(proc.pid)
        assert len(workers) == 1 and httpx.get(url + "/health", timeout=5).status_code == 200, "non-vacuity"
        os.kill(workers[0], signal.SIGKILL)
        killed = time.monotonic()
        rc = _exit_code_within(proc, 15)
        took = time.monotonic() - killed
        assert rc == 1, f"the idle server exits 1 once a worker died, not {rc} (None: still running)"
        err = proc.stderr.read() if proc.stderr else ""
        assert "WorkerDied" in err and "rank 1" in err, err[-2000:]
        assert took < 10, f"noticed after {took:.1f} s of idling"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
