"""`vt serve` with tensor parallelism: a killed worker fails the stream in flight with one error frame
naming the rank, then [DONE]; the server exits 1 within a bounded time, saying why. (A worker killed while
the server idles: test_tp_serve_idle.py, apart so its mutant runs one TP server, not two.)"""

from __future__ import annotations

import json
import os
import signal

import httpx
import pytest

from tests.server.processes import exit_code_within, serve_tp2, stacks_if_running, workers_of

pytest.importorskip("torch.distributed")


def test_a_killed_worker_fails_the_stream_and_the_server_exits_1() -> None:
    proc, url = serve_tp2()
    try:
        workers = workers_of(proc.pid)
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
        # the idle test's bound: the death is already known here (the error frame), so the exit follows within
        # ~1 s; a mutant that never exits waits this out
        rc = exit_code_within(proc, 10)
        assert rc == 1, (f"the server exits 1 once its engine died, not {rc} (None: still running; its "
                         f"stacks: {stacks_if_running(proc)})")
        err = proc.stderr.read() if proc.stderr else ""
        assert "the engine died" in err and "WorkerDied" in err, err[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
