"""GPU decode-step benchmarks (GPU lane): vt eager vs graph replay at batch 1, 8, 32, and the same
model shape as a plain torch CUDAGraph replay (the anchor). Ratios are read off one run."""

from __future__ import annotations

import pytest

from seams.harness import SeamHarness

pytestmark = pytest.mark.gpu
BATCHES = [1, 8, 32]


def _harness(batch: int, graphs: bool) -> SeamHarness:
    """tiny-qwen3 on CUDA at `batch`, warmed through cold, capture and a first replay."""
    h = SeamHarness("tiny-qwen3", "cuda", graphs=graphs, max_num_seqs=32)
    h.start(batch)
    inputs = h.inputs()
    for _ in range(3):
        h.driver.step(inputs)
    return h


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_vt_decode_step(benchmark, mode: str, batch: int) -> None:
    """The whole step the engine pays: stage inputs, run (or replay), read the logits back."""
    h = _harness(batch, graphs=mode == "graph")
    inputs = h.inputs()
    benchmark.group = f"decode step B={batch}"
    if mode == "graph":
        benchmark.extra_info["graph_nodes"] = h.driver.last_slot.graph.num_nodes  # type: ignore[union-attr]
    benchmark(h.driver.step, inputs)
    if mode == "graph":
        assert h.driver.num_replays > 3


@pytest.mark.parametrize("batch", BATCHES)
def test_vt_graph_replay_only(benchmark, batch: int) -> None:
    """Replay + sync alone (no staging, no read-back): comparable to the torch replay below."""
    h = _harness(batch, graphs=True)
    slot, stream = h.driver.last_slot, h.driver.stream
    assert slot is not None and slot.graph is not None

    def replay() -> None:
        slot.graph.replay(stream)
        stream.handle.synchronize()

    benchmark.group = f"decode step B={batch}"
    benchmark(replay)


@pytest.mark.parametrize("batch", BATCHES)
def test_vt_host_overhead_per_replay(benchmark, batch: int) -> None:
    """Host-side cost of one replay launch (no sync): the Python floor per graphed step."""
    h = _harness(batch, graphs=True)
    slot, stream = h.driver.last_slot, h.driver.stream
    benchmark.group = f"host overhead B={batch}"
    benchmark.pedantic(lambda: slot.graph.replay(stream), rounds=200, iterations=1)  # type: ignore[union-attr]
    stream.handle.synchronize()


def _torch_graph(batch: int, fused: bool = False):
    """The torch anchor at `batch`, warmed on a side stream and captured; with its graph's node count."""
    import torch

    from backends import cugraph
    from benchmarks.torch_tiny import TorchTinyQwen3, TorchTinyQwen3Fused

    m = (TorchTinyQwen3Fused if fused else TorchTinyQwen3)(batch)
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            m.step()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        m.step()
        kinds = cugraph.node_kinds(torch.cuda.current_stream().cuda_stream)
    return m, g, sum(kinds.values())


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("ops", ["plain", "fused"])
def test_torch_cudagraph_anchor(benchmark, ops: str, batch: int) -> None:
    """Replay + sync alone: the anchor for test_vt_graph_replay_only. "plain": the step in elementwise
    torch ops, as vt's kernels are written; "fused": with torch's fused ops (rms_norm, SDPA, silu),
    fewer kernels than vt's one-xp-source kernels can express."""
    torch = pytest.importorskip("torch")
    _, g, nodes = _torch_graph(batch, fused=ops == "fused")

    def replay() -> None:
        g.replay()
        torch.cuda.synchronize()

    benchmark.group = f"decode step B={batch}"
    benchmark.extra_info["graph_nodes"] = nodes
    benchmark(replay)


@pytest.mark.parametrize("batch", BATCHES)
def test_torch_graphed_step(benchmark, batch: int) -> None:
    """The whole step in torch, as test_vt_decode_step[graph] measures vt's: stage the step's token ids
    and positions from the host, replay, read the logits back. The anchor for vt's graphed step."""
    torch = pytest.importorskip("torch")
    m, g, nodes = _torch_graph(batch)
    host = torch.zeros(batch, dtype=torch.long)

    def step():
        m.tokens.copy_(host)
        m.pos.copy_(host + batch)
        g.replay()
        return m.logits.cpu()

    benchmark.group = f"decode step B={batch}"
    benchmark.extra_info["graph_nodes"] = nodes
    benchmark(step)
