"""The captured split sampler at B=1, by params: its device time a replay (200 replays back to back, one
synchronize) and the harness's round trip (replay, then CuPy's read-back). Session 49, run 2."""

import sys
import time

sys.path.insert(0, ".")

import cupy as cp  # noqa: E402

from benchmarks.test_sampler_bench import _captured_sampler  # noqa: E402


def main() -> None:
    for params in ("greedy", "temperature", "qwen3-min-p"):
        rows, step = _captured_sampler(params, 1, "split")
        read = rows.backend.copy_d2h
        step(read)
        t0 = time.perf_counter()
        for _ in range(200):
            step(lambda t: None)
        cp.cuda.Device().synchronize()
        wall = (time.perf_counter() - t0) / 200 * 1e6
        t0 = time.perf_counter()
        for _ in range(200):
            step(read)
        synced = (time.perf_counter() - t0) / 200 * 1e6
        print(f"{params}: back-to-back {wall:.1f} us/replay; replay+get {synced:.1f} us")


main()
