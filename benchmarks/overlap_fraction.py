"""How many steps async scheduling may overlap in steady serving (issue 26/28): the CPU engine with async
scheduling asked for, a closed loop at concurrency C (a new request each time one finishes, as `vt bench serve`
keeps C in flight), output lengths drawn uniformly from [out/2, 3*out/2] so requests do not finish in waves.
A step with an admission or a prefill chunk runs after the one before is applied (README, Async scheduling), so
the GPU waits for the host on it; this counts those steps. Scheduling only: no timing.

    .venv/bin/python benchmarks/overlap_fraction.py [--concurrency 32 128] [--requests 5] [--out 64]
"""

from __future__ import annotations

import argparse
import random

from vt import LLM, SamplingParams


def fraction(concurrency: int, num_requests: int, out: int, prompt_len: int = 200) -> tuple[int, int]:
    llm = LLM(model="tiny-qwen3", max_model_len=1024, num_blocks=concurrency * 48 + 64, max_num_seqs=concurrency,
              async_scheduling=True)
    engine, rng, overlaps = llm.engine, random.Random(0), []
    can_overlap = engine._can_overlap
    engine._can_overlap = lambda so: overlaps.append(can_overlap(so)) or overlaps[-1]  # type: ignore[method-assign]

    def add(i: int) -> None:
        length = rng.randint(out // 2, out * 3 // 2)
        engine.add_request([3 + (i + j) % 400 for j in range(prompt_len)],
                           SamplingParams(temperature=0, max_tokens=length, ignore_eos=True))

    added = concurrency
    for i in range(concurrency):
        add(i)
    while engine.has_unfinished():
        for r in engine.step():
            if r.is_finished and added < num_requests:
                add(added)
                added += 1
    return sum(overlaps), len(overlaps)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--requests", type=int, default=4, help="requests per concurrency slot")
    ap.add_argument("--out", type=int, default=64)
    args = ap.parse_args()
    if min(args.concurrency + [args.requests]) < 1 or args.out < 2:
        ap.error("--concurrency and --requests take positive ints, --out one of at least 2")
    print("| concurrency | steps | may overlap |\n|---|---|---|")
    for c in args.concurrency:
        yes, total = fraction(c, c * args.requests, args.out)
        print(f"| {c} | {total} | {yes} ({100 * yes / max(1, total):.0f}%) |", flush=True)


if __name__ == "__main__":
    main()
