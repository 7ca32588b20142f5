"""The captured split sampler at B=1, by params: its device time a replay (200 replays back to back, one
synchronize), the harness's round trip (replay, then CuPy's pageable read-back), and the engine's round trip
(replay, then the ids copied into a pinned buffer and an event waited on, as the runner reads a step's tokens).
Session 49, run 2; the engine's path added in session 51."""

import sys
import time

sys.path.insert(0, ".")

import cupy as cp  # noqa: E402

from benchmarks.test_sampler_bench import _captured_sampler  # noqa: E402


def timed(step, read, reps: int = 200) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        step(read)
    return (time.perf_counter() - t0) / reps * 1e6


def engine_read(b):
    """The runner's read-back: into a pinned buffer, made once, then an event waited on."""
    pinned = []

    def read(ids):
        if not pinned:
            pinned.append(b.pinned_empty(ids.shape, ids.dtype))
        b.copy_d2h_async(ids, pinned[0])
        b.host_wait(b.record_event())
        return pinned[0]

    return read


def main() -> None:
    for params in ("greedy", "temperature", "qwen3-min-p"):
        rows, step = _captured_sampler(params, 1, "split")
        b = rows.backend
        pinned_read = engine_read(b)

        step(b.copy_d2h)
        step(pinned_read)
        t0 = time.perf_counter()
        for _ in range(200):
            step(lambda t: None)
        cp.cuda.Device().synchronize()
        wall = (time.perf_counter() - t0) / 200 * 1e6
        samples = {name: sorted(timed(step, read, 50) for _ in range(8))
                   for name, read in (("get", b.copy_d2h), ("pinned", pinned_read))}
        print(f"{params}: back-to-back {wall:.1f} us/replay; replay+get min/median "
              f"{samples['get'][0]:.1f}/{samples['get'][4]:.1f} us; replay+pinned event (the engine's path) "
              f"{samples['pinned'][0]:.1f}/{samples['pinned'][4]:.1f} us")


main()
