"""A concurrency ladder, like a serving benchmark: for each rung c, keep c requests in flight until
num_prompts have run, and report throughput, TTFT and TPOT."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from vt.engine.core.request import Request
from vt.engine.front.llm_engine import LLMEngine
from vt.engine.sample.params import SamplingParams, rng_seed
from vt.errors import ConfigError, EngineInvariantError


@dataclass(slots=True)
class Rung:
    c: int
    n: int
    ok: int
    failed: int
    out_tok_s: float
    ttft_ms: float  # the mean, as serving benchmarks report it
    tpot_ms: float
    ttft_median_ms: float = 0.0  # beside the mean: one slow request (a rung's first) moves the mean, not these
    ttft_max_ms: float = 0.0
    acceptance: float | None = None  # speculative decoding: accepted / proposed draft tokens in this rung
    tokens: list[list[int]] = field(default_factory=list, repr=False)  # per prompt, for equivalence checks
    errors: list[str] = field(default_factory=list, repr=False)

    def row(self) -> dict[str, Any]:
        d = asdict(self)
        del d["tokens"], d["errors"]
        if d["acceptance"] is None:
            del d["acceptance"]
        return d


def prompts_for(vocab: int, num_prompts: int, input_len: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(rng_seed(seed))
    return [rng.integers(3, vocab, size=input_len).tolist() for _ in range(num_prompts)]


def check_levels(concurrency: list[int]) -> None:
    bad = [c for c in concurrency if c < 1]
    if bad or not concurrency:
        raise ConfigError(f"concurrency {','.join(map(str, concurrency))}: every level must be >= 1")


def ttft_ms(seconds: list[float]) -> tuple[float, float, float]:
    """A rung's TTFTs (seconds) as its mean, median and max in ms (zeros when no request got a token)."""
    if not seconds:
        return 0.0, 0.0, 0.0
    return (round(1000 * float(np.mean(seconds)), 2), round(1000 * float(np.median(seconds)), 2),
            round(1000 * max(seconds), 2))


def run_rung(engine: LLMEngine, c: int, prompts: list[list[int]], output_len: int | list[int],
             on_done: Any = None) -> Rung:
    """Keep c requests in flight until every prompt ran; output_len may differ per prompt."""
    lens = output_len if isinstance(output_len, list) else [output_len] * len(prompts)
    check_levels([c])
    spec = engine.runner.proposer
    proposed0, accepted0 = (spec.num_proposed, spec.num_accepted) if spec else (0, 0)
    queue = list(enumerate(prompts))
    in_flight: dict[str, tuple[int, Request]] = {}
    done: dict[int, Request] = {}
    t0 = time.monotonic()
    while queue or in_flight:
        while queue and len(in_flight) < c:
            i, p = queue.pop(0)
            req = engine.add_request(p, SamplingParams(temperature=0.0, max_tokens=lens[i], ignore_eos=True))
            in_flight[req.id] = (i, req)
        if not in_flight:  # a bounded wait: a rung that can never admit a request fails, never spins
            raise EngineInvariantError(f"concurrency {c}: no request in flight and {len(queue)} waiting")
        engine.step()
        for rid, (i, req) in list(in_flight.items()):
            if req.is_finished:
                del in_flight[rid]
                done[i] = req
                if on_done:
                    on_done()
    wall = time.monotonic() - t0
    reqs = [done[i] for i in range(len(prompts))]
    ok = [r for r in reqs if r.finish_reason != "error"]
    ttft = [r.first_token_time - r.arrival for r in ok if r.first_token_time is not None]
    tpot = [(r.finish_time - r.first_token_time) / (len(r.output_ids) - 1)  # type: ignore[operator]
            for r in ok if len(r.output_ids) > 1]
    acceptance = None
    if spec is not None:
        proposed = spec.num_proposed - proposed0
        acceptance = round((spec.num_accepted - accepted0) / proposed, 3) if proposed else 0.0
    ttft_mean, ttft_median, ttft_max = ttft_ms(ttft)
    return Rung(c, len(reqs), len(ok), len(reqs) - len(ok),
                round(sum(len(r.output_ids) for r in ok) / wall, 1), ttft_mean,
                round(1000 * float(np.mean(tpot)), 3) if tpot else 0.0, ttft_median, ttft_max,
                acceptance, [list(r.output_ids) for r in reqs], [r.error for r in reqs if r.error])


def run_ladder(engine: LLMEngine, concurrency: list[int], input_len: int, output_len: int, num_prompts: int,
               seed: int = 0, show_progress: bool = False) -> list[Rung]:
    """One rung per level. Progress (show_progress): a bar on a terminal, else one plain line per rung."""
    import sys
    import time

    check_levels(concurrency)
    prompts = prompts_for(engine.vocab_size, num_prompts, input_len, seed)
    if not show_progress:
        return [run_rung(engine, c, prompts, output_len) for c in concurrency]
    if not sys.stderr.isatty():
        rungs = []
        for c in concurrency:
            t0 = time.monotonic()
            rungs.append(run_rung(engine, c, prompts, output_len))
            print(f"vt ladder: c={c} done: {num_prompts} requests in {time.monotonic() - t0:.1f}s",
                  file=sys.stderr, flush=True)
        return rungs
    from rich.console import Console
    from rich.progress import Progress

    rungs = []
    with Progress(console=Console(stderr=True), transient=True) as bar:
        for c in concurrency:
            task = bar.add_task(f"c={c}", total=num_prompts)
            rungs.append(run_rung(engine, c, prompts, output_len, on_done=lambda t=task: bar.advance(t)))
    return rungs
