"""The CUDA backend against the CPU simulation (GPU lane: every test here is marked `gpu`)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from seams.harness import SeamHarness
from tests.backends.test_cupy_model import first_difference

pytestmark = pytest.mark.gpu
MODELS = ["tiny-qwen3", "tiny-qwen3-moe"]
REL_TOL = 1e-4
REL_TOL_BF16 = 2e-2  # the same rounded operands; float32 sums in another order can flip a bf16 rounding


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "replayed"])
@pytest.mark.parametrize("model", MODELS)
def test_cuda_logits_match_the_cpu_backend(model: str, graphs: bool, dtype: str, capsys) -> None:
    """bf16 / fp16: cuBLAS GemmEx on CUDA, the same rounded operands widened into NumPy on the CPU."""
    tol = REL_TOL if dtype == "float32" else REL_TOL_BF16
    cpu = SeamHarness(model, "cpu", graphs=graphs, dtype=dtype)
    gpu = SeamHarness(model, "cuda", graphs=graphs, dtype=dtype)
    cpu.start(4)
    gpu.start(4)
    for a, b in zip(gpu.prefill_logits, cpu.prefill_logits):
        assert rel_err(a, b) < tol, "prefill logits"
    gpu.force_prompt_tokens(cpu)
    worst = 0.0
    for step in range(5):
        want = cpu.step()
        got = gpu.step(tokens=[int(np.argmax(r)) for r in want])  # walk the CPU's trajectory
        worst = max(worst, rel_err(got, want))
        assert rel_err(got, want) < tol, f"decode step {step}: rel err {rel_err(got, want):.2e}"
    with capsys.disabled():
        print(f"\n[{model} {dtype} graphs={graphs}] CUDA vs CPU decode logits: max rel err {worst:.2e}")
    if graphs:
        assert gpu.driver.num_replays > 0, "non-vacuity: the GPU replayed captured graphs"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("model", MODELS)
def test_G1_cuda_capture_allocates_nothing_after_drain(model: str, batch: int, dtype: str) -> None:
    h = SeamHarness(model, "cuda", dtype=dtype)
    h.start(batch)
    h.step()
    assert not h.is_captured
    assert h.pool.drain() > 0, "precondition: the drain really emptied the free lists"
    h.backend.reset_counters()
    h.step()
    assert h.is_captured
    needed = sum(h.driver.last_slot.demand.values())  # type: ignore[union-attr]
    assert h.backend.allocs_in_step >= needed > 0, "non-vacuity: the pre-grow refilled the profile"
    assert h.backend.allocs_in_capture == 0, f"{h.backend.allocs_in_capture} cudaMalloc(s) inside the capture"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("model", [*MODELS, "tiny-qwen3-draft"])
def test_demand_profile_parity_cpu_and_cuda_identical(model: str, batch: int, dtype: str, capsys) -> None:
    """The same cold decode step on both backends: the same pool traffic, event for event (so the same
    demand profile), CuPy's hidden temporaries included. The CPU backend models them
    (backends/cupy_model.py); the H200 trace is also kept as a CPU-lane fixture. The kernel library's
    operations allocate nothing on CUDA (their outputs are preallocated), as their twins are charged."""
    cpu, gpu = SeamHarness(model, "cpu", dtype=dtype), SeamHarness(model, "cuda", dtype=dtype)
    cpu.start(batch)
    gpu.start(batch)
    cpu.backend.attribution.bytes.clear()
    gpu.backend.attribution.bytes.clear()
    ev_cpu, ev_gpu = cpu.traced_step(), gpu.traced_step()
    d_cpu, d_gpu = cpu.driver.last_slot.demand, gpu.driver.last_slot.demand  # type: ignore[union-attr]
    hidden = {k: v for k, v in gpu.backend.attribution.bytes.items() if k != "<outside a launch>"}
    with capsys.disabled():
        print(f"\n[{model} {dtype} B={batch}] profile {len(d_gpu)} classes / {sum(d_gpu.values())} blocks on CUDA, "
              f"{len(d_cpu)} / {sum(d_cpu.values())} on the CPU; {len(ev_gpu)} pool events; "
              f"CuPy temporaries by kernel (bytes): {hidden}")
    out = os.environ.get("VT_GPU_LANE_OUT")
    if out:  # the GPU lane keeps the trace: tests/backends/data holds it as the CPU-lane fixture
        suffix = "" if dtype == "float32" else "-" + dtype
        with open(os.path.join(out, f"cupy-trace-{model}-B{batch}{suffix}.json"), "w") as f:
            json.dump({"events": ev_gpu, "demand": {str(k): v for k, v in sorted(d_gpu.items())}}, f)
    fused = {"embed", "add_rms_norm", "qk_norm_rope_store", "silu_mul", "paged_decode_attention", "matmul",
             "sample_tokens", "moe_route", "moe_group", "moe_gemm", "moe_combine", "moe_gemm_rows",
             "moe_route_gemm_rows", "moe_norm_route_gemm_rows", "moe_combine_add_rms_norm", "feed_tokens",
             "keep_sampled", "gemm_add_rms_norm", "gemm_silu_mul"}
    assert not fused & hidden.keys(), f"a kernel of the library allocated on CUDA (bytes by kernel): {hidden}"
    assert ev_gpu, "non-vacuity: the step drew pool blocks"
    assert ev_cpu == ev_gpu, "cpu vs cuda: " + first_difference(ev_cpu, ev_gpu)
    assert d_cpu == d_gpu
    assert cpu.backend.attribution.bytes == gpu.backend.attribution.bytes


@pytest.mark.parametrize("model", MODELS)
def test_engine_on_cuda_graphs_on_and_off_same_greedy_tokens(model: str) -> None:
    from vt.engine.config import EngineConfig
    from vt.engine.front.ladder import run_ladder
    from vt.engine.front.llm_engine import LLMEngine

    def tokens(eager: bool):
        e = LLMEngine(EngineConfig(model=model, backend="cuda", max_model_len=256, num_blocks=128,
                                   max_num_seqs=8, enforce_eager=eager))
        rungs = run_ladder(e, [1, 4, 8], input_len=20, output_len=16, num_prompts=8)
        assert all(r.ok == r.n for r in rungs)
        return [r.tokens for r in rungs], e.runner.decoder.num_replays

    on, replays = tokens(False)
    off, none = tokens(True)
    assert on == off and replays > 0 and none == 0


def _gemm(xp, a, b, out) -> None:
    xp.matmul(a, b, out=out)


def test_cublas_draws_no_device_memory_of_its_own() -> None:
    """After warm-up (module loading takes 2 MiB once), a GEMM on a fresh stream through the backend's
    handle (stream and workspace preset) takes no device memory, so none can be taken in a capture.
    Non-vacuity: the same measurement sees a 4 MiB driver allocation."""
    from backends.cuda import CudaBackend

    b = CudaBackend()
    rt = b.cp.cuda.runtime
    x, w, o = b.empty((64, 256), np.float32), b.empty((256, 512), np.float32), b.empty((64, 512), np.float32)

    def free_after(fn) -> int:
        rt.deviceSynchronize()
        before = rt.memGetInfo()[0]
        fn()
        rt.deviceSynchronize()
        return before - rt.memGetInfo()[0]

    free_after(lambda: b.launch(_gemm, x, w, o, stream=b.new_stream()))  # warm-up: loads cuBLAS's kernels
    taken = free_after(lambda: b.launch(_gemm, x, w, o, stream=b.new_stream()))
    assert taken == 0, f"cuBLAS took {taken} bytes of device memory of its own"
    assert free_after(lambda: b.alloc(4 << 20)) >= 4 << 20, "non-vacuity: the measurement sees allocations"


def _capture_gemm(b, x, w, o):
    """A GEMM launched eagerly on a fresh stream (warm-up), then captured alone on it."""
    s = b.new_stream()
    b.launch(_gemm, x, w, o, stream=s)
    b.synchronize(s)
    b.reset_counters()
    b.begin_capture(s)
    b.launch(_gemm, x, w, o, stream=s)
    return b.end_capture(s)


def test_a_captured_gemm_allocates_no_workspace() -> None:
    """cuBLAS with no workspace of the caller's takes one inside a capture, as a cudaMallocAsync node
    (32 MiB of graph memory on the H200), which global mode lets through. The backend presets its
    handle's workspace: a captured GEMM is kernels only, and no allocation is counted.
    Non-vacuity: a bare handle, captured the same way, shows the allocation node, and vt counts it."""
    from backends import cugraph
    from backends.cublas import Cublas
    from backends.cuda import CudaBackend

    b = CudaBackend()
    x, w, o = b.empty((64, 256), np.float32), b.empty((256, 512), np.float32), b.empty((64, 512), np.float32)
    g = _capture_gemm(b, x, w, o)
    assert g.node_kinds.get(cugraph.KERNEL, 0) >= 1, "non-vacuity: the census saw the GEMM's kernel"
    assert g.node_kinds.get(cugraph.MEM_ALLOC, 0) == 0, f"allocation nodes in a captured GEMM: {g.node_kinds}"
    assert b.allocs_in_capture == 0
    b.blas = Cublas(None, 0)  # no workspace of ours
    bare = _capture_gemm(b, x, w, o)
    assert bare.node_kinds.get(cugraph.MEM_ALLOC, 0) >= 1, f"non-vacuity: {bare.node_kinds}"
    assert b.allocs_in_capture >= 1, "vt counts a library's allocation inside the capture"


def test_a_kernels_cupy_temporary_is_a_pool_block_charged_to_it() -> None:
    """An array CuPy makes itself inside a launch (`x * 2`) is a block of vt's pool, charged to that kernel, so the
    demand profile and the pre-grow see it. The step's library kernels make none (the parity test finds none), so
    this is the hook's own gate. Non-vacuity: the same expression outside a launch does not reach the pool."""
    from backends.cuda import CudaBackend

    b = CudaBackend()
    x, out = b.empty((1024,), np.float32), b.empty((1024,), np.float32)
    b.copy_h2d(x, np.arange(1024, dtype=np.float32))

    def doubles_through_a_temporary(xp, x, out) -> None:
        out[...] = x * 2

    def served() -> int:
        return b.pool.hits + b.pool.misses + b.pool.borrows

    before = served()
    b.launch(doubles_through_a_temporary, x, out)
    assert served() == before + 1, "the temporary is one pool block"
    assert b.attribution.bytes.get("doubles_through_a_temporary", 0) >= 4096, f"charged: {b.attribution.bytes}"
    assert np.array_equal(out.array().get(), np.arange(1024, dtype=np.float32) * 2)
    before = served()
    assert float((x.array() * 2).sum().get()) > 0
    assert served() == before, "non-vacuity: outside a launch CuPy's own allocator serves the same expression"


@pytest.mark.parametrize("model, q", [("tiny-qwen3", 5), ("tiny-qwen3-moe", 5), ("tiny-qwen3-draft", 1)])
def test_G8_cuda_spec_keys_capture_nothing(model: str, q: int) -> None:
    h = SeamHarness(model, "cuda")
    h.start(3, prompt_len=40)
    h.step(q=q, spec=True)
    assert not h.is_captured
    assert h.pool.drain() > 0
    h.backend.reset_counters()
    h.step(q=q, spec=True)
    assert h.is_captured and h.backend.allocs_in_capture == 0
