"""Sampling cost per decode step at Qwen3's vocabulary (151,936) and B = 1, 8, 32, before and after the
device sampler (issue 13), ratios read off one run.

- before: what the engine did until the device sampler: the [B, vocab] float32 logits copied to the
  host, then one request at a time filtered and drawn in NumPy (`legacy_sample`, that code as it was).
- after: one launch of the batched sampler over the B rows (vt/engine/sample/sampler.py); the host reads back
  B ids. On the CPU backend the launch is the NumPy kernel (the host does the device's work there); on
  CUDA (gpu marker) it is the kernel inside a captured graph, and the host pays the replay and B ids.
Two parameter sets: temperature only, and Qwen3's defaults (temperature 0.6, top-k 20, top-p 0.95).
"""

from __future__ import annotations

import numpy as np
import pytest

from vt.engine.sample.sampler import NF, NI, NLP, RowSpec, pack, sample_tokens
from vt.registry import make_backend

VOCAB = 151_936
BATCHES = [1, 8, 32]
PARAMS = {"temperature": dict(temperature=1.0), "qwen3": dict(temperature=0.6, top_k=20, top_p=0.95)}
GPU_BATCHES = [*BATCHES, 64, 128, 256]  # the captured kernels only: the host samplers at 256 rows take minutes
GPU_PARAMS = {**PARAMS, "greedy": dict(temperature=0.0),  # the harness alone: replay, read back
              "qwen3-min-p": dict(temperature=0.6, top_k=20, top_p=0.95, min_p=0.05),
              "top-p": dict(temperature=1.0, top_p=0.9)}  # top-p alone: the general passes, after the graph


def legacy_sample(row: np.ndarray, temperature: float, top_k: int, top_p: float, rng: np.random.Generator) -> int:
    """The host sampler as it was before the device sampler (per request, float64, a Gumbel draw over
    the whole vocabulary)."""
    x = row.astype(np.float64) / temperature
    if 0 < top_k < x.size:
        kth = np.partition(x, -top_k)[-top_k]
        x = np.where(x >= kth, x, -np.inf)
    if top_p < 1.0:
        probs = np.exp(x - x.max())
        probs /= probs.sum()
        alive = np.flatnonzero(np.isfinite(x))
        order = alive[np.argsort(-probs[alive], kind="stable")]
        keep = order[: int(np.searchsorted(np.cumsum(probs[order]), top_p)) + 1]
        mask = np.full(x.shape, -np.inf)
        mask[keep] = 0.0
        x = x + mask
    u = rng.random(x.shape[0])
    return int(np.argmax(x - np.log(-np.log(np.clip(u, 1e-300, 1.0 - 1e-16)))))


def _logits(batch: int) -> np.ndarray:
    return (np.random.default_rng(batch).standard_normal((batch, VOCAB)) * 3).astype(np.float32)


OUT_IDS = 8  # DeviceRows.t: logits, fparams, iparams, hist, hist_raw, bias ids / values / raw, out_ids, logprobs


class DeviceRows:
    """The sampler's device tensors for one batch, staged once (a decode step restages only params)."""

    def __init__(self, backend: str, batch: int, params: dict) -> None:
        b = self.backend = make_backend(backend)
        rows = pack([RowSpec(**params, seed=i, counter=0) for i in range(batch)], batch, 1)
        shapes = [((batch, VOCAB), np.float32), ((batch, NF), np.float32), ((batch, NI), np.int64),
                  ((batch, 1), np.int64), ((batch, 1), np.float32), ((batch, 1), np.int64), ((batch, 1), np.float32),
                  ((batch, 1), np.float32), ((batch,), np.int64),
                  ((batch, NLP), np.float32), ((batch, NLP), np.int64)]
        self.t = [b.empty(s, d) for s, d in shapes]
        self.host_logits = _logits(batch)
        for i, host in ((1, rows.fparams), (2, rows.iparams), (3, np.zeros((batch, 1), np.int64))):
            b.copy_h2d(self.t[i], host)

    def step(self) -> np.ndarray:
        b = self.backend
        b.copy_h2d(self.t[0], self.host_logits)  # the forward's output (the sampler penalizes in place)
        b.launch(sample_tokens, *self.t)
        return b.copy_d2h(self.t[OUT_IDS])


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("params", list(PARAMS))
def test_before_host_sampling(benchmark, params: str, batch: int) -> None:
    logits, p, rng = _logits(batch), PARAMS[params], np.random.default_rng(0)
    benchmark.group = f"sampling {params} B={batch}"

    def step() -> list[int]:
        host = logits.copy()  # the [B, vocab] read-back
        return [legacy_sample(host[i], p["temperature"], p.get("top_k", 0), p.get("top_p", 1.0), rng)
                for i in range(batch)]

    assert len(benchmark(step)) == batch


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("params", list(PARAMS))
def test_after_batched_sampler_cpu(benchmark, params: str, batch: int) -> None:
    rows = DeviceRows("cpu", batch, PARAMS[params])
    benchmark.group = f"sampling {params} B={batch}"
    ids = benchmark(rows.step)
    assert ids.shape == (batch,) and (ids >= 0).all()


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["block", "split"])
@pytest.mark.parametrize("batch", GPU_BATCHES)
@pytest.mark.parametrize("params", list(GPU_PARAMS))
def test_after_batched_sampler_cuda_graph(benchmark, params: str, batch: int, kernel: str) -> None:
    """The sampler captured in a CUDA graph, as it runs in the decode graph: replay, then read back B ids. block:
    a block per row; split: SPLIT blocks per row (issue 29's goals: <= 60 us at B=1 and <= 150 us at B=256 with
    top-k + top-p + min-p, <= 25 us at B=1 with temperature alone). As the graph driver runs it: the graph holds
    the candidate and plain-mass launches; rows that need the general passes get them after the replay. The ids
    come back through CuPy's `get` (a copy to pageable memory); the next benchmark reads them as the engine does."""
    rows, step = _captured_sampler(params, batch, kernel)
    benchmark.group = f"sampling {params} B={batch}"
    ids = benchmark(lambda: step(lambda t: rows.backend.copy_d2h(t)))
    assert ids.shape == (batch,) and (ids >= 0).all()


@pytest.mark.gpu
@pytest.mark.parametrize("batch", GPU_BATCHES)
@pytest.mark.parametrize("params", list(GPU_PARAMS))
def test_after_batched_sampler_cuda_graph_engine_readback(benchmark, params: str, batch: int) -> None:
    """The split sampler's replay as above, its B ids read back the way the graph driver reads a step's ids
    (vt/engine/worker/readback.py: an async copy into pinned memory, then the host waits on the copy's event).
    On the H200 this reads slower than CuPy's `get` (session 18: greedy B=1 23.5-25.8 us against 18.1-18.2):
    here the Readback's Python bookkeeping sits on the host's critical path, which in the engine overlaps the
    next step. So the harness's `get` does not inflate issue 29's figure against the engine's own read-back."""
    from vt.engine.worker.readback import Readback

    rows, step = _captured_sampler(params, batch, "split")
    readback: list[Readback] = []

    def read(t):  # the driver's read-back, on its compute stream (async scheduling's placement)
        if not readback:
            readback.append(Readback(rows.backend, rows.backend.current_stream(), on_compute=True))
        return readback[0].start([t]).wait()[0]

    benchmark.group = f"sampling {params} B={batch}"
    ids = benchmark(lambda: step(read))
    assert ids.shape == (batch,) and (ids >= 0).all()
    assert np.array_equal(ids, step(lambda t: rows.backend.copy_d2h(t)))  # the same ids as CuPy's copy


@pytest.mark.gpu
@pytest.mark.parametrize("batch", GPU_BATCHES)
@pytest.mark.parametrize("params", list(GPU_PARAMS))
def test_after_batched_sampler_cuda_graph_device_time(benchmark, params: str, batch: int) -> None:
    """The split sampler's device time, as a decode step pays it: REPLAYS replays back to back, one synchronize at
    the end, the round's time over REPLAYS (the ids are read once, after). In the engine the sampler is a tail of the
    decode graph and its ids come back with the step's; the harness above adds a replay's launch and a read-back of
    its own to each, host time that session 49 measured at 17-19 us of its 28 (H200, B=1, temperature)."""
    import cupy

    rows, step = _captured_sampler(params, batch, "split")
    benchmark.group = f"sampling {params} B={batch} (device time)"

    def replays() -> None:
        for _ in range(REPLAYS):
            step(lambda t: None)
        cupy.cuda.runtime.deviceSynchronize()

    benchmark.pedantic(replays, rounds=20, iterations=1, warmup_rounds=2)
    benchmark.extra_info["us_per_replay_min"] = 1e6 * benchmark.stats.stats.min / REPLAYS
    benchmark.extra_info["us_per_replay_median"] = 1e6 * benchmark.stats.stats.median / REPLAYS
    ids = step(lambda t: rows.backend.copy_d2h(t))
    assert ids.shape == (batch,) and (ids >= 0).all()


REPLAYS = 100


def _captured_sampler(params: str, batch: int, kernel: str):
    """The sampler of B rows captured in a graph on its own stream, and a step(read) that replays it (then the
    general passes when a row needs them) and returns read(the ids tensor), on that stream."""
    from vt.capture import GraphCaptureScope
    from vt.engine.sample.sampler import needs_general, sample_general
    from vt.engine.worker.graph_driver import split_scratch

    rows = DeviceRows("cuda", batch, GPU_PARAMS[params])
    b = rows.backend
    scratch = split_scratch(b, batch) if kernel == "split" else ()
    packed = pack([RowSpec(**GPU_PARAMS[params])], 1, 1)
    general = bool(scratch) and needs_general(packed.fparams, packed.iparams, VOCAB)
    stream = b.new_stream()
    with b.use_stream(stream):
        rows.step()  # compile and warm, outside the capture
        b.launch(sample_tokens, *rows.t, *scratch, general=False)
        b.launch(sample_general, *rows.t, *scratch)
        scope = GraphCaptureScope(b, stream, enabled=True)
        with scope:
            b.launch(sample_tokens, *rows.t, *scratch, general=False)
    assert scope.graph is not None

    def step(read) -> np.ndarray:
        scope.graph.replay(stream)  # type: ignore[union-attr]
        with b.use_stream(stream):
            if general:
                b.launch(sample_general, *rows.t, *scratch)
            return read(rows.t[OUT_IDS])

    return rows, step


@pytest.mark.gpu
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("params", list(PARAMS))
def test_before_host_sampling_after_a_cuda_readback(benchmark, params: str, batch: int) -> None:
    """The old CUDA path: copy [B, vocab] logits to the host, then sample there request by request."""
    rows, p, rng = DeviceRows("cuda", batch, PARAMS[params]), PARAMS[params], np.random.default_rng(0)
    b = rows.backend
    b.copy_h2d(rows.t[0], rows.host_logits)

    def step() -> list[int]:
        host = b.copy_d2h(rows.t[0])
        return [legacy_sample(host[i], p["temperature"], p.get("top_k", 0), p.get("top_p", 1.0), rng)
                for i in range(batch)]

    benchmark.group = f"sampling {params} B={batch}"
    assert len(benchmark(step)) == batch
