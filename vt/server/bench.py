"""`vt bench serve`: a serving benchmark in the shape of vLLM's, against any OpenAI-compatible server.

Random prompts of --input-len token ids, --output-len tokens each (ignore_eos), streamed from
/v1/completions at each --max-concurrency level, arrivals at --request-rate (Poisson; inf: all at once).
TTFT is the first chunk that carries choices; ITL the gaps between chunks; TPOT (latency - TTFT) /
(tokens - 1). Prints vLLM's result table per level, progress lines while a level runs, and every level in one
table at the end; --save-result writes the rows as strict JSON and a PNG of throughput, TTFT and TPOT against
concurrency (matplotlib), titled with what was run.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from vt.engine.sample.params import rng_seed


@dataclass(slots=True)
class One:
    ok: bool
    ttft: float = 0.0
    latency: float = 0.0
    itl: list[float] = field(default_factory=list)
    output_tokens: int = 0
    error: str = ""


@dataclass(slots=True)
class Result:
    max_concurrency: int
    request_rate: float
    completed: int
    failed: int
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    mean_ttft_ms: float
    median_ttft_ms: float
    p99_ttft_ms: float
    mean_tpot_ms: float
    median_tpot_ms: float
    p99_tpot_ms: float
    mean_itl_ms: float
    median_itl_ms: float
    p99_itl_ms: float
    errors: list[str] = field(default_factory=list)


async def _one(client: Any, url: str, model: str, prompt: list[int], output_len: int) -> One:
    body = {"model": model, "prompt": prompt, "max_tokens": output_len, "ignore_eos": True, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    first = last = 0.0
    out = One(ok=False)
    chunks, status = 0, None
    try:
        async with client.stream("POST", url, json=body) as r:
            status = r.status_code
            if r.status_code != 200:
                out.error = f"HTTP {r.status_code}: {(await r.aread()).decode()[:200]}"
                return out
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    out.error = chunk["error"].get("message", "error")
                    return out
                now, chunks = time.perf_counter(), chunks + 1
                if chunk.get("choices"):
                    if not first:
                        first = now
                    else:
                        out.itl.append(now - last)
                    last = now
                if chunk.get("usage"):
                    out.output_tokens = chunk["usage"]["completion_tokens"]
    except Exception as e:  # noqa: BLE001 - a failed request is counted, not fatal
        # where it broke tells a connection the server dropped before answering (a keep-alive race) from a stream
        # cut mid-way; an exception with no text of its own is named by its cause (httpx's ReadError wraps an OSError)
        why = str(e) or repr(e.__cause__ or e.__context__)
        where = "before any response" if status is None else f"after {chunks} chunks"
        out.error = f"{type(e).__name__} {where}, {time.perf_counter() - t0:.2f} s in: {why}"
        return out
    out.ok, out.ttft, out.latency = True, first - t0, time.perf_counter() - t0
    return out


def _quiet_httpx() -> None:
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request otherwise


# An idle connection is dropped by the client before a server would close it (uvicorn's keep-alive: 5 s, as httpx's
# own expiry): at equal timeouts a request sent as the server closes its connection fails before any response.
KEEPALIVE_S = 2.0
PROGRESS_S = 10.0  # a progress line at least this often while a level runs (and at every tenth of it)


async def run_level(base_url: str, model: str, prompts: list[list[int]], output_len: int, concurrency: int,
                    rate: float, seed: int = 0, progress: Any = None) -> Result:
    """One level: `concurrency` workers, each with a client of its own holding one keep-alive connection, take the
    prompts as they arrive (all at once, or Poisson at `rate`). One pooled client for all would cost the client
    more than the server at high concurrency: httpcore scans every pooled connection for each request (measured:
    70% of the client's CPU at 64 connections). progress(line), when given, is called as requests end (every
    tenth, and at least every PROGRESS_S seconds)."""
    import httpx

    _quiet_httpx()
    url = base_url.rstrip("/") + "/v1/completions"
    rng = np.random.default_rng(rng_seed(seed))
    arrivals: asyncio.Queue[int | None] = asyncio.Queue()
    done: list[One] = [One(ok=False, error="never sent")] * len(prompts)
    ended, said = [0], [time.perf_counter()]
    workers = max(1, min(concurrency, len(prompts)))

    async def arrive() -> None:
        for i in range(len(prompts)):
            arrivals.put_nowait(i)
            if rate != float("inf"):
                await asyncio.sleep(float(rng.exponential(1.0 / rate)))
        for _ in range(workers):
            arrivals.put_nowait(None)

    tls = ssl.create_default_context()  # one for every client: each building its own cost 22 ms of CPU

    async def work() -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=KEEPALIVE_S)
        async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), limits=limits, verify=tls) as client:
            while (i := await arrivals.get()) is not None:
                done[i] = await _one(client, url, model, prompts[i], output_len)
                ended[0] += 1
                now = time.perf_counter()
                if progress is not None and (ended[0] % max(1, len(prompts) // 10) == 0
                                             or now - said[0] >= PROGRESS_S):
                    said[0] = now
                    progress(f"c={concurrency}: {ended[0]}/{len(prompts)} requests done ({now - t0:.1f} s)")

    t0 = time.perf_counter()
    await asyncio.gather(arrive(), *(work() for _ in range(workers)))
    duration = time.perf_counter() - t0
    return summarize(done, concurrency, rate, duration, sum(len(p) for p, d in zip(prompts, done) if d.ok))


def summarize(done: list[One], concurrency: int, rate: float, duration: float, input_tokens: int) -> Result:
    ok = [d for d in done if d.ok]
    ttft = np.array([d.ttft for d in ok] or [0.0]) * 1e3
    tpot = np.array([(d.latency - d.ttft) / (d.output_tokens - 1) for d in ok if d.output_tokens > 1] or [0.0]) * 1e3
    itl = np.array([x for d in ok for x in d.itl] or [0.0]) * 1e3
    out_tokens = sum(d.output_tokens for d in ok)

    def stats(a: np.ndarray) -> tuple[float, float, float]:
        return float(a.mean()), float(np.median(a)), float(np.percentile(a, 99))

    return Result(concurrency, rate, len(ok), len(done) - len(ok), duration, input_tokens, out_tokens,
                  len(ok) / duration, out_tokens / duration, (input_tokens + out_tokens) / duration,
                  *stats(ttft), *stats(tpot), *stats(itl), errors=sorted({d.error for d in done if not d.ok})[:5])


def table(r: Result) -> str:
    rows = [("Successful requests:", r.completed), ("Failed requests:", r.failed),
            ("Maximum request concurrency:", r.max_concurrency), ("Benchmark duration (s):", f"{r.duration_s:.2f}"),
            ("Total input tokens:", r.total_input_tokens), ("Total generated tokens:", r.total_output_tokens),
            ("Request throughput (req/s):", f"{r.request_throughput:.2f}"),
            ("Output token throughput (tok/s):", f"{r.output_throughput:.2f}"),
            ("Total Token throughput (tok/s):", f"{r.total_token_throughput:.2f}")]
    lines = ["{s:{c}^50}".format(s=" Serving Benchmark Result ", c="=")]
    lines += [f"{k:<40}{v:<10}" for k, v in rows]
    for title, key in (("Time to First Token", "ttft"), ("Time per Output Token (excl. 1st token)", "tpot"),
                       ("Inter-token Latency", "itl")):
        lines.append("{s:{c}^50}".format(s=f" {title} ", c="-"))
        for stat in ("mean", "median", "p99"):
            name = {"mean": "Mean", "median": "Median", "p99": "P99"}[stat]
            lines.append(f"{f'{name} {key.upper()} (ms):':<40}{getattr(r, f'{stat}_{key}_ms'):<10.2f}")
    lines.append("=" * 50)
    if r.errors:
        lines.append("errors: " + "; ".join(r.errors))
    return "\n".join(lines)


def summary(results: list[Result]) -> str:
    """Every level in one table, a row each."""
    head = f"{'concurrency':>11} {'ok':>5} {'failed':>6} {'out tok/s':>10} {'TTFT p50 ms':>12} {'TPOT p50 ms':>12} " \
           f"{'ITL p99 ms':>11}"
    rows = [f"{r.max_concurrency:>11} {r.completed:>5} {r.failed:>6} {r.output_throughput:>10.1f} "
            f"{r.median_ttft_ms:>12.2f} {r.median_tpot_ms:>12.2f} {r.p99_itl_ms:>11.2f}" for r in results]
    return "\n".join(["{s:{c}^80}".format(s=" Every level ", c="="), head, *rows, "=" * 80])


def rows_json(results: list[Result]) -> str:
    """The rows as strict JSON: an infinite request rate is the string "inf" (JSON has no Infinity)."""
    rows = [asdict(r) | ({"request_rate": "inf"} if r.request_rate == float("inf") else {}) for r in results]
    return json.dumps(rows, indent=2, allow_nan=False)


def figure(results: list[Result], title: str) -> Any:
    """Throughput, TTFT and TPOT against concurrency, under a title that says what was run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = [r.max_concurrency for r in results]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    def col(field: str) -> list[float]:
        return [getattr(r, field) for r in results]

    panels = (("output tokens/s", "throughput", [("", col("output_throughput"))]),
              ("ms", "TTFT", [("median", col("median_ttft_ms")), ("p99", col("p99_ttft_ms"))]),
              ("ms", "TPOT", [("median", col("median_tpot_ms")), ("p99", col("p99_tpot_ms"))]))
    for ax, (unit, name, lines) in zip(axes, panels):
        for label, ys in lines:
            ax.plot(c, ys, marker="o", label=label or None)
        ax.set(xlabel="max concurrency", ylabel=unit, title=name, xscale="log", xticks=c)
        ax.set_xticklabels(c)
        if len(lines) > 1:
            ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def save(results: list[Result], path: str, title: str = "vt bench serve") -> list[str]:
    """The rows as JSON, and a PNG of throughput, TTFT and TPOT against concurrency beside it."""
    import matplotlib.pyplot as plt

    with open(path, "w") as f:
        f.write(rows_json(results))
    png = path.rsplit(".", 1)[0] + ".png"
    fig = figure(results, title)
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return [path, png]
