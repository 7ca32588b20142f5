"""A bounded soak of the OpenAI server: `python -m vt.server.soak --seconds 120`.

For the given time, clients send random requests (valid completions and chats, streamed or whole; invalid
ones: an unknown field, bad JSON, a prompt past max_model_len), and some walk away at random points of their
stream. Two faults are planted: an engine-thread error (a request whose add fails after it was queued) and a
stall (blocks leaked on the engine thread, so waiting requests cannot be admitted, then given back). At the
end: no KV block in use, no stream left open, /health 200, every answer a 200, a 4xx, a planted 500 or a
planted stall's error, and the process's resident memory within 10% of where it stood after the warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any

MODEL = "tiny-qwen3"
POISON = 496  # a prompt starting with this token: its add fails on the engine thread (planted)
LEAK = "soak-leaked-blocks"  # the KV owner the planted stall allocates to


@dataclass
class SoakReport:
    seconds: float
    statuses: dict[str, int] = field(default_factory=dict)
    unexpected: list[str] = field(default_factory=list)
    stalled_failures: int = 0
    blocks_in_use: int = -1
    streams_open: int = -1
    healthy: bool = False
    rss_start_mb: float = 0.0
    rss_end_mb: float = 0.0

    def count(self, suffix: str) -> int:
        return sum(n for k, n in self.statuses.items() if k.endswith(suffix))

    @property
    def ok(self) -> bool:
        """Everything held at the end, and the run did what it claims (both faults hit, clients left)."""
        exercised = self.count("stalled") > 0 and self.count("planted") > 0 and self.count("left") > 0
        return (exercised and not self.unexpected and self.blocks_in_use == 0 and self.streams_open == 0
                and self.healthy and self.rss_end_mb <= 1.10 * self.rss_start_mb)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _plant(llm: Any, stall: dict) -> None:
    """The two faults, on the engine thread: a failing add, and a stall from leaked blocks (taken when
    stall["take"] is set, given back when stall["give"] is)."""
    engine = llm.engine
    add, step = engine.add_request, engine.step

    def add_request(prompt, params=None, request_id=None, cache_salt=None):  # noqa: ANN001, ANN202 - the engine's
        req = add(prompt, params, request_id, cache_salt)
        if not isinstance(prompt, str) and list(prompt)[:1] == [POISON]:
            raise RuntimeError("planted: the add failed after the request was queued")
        return req

    def planted_step():  # noqa: ANN202 - before each step, on the engine thread
        kv = engine.kv_manager
        if stall.get("take") and not stall.get("give"):  # every block freed meanwhile is leaked too: a request
            owners = stall.setdefault("taken", [])  # that cannot run fails, and the ones that can are preempted
            while kv.num_free > 0:  # (a table holds max_blocks_per_seq blocks at most)
                owners.append(f"{LEAK}-{len(owners)}")
                kv.allocate(owners[-1], [min(kv.num_free, kv.max_blocks_per_seq) * kv.block_size])
        if stall.get("give") and stall.get("taken") and not stall.get("given"):
            for owner in stall["taken"]:
                kv.release(owner)
            stall["given"] = True
        return step()

    engine.add_request, engine.step = add_request, planted_step


async def _client(url: str, deadline: float, rng: random.Random, report: SoakReport) -> None:
    import httpx

    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0)) as client:
        while time.monotonic() < deadline:
            kind = rng.choice(["complete", "complete", "stream", "stream", "chat", "leave", "bad-field", "bad-json",
                               "too-long", "poison"])
            prompt = [rng.randrange(3, 400) for _ in range(rng.randrange(1, rng.choice([60, 200])))]
            body: dict[str, Any] = {"model": MODEL, "prompt": prompt, "max_tokens": rng.randrange(1, 24),
                                    "temperature": rng.choice([0, 0.8]), "ignore_eos": True}
            path, raw = "/v1/completions", None
            if kind in ("stream", "leave"):
                body["stream"] = True
            elif kind == "chat":
                path, body = "/v1/chat/completions", {"model": MODEL, "max_tokens": 8,
                                                      "messages": [{"role": "user", "content": "hello there"}]}
            elif kind == "bad-field":
                body["temprature"] = 0.5
            elif kind == "bad-json":
                raw = b'{"model": "tiny-qwen3", "prompt": [1, 2'
            elif kind == "too-long":
                body["prompt"] = [5] * 400
            elif kind == "poison":
                body["prompt"] = [POISON, *prompt]
            try:
                status = await _send(client, url + path, body, raw, kind, rng)
            except httpx.HTTPError as e:
                report.unexpected.append(f"{kind}: {type(e).__name__}: {e}")
                continue
            report.statuses[f"{kind} {status}"] = report.statuses.get(f"{kind} {status}", 0) + 1


async def _send(client: Any, url: str, body: dict, raw: bytes | None, kind: str, rng: random.Random) -> str:
    if raw is not None:
        r = await client.post(url, content=raw, headers={"content-type": "application/json"})
        return str(r.status_code)
    if not body.get("stream"):
        r = await client.post(url, json=body)
        return str(r.status_code) + _error_kind(r.text if r.status_code != 200 else "")
    leave_after = rng.randrange(0, 4) if kind == "leave" else None
    async with client.stream("POST", url, json=body) as r:
        if r.status_code != 200:
            return str(r.status_code) + _error_kind((await r.aread()).decode())
        frames = 0
        async for line in r.aiter_lines():
            if line.startswith("data: {") and "error" in json.loads(line[6:]):
                return "200" + _error_kind(line)
            frames += line.startswith("data: ")
            if leave_after is not None and frames > leave_after:
                return "left"  # the connection closes with the block: the server must abort the request
    return "200"


def _error_kind(text: str) -> str:
    return " stalled" if "can never run" in text else " planted" if "planted" in text else ""


async def _drive(url: str, seconds: float, clients: int, seed: int, report: SoakReport, on_warm: Any) -> None:
    deadline = time.monotonic() + seconds
    warm = asyncio.get_running_loop().call_later(seconds * 0.2, on_warm)
    await asyncio.gather(*(_client(url, deadline, random.Random(seed * 1000 + i), report) for i in range(clients)))
    warm.cancel()


def soak(seconds: float = 120.0, clients: int = 12, seed: int = 0) -> SoakReport:
    import httpx

    from vt.server.serve import running_server

    report = SoakReport(seconds)
    stall: dict = {}
    with running_server(MODEL, max_model_len=256, num_blocks=128, max_num_seqs=8) as (server, url):
        llm = server.llm
        _plant(llm, stall)

        def on_warm() -> None:
            report.rss_start_mb = _rss_mb()
            stall["take"] = True  # the stall begins once warm, and ends a fifth of the run later

        async def run() -> None:
            loop = asyncio.get_running_loop()
            loop.call_later(seconds * 0.4, lambda: stall.__setitem__("give", True))
            await _drive(url, seconds, clients, seed, report, on_warm)

        asyncio.run(run())
        deadline = time.monotonic() + 30
        while (llm.engine.has_unfinished() or llm._streams) and time.monotonic() < deadline:
            time.sleep(0.05)
        report.rss_end_mb = _rss_mb()
        report.blocks_in_use = llm.engine.kv_manager.num_used
        report.streams_open = len(llm._streams)
        report.healthy = httpx.get(url + "/health", timeout=30).status_code == 200
    allowed = ("200", "400", "left", "500 planted", "200 stalled", "500 stalled")
    report.unexpected += [f"{k}: {n}" for k, n in report.statuses.items() if k.split(" ", 1)[1] not in allowed]
    report.stalled_failures = report.count("stalled")
    if not stall.get("given"):
        report.unexpected.append("the planted stall was never taken and given back")
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m vt.server.soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=120.0, help="how long clients send requests")
    p.add_argument("--clients", type=int, default=12, help="concurrent clients")
    p.add_argument("--seed", type=int, default=0, help="the clients' random choices")
    args = p.parse_args(argv)
    if not args.seconds >= 1 or args.clients < 1:  # nan fails the first test too
        p.error(f"--seconds {args.seconds} / --clients {args.clients}: need at least 1 second and 1 client")
    r = soak(args.seconds, args.clients, args.seed)
    print(json.dumps({"ok": r.ok, **{k: v for k, v in vars(r).items()}}, indent=1, default=str))
    return 0 if r.ok else 1


if __name__ == "__main__":
    sys.exit(main())
