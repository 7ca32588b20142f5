"""The server under load (200 requests at concurrency 64, one in ten walking away mid-stream), SIGTERM with a
stream in flight, and a request queued behind a dying engine. Beside the server rule's tests
(test_server_rule.py) but apart from them: each of that file's mutants runs its gate file whole, and only the
SIGTERM test here is a gate (engine-core-dies-on-a-group-sigterm). The shutdown's own gates: test_shutdown.py."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time

import httpx
import numpy as np
import pytest

from tests.server.processes import start_serve
from vt.server.serve import running_server

MODEL = "tiny-qwen3"


@pytest.fixture
def served():
    with running_server(MODEL, max_model_len=256, num_blocks=256, max_num_seqs=16) as (server, url):
        yield server, url


def frames_of(lines: list[str]) -> list:
    return [line[6:] if line == "data: [DONE]" else json.loads(line[6:]) for line in lines if line]


def test_load_200_requests_at_concurrency_64_with_walkaways(served) -> None:
    server, url = served
    rng = np.random.default_rng(0)

    async def one(client: httpx.AsyncClient, i: int, sem: asyncio.Semaphore) -> tuple[str, int]:
        n = int(rng.integers(2, 12))
        body = {"model": MODEL, "prompt": [int(t) for t in rng.integers(3, 500, int(rng.integers(4, 40)))],
                "max_tokens": n, "ignore_eos": True, "temperature": 0.8, "seed": i}
        async with sem:
            if i % 2:  # not streamed
                r = await client.post(url + "/v1/completions", json=body)
                return ("ok" if r.json()["usage"]["completion_tokens"] == n else "wrong count"), r.status_code
            body |= {"stream": True, "stream_options": {"include_usage": True}}
            async with client.stream("POST", url + "/v1/completions", json=body) as r:
                got = -1
                async for line in r.aiter_lines():
                    if i % 10 == 0 and line.startswith("data: {"):
                        return "walked away", r.status_code  # mid-stream: the request must be aborted
                    if line.startswith("data: {") and json.loads(line[6:]).get("usage"):
                        got = json.loads(line[6:])["usage"]["completion_tokens"]
                return ("ok" if got == n else "wrong count"), r.status_code

    async def main() -> list[tuple[str, int]]:
        sem = asyncio.Semaphore(64)
        limits = httpx.Limits(max_connections=80)
        async with httpx.AsyncClient(timeout=120, limits=limits) as client:
            return await asyncio.gather(*(one(client, i, sem) for i in range(200)))

    results = asyncio.run(main())
    assert all(status == 200 for _, status in results)
    assert sum(r == "walked away" for r, _ in results) == 20
    assert all(r in ("ok", "walked away") for r, _ in results), [r for r, _ in results if r == "wrong count"][:3]
    deadline = time.monotonic() + 30
    kv = server.llm.engine.kv_manager
    while (kv.num_used or server.llm.engine.requests) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert kv.num_used == 0 and not server.llm.engine.requests, "no KV block left in use, no request left"
    assert httpx.get(url + "/health", timeout=30).status_code == 200


@pytest.mark.parametrize("whom", ["process", "group"])
def test_sigterm_ends_the_stream_in_flight_properly_then_exits_cleanly(whom: str) -> None:
    """SIGTERM to the server, or to its whole process group as `timeout` and systemd send it (the engine core
    included: it used to die first, and the server stopped as if the engine had, exit 1)."""
    import os

    proc, url = start_serve([MODEL, "--max-model-len", "256", "--num-blocks", "64"], merge_stderr=True,
                            new_session=whom == "group")
    try:
        body = {"model": MODEL, "prompt": [5, 6, 7], "max_tokens": 120, "stream": True, "ignore_eos": True,
                "stream_options": {"include_usage": True}}
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
            lines = []
            for line in r.iter_lines():
                lines.append(line)
                if len(lines) == 2:
                    if whom == "group":
                        os.killpg(proc.pid, signal.SIGTERM)
                    else:
                        proc.send_signal(signal.SIGTERM)
        frames = frames_of(lines)
        assert frames[-1] == "[DONE]", "the stream in flight ended properly"
        done = [f for f in frames[:-1] if f.get("usage")]
        assert done and done[-1]["usage"]["completion_tokens"] == 120 or any("error" in f for f in frames[:-1])
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_request_queued_when_the_engine_dies_fails_fast_instead_of_hanging(served) -> None:
    server, url = served
    runner = server.llm.engine.runner
    real, go, inside = runner.execute, threading.Event(), threading.Event()

    def execute(so):
        if runner.decoder.num_replays + runner.decoder.num_eager >= 2:  # mid-stream
            inside.set()
            go.wait(30)
            raise RuntimeError("injected: the device fell over")
        return real(so)

    runner.execute = execute
    first = threading.Thread(target=lambda: httpx.post(url + "/v1/completions", json={
        "model": MODEL, "prompt": [5, 6], "max_tokens": 50, "ignore_eos": True}, timeout=60))
    first.start()
    assert inside.wait(30), "non-vacuity: the engine is inside the step that will fail"
    late: dict[str, httpx.Response] = {}
    t = threading.Thread(target=lambda: late.setdefault("r", httpx.post(url + "/v1/completions", json={
        "model": MODEL, "prompt": "queued while the engine fails", "max_tokens": 4}, timeout=60)))
    t.start()
    time.sleep(0.3)  # its add is queued behind the failing step
    go.set()
    t.join(30)
    first.join(30)
    assert "r" in late, "the queued request got an answer (no hang)"
    assert late["r"].status_code == 503 and "fell over" in late["r"].json()["error"]["message"]
