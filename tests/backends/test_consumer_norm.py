"""The consumer's norm (VT_CONSUMER_NORM): a decode step's o and down projections add into the residual stream x, and
the GEMMs that read the norms after them (gate/up, the next layer's q/k/v) compute RMSNorm(x) * w themselves. On the
CPU the ops compose the twins (the same float32 operations as the norm epilogue's path); on CUDA the skinny GEMM's
RESID epilogue and NORM_IN prologue (backends/kernels/skinny_gemm.cu) must give that path's x and A bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from backends.kernels import skinny_gemm as sg
from tests.backends.launches import launched_names
from tests.backends.test_skinny_gemm import operands
from vt.dtypes import widen_host

CONSUMER_OPS = {"gemm_add", "rms_norm_gemm", "rms_norm_gemm_silu_mul"}


def decode_step(backend: Any, consumer_norm: bool, name: str = "tiny-qwen3",
                moe_consumer_norm: bool = False) -> tuple[np.ndarray, list[str], Any]:
    """A tiny checkpoint's decode step of one row through the graph driver three times (cold, captured, replayed;
    eager each time in the pool-bypass lane, which captures nothing): its logits, the names of the kernels launched,
    and its config. moe_consumer_norm: its MoE layers take the consumer's norm too (VT_MOE_CONSUMER_NORM)."""
    from models.loader import load_checkpoint, resolve_model
    from models.registry import load_model
    from vt.engine.worker.graph_driver import DecodeInputs, GraphDriver

    model = load_model(load_checkpoint(resolve_model(name)), backend, "bfloat16")
    model.consumer_norm = consumer_norm
    model.moe_consumer_norm = moe_consumer_norm
    kv = model.make_kv_cache(num_blocks=16, block_size=16)
    inp = DecodeInputs(np.array([11]), np.array([20]), np.array([5 * 16 + 4]), np.array([[3, 5]]))
    driver = GraphDriver(model, kv, max_num_seqs=4)
    with launched_names(backend) as names:
        for _ in range(3):  # cold, captured, replayed
            driver.step(inp)
    return driver.last_logits(), names, model.cfg


def test_the_consumer_norm_moves_each_dense_layers_norms_into_the_gemms_that_read_them_with_the_same_logits() -> None:
    """CPU: per layer, o and down become gemm_add and gate/up rms_norm_gemm_silu_mul; each layer but the first
    projects q/k/v with rms_norm_gemm; the last down keeps the final norm (the LM head reads h). The logits are the
    norm epilogue's path's, bit for bit: the same float32 operations in the same order."""
    from vt.registry import make_backend

    plain, plain_names, _ = decode_step(make_backend("cpu"), False)
    moved, names, cfg = decode_step(make_backend("cpu"), True)
    L = cfg.num_hidden_layers
    counts = {n: names.count(n) for n in CONSUMER_OPS | {"gemm_add_rms_norm", "gemm_silu_mul"}}
    F = counts["gemm_add_rms_norm"]  # forwards run (the cold step's, the capture's): one final norm each
    assert F >= 1 and L >= 2, "non-vacuity: a forward of layers with a layer after them"
    assert counts == {"gemm_add": (2 * L - 1) * F, "rms_norm_gemm": (L - 1) * F, "rms_norm_gemm_silu_mul": L * F,
                      "gemm_add_rms_norm": F, "gemm_silu_mul": 0}, counts
    assert not CONSUMER_OPS & set(plain_names), "non-vacuity: the plain step launches none of them"
    assert np.array_equal(moved, plain), "the same logits, bit for bit"
    assert np.abs(plain).max() > 0.1, "non-vacuity: logits far from zero"


def test_the_moe_consumer_norm_moves_each_sparse_layers_norm_into_its_router_and_routed_gemm_with_the_same_logits(
        ) -> None:
    """CPU, tiny-qwen3-moe at one row: with VT_MOE_CONSUMER_NORM each MoE layer's o projection becomes gemm_add, its
    router rms_norm_gemm and its routed gate/up moe_norm_route_gemm_rows (each computing RMSNorm(x) * ln2 itself);
    without it, none of them. The logits are the norm epilogue's path's, bit for bit."""
    from vt.registry import make_backend

    plain, plain_names, cfg = decode_step(make_backend("cpu"), True, "tiny-qwen3-moe")
    moved, names, _ = decode_step(make_backend("cpu"), True, "tiny-qwen3-moe", moe_consumer_norm=True)
    sparse, F = sum(cfg.is_sparse_layer(i) for i in range(cfg.num_hidden_layers)), names.count("embed")
    assert sparse >= 2 and F >= 1 and plain_names.count("embed") == F, "non-vacuity: forwards of MoE layers"
    moves = {"moe_norm_route_gemm_rows": sparse, "moe_route_gemm_rows": -sparse, "gemm_add": sparse,
             "rms_norm_gemm": sparse, "gemm_add_rms_norm": -sparse}
    assert {n: names.count(n) - plain_names.count(n) for n in moves} == {n: c * F for n, c in moves.items()}
    assert "moe_norm_route_gemm_rows" not in plain_names, "non-vacuity: the plain step routes the written h"
    assert np.array_equal(moved, plain), "the same logits, bit for bit"
    assert np.abs(plain).max() > 0.1, "non-vacuity: logits far from zero"


@pytest.mark.parametrize("tails", [(), ("o",), ("down",), ("o", "down")], ids=lambda t: "+".join(t) or "none")
def test_the_consumer_norm_moves_only_the_norms_its_plan_runs_in_a_gemms_tail(tails: tuple[str, ...],
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the norm plan keeps the GEMM and the norm apart (cuBLASLt and the norm kernel: no grid-wide tail), the
    consumer's norm would only add kernels (H200, 0.6B at eight rows: 10% slower), so the decoder asks `fuses_norm`
    for each pair: o -> gate/up, and down -> the next q/k/v. Each moves alone, and the logits stay the same."""
    from vt.registry import make_backend

    backend = make_backend("cpu")
    inter = 192  # tiny-qwen3's intermediate size: the down GEMM's a is [T, inter]
    asked: list[str] = []

    def fuses(a: Any, b: Any, out: Any, x: Any, w: Any, h: Any, *, eps: float) -> bool:
        pair = "down" if a.shape[1] == inter else "o"
        asked.append(pair)
        return pair in tails

    monkeypatch.setattr(backend, "fuses_norm", fuses)
    moved, names, cfg = decode_step(backend, True)
    assert cfg.intermediate_size == inter != cfg.num_attention_heads * cfg.head_dim, "the pairs told apart"
    L, F = cfg.num_hidden_layers, names.count("embed")  # one embedding a forward
    o, down = "o" in tails, "down" in tails
    want = {"gemm_add": (L if o else 0) + (L - 1 if down else 0), "rms_norm_gemm": L - 1 if down else 0,
            "rms_norm_gemm_silu_mul": L if o else 0, "gemm_silu_mul": 0 if o else L,
            "gemm_add_rms_norm": (0 if o else L) + (1 if down else L)}
    assert {n: names.count(n) for n in want} == {n: c * F for n, c in want.items()}
    assert F >= 1 and asked.count("o") == L * F and asked.count("down") == (L - 1) * F, "asked once a pair"
    plain, _, _ = decode_step(make_backend("cpu"), False)
    assert np.array_equal(moved, plain), "the same logits, bit for bit"


def poison(xp: Any, t: Any) -> None:
    """What CUDA leaves unwritten, made NaN (bf16's NaN bits for a 16-bit tensor)."""
    t[...] = 0x7FC0 if t.dtype == np.uint16 else np.nan


poison.writes = (0,)  # type: ignore[attr-defined]


@pytest.mark.parametrize("moe", [False, True], ids=["dense-only", "moe-too"])
@pytest.mark.parametrize("dense_layers", [[0, 2], [1, 3]], ids=lambda d: "dense-" + "-".join(map(str, d)))
@pytest.mark.parametrize("pattern", ["always", "alternate"])
def test_with_sparse_neighbours_no_layer_reads_a_norm_the_consumers_ops_leave_unwritten(
        dense_layers: list[int], pattern: str, moe: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """A Qwen3-MoE checkpoint whose mlp_only_layers are dense, so dense layers meet sparse neighbours (a deferred
    norm before a MoE layer, a MoE layer before a normed-in q/k/v). On CUDA the consumer's ops leave h, C and gate_up
    unwritten; here they are poisoned with NaN after each such op: the logits stay the norm epilogue's, bit for bit,
    whether fuses_norm says yes to every pair or to every other one. moe-too: the MoE layers take the consumer's
    norm as well (VT_MOE_CONSUMER_NORM; its routed gate/up leaves h unwritten)."""
    from models import tiny
    from models.loader import load_checkpoint
    from models.registry import load_model
    from vt.engine.worker.graph_driver import DecodeInputs, GraphDriver
    from vt.registry import make_backend

    monkeypatch.setitem(tiny.SPECS, "tiny-qwen3-mixed", (dict(tiny._MOE, mlp_only_layers=dense_layers), 4321, None))
    path = tiny.ensure("tiny-qwen3-mixed", cache_dir=str(tmp_path))

    def step(consumer_norm: bool) -> tuple[np.ndarray, list[str]]:
        backend = make_backend("cpu")
        model = load_model(load_checkpoint(str(path)), backend, "bfloat16")
        model.consumer_norm = consumer_norm
        model.moe_consumer_norm = consumer_norm and moe
        asked, poisoned = [0], []

        def fuses(*args: Any, eps: float) -> bool:
            asked[0] += 1
            return pattern == "always" or asked[0] % 2 == 1

        def poisoning(op: str, unwritten: tuple[int, ...]) -> Any:
            run = getattr(backend, op)

            def wrapped(*args: Any, **kw: Any) -> None:
                run(*args, **kw)
                for i in unwritten:
                    backend.launch(poison, args[i])
                poisoned.append(op)
            return wrapped

        monkeypatch.setattr(backend, "fuses_norm", fuses)
        for op, unwritten in (("gemm_add", (2,)), ("rms_norm_gemm", (2,)), ("rms_norm_gemm_silu_mul", (2, 4)),
                              ("moe_norm_route_gemm_rows", (3,))):
            monkeypatch.setattr(backend, op, poisoning(op, unwritten))
        kv = model.make_kv_cache(num_blocks=16, block_size=16)
        driver = GraphDriver(model, kv, max_num_seqs=4)
        inp = DecodeInputs(np.array([11]), np.array([20]), np.array([5 * 16 + 4]), np.array([[3, 5]]))
        for _ in range(3):
            driver.step(inp)
        return driver.last_logits(), poisoned

    plain, none = step(False)
    moved, poisoned = step(True)
    assert not none and poisoned, "non-vacuity: the consumer's ops ran (and were poisoned) with it on only"
    assert ("moe_norm_route_gemm_rows" in poisoned) is moe, "non-vacuity: the MoE layers' consumer op ran where asked"
    assert np.isfinite(plain).all() and np.array_equal(moved, plain), "no NaN read: the same logits, bit for bit"


@pytest.mark.parametrize("config", sg.CONFIGS, ids=lambda c: str(c))
def test_the_normed_prologue_serves_a_configuration_only_where_its_staged_slice_fits(config: sg.Config) -> None:
    """NORM_IN stages M x its block's K slice of A in shared memory (STAGE values): a split that leaves a slice too
    long for M rows is not served, nor K in part float4s; the plain and norm-epilogue kinds are served anywhere."""
    shapes = [(1, 6144, 1024), (8, 6144, 1024), (8, 4096, 4096), (1, 128, 20000), (1, 1024, 1030), (8, 24576, 4096),
              (8, 32768, 2048), (8, 131072, 8192)]
    assert any(m * sg.split(m, n, k, config)[0] > sg.STAGE for m, n, k in shapes), "non-vacuity: a slice too long"
    for m, n, k in shapes:
        step = sg.split(m, n, k, config)[0]
        for kind in ("norm_in", "norm_in_swiglu"):
            assert sg.serves(m, n, k, config, kind) is (m * step <= sg.STAGE and k % 4 == 0), (m, n, k, kind)
        assert sg.serves(m, n, k, config, "resid") and sg.serves(m, n, k, config, "norm")
    assert sg.serves(1, 6144, 1024, config, "norm_in_swiglu"), "non-vacuity: the 0.6B gate/up is served"
    for kind in sg.CONSUMER_NORM_KINDS:
        assert not sg.serves(1, 6144, 1024, sg.CLUSTER_CONFIGS[0], kind), "the cluster kernel runs none of them"


# (rows, hidden, the producer's K, the consumer's N, whether the consumer is a gate/up): 0.6B's o then gate/up at one
# row and eight, its down then q/k/v; the 8B's (not yet run on a GPU: session 24 added them after its last run)
PAIRS = [(1, 1024, 2048, 6144, True), (8, 1024, 2048, 6144, True), (1, 1024, 3072, 4096, False),
         (1, 4096, 4096, 24576, True), (1, 4096, 12288, 6144, False),
         (1, 64, 64, 384, True)]  # K unsplit (S = 1) for tc8: the RESID and NORM_IN + SwiGLU one-slice paths


@pytest.mark.gpu
@pytest.mark.parametrize("config", sg.CONFIGS, ids=lambda c: str(c))
@pytest.mark.parametrize("m,h,k,n,swiglu", PAIRS)
def test_cuda_resid_then_norm_in_equals_the_norm_epilogue_then_its_consumer_bit_for_bit(
        m: int, h: int, k: int, n: int, swiglu: bool, config: sg.Config) -> None:
    """The producer GEMM [m, k] x [k, h] and its consumer [m, h] x [h, n] (SwiGLU where n is the gate/up width):
    the norm epilogue writing x and h, then the consumer reading h, against RESID adding into x, then NORM_IN
    computing h from x. x, and the consumer's output, equal bit for bit, twice on one scratch."""
    import cupy

    a, wp = operands(m, h, k, "bfloat16", seed=m + k)
    _, wc = operands(m, n, h, "bfloat16", seed=n)
    rng = np.random.default_rng(h)
    x0 = rng.standard_normal((m, h), dtype=np.float32)
    g = cupy.asarray((1 + 0.1 * rng.standard_normal(h)).astype(np.float32))
    if not (sg.serves(m, n, h, config, "norm_in_swiglu" if swiglu else "norm_in")):
        pytest.skip(f"{config} stages no {m} x slice of {h}")
    partials, counters = cupy.zeros(sg.SCRATCH_FLOATS, np.float32), cupy.zeros(sg.MAX_TILES, np.uint32)
    A, WP, WC = cupy.asarray(a), cupy.asarray(wp), cupy.asarray(wc)

    def consumer(out: Any, **kw: Any) -> Any:
        act = cupy.zeros((m, n // 2), np.uint16) if swiglu else None
        sg.launch(cupy, "uint16", kw.pop("a", 0), WC, out, partials, counters, m, n, h, config, act=act, **kw)
        return act if swiglu else out

    for run in range(2):
        x_old, hh = cupy.asarray(x0), cupy.zeros((m, h), np.uint16)
        c = cupy.zeros((m, h), np.float32)
        sg.launch(cupy, "uint16", A, WP, c, partials, counters, m, h, k, config, norm=(x_old, g, hh, 1e-6))
        old = consumer(cupy.zeros((m, n), np.float32), a=hh).get()
        x_new = cupy.asarray(x0)
        sg.launch(cupy, "uint16", A, WP, cupy.zeros((m, h), np.float32), partials, counters, m, h, k, config,
                  resid=x_new)
        new = consumer(cupy.zeros((m, n), np.float32), norm_in=(x_new, g, 1e-6)).get()
        assert np.array_equal(x_new.get(), x_old.get()), f"run {run}: x += C"
        assert np.array_equal(new, old), f"run {run}: the consumer's output"
        assert int(counters.sum()) == 0, f"run {run}: the counters back at zero"
    assert np.abs(x_new.get() - x0).max() > 0.1, "non-vacuity: the add moved the residual"
    assert np.abs(widen_host(old) if swiglu else old).max() > 0.01, "non-vacuity: outputs far from zero"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("T,E,k,H,MI,K", [(1, 64, 8, 2048, 768, 4096), (4, 16, 4, 96, 40, 64)],
                         ids=["30B-A3B-one-token", "small-four-tokens"])
def test_cuda_resid_then_the_normed_routed_gemm_equals_the_norm_epilogue_then_the_routed_gemm_bit_for_bit(
        T: int, E: int, k: int, H: int, MI: int, K: int, dtype: str) -> None:
    """A MoE layer's o projection [T, K] x [K, H] and its routed gate/up: the norm epilogue writing x and h, then
    moe_route_gemm_rows reading h, against RESID adding into x, then moe_norm_route_gemm_rows norming x in each
    block (h left as it was). x, the experts, their weights and the activations equal bit for bit; the activations
    are the twin's within the routed GEMM's bound."""
    import cupy

    from backends.kernels import moe
    from tests.backends.test_moe_kernels import assert_gemm_close, layer_inputs, magnitudes

    a, wp = operands(T, H, K, dtype, seed=T + K)
    lay = layer_inputs(T, E, k, H, MI, dtype, seed=H)
    rng = np.random.default_rng(H)
    x0 = (3 * rng.standard_normal((T, H))).astype(np.float32)  # RMS far from 1: the norm changes the row
    g = (1 + 0.1 * rng.standard_normal(H)).astype(np.float32)
    low = np.dtype(a.dtype)
    partials, counters = cupy.zeros(sg.SCRATCH_FLOATS, np.float32), cupy.zeros(sg.MAX_TILES, np.uint32)
    A, WP, G, W = cupy.asarray(a), cupy.asarray(wp), cupy.asarray(g), cupy.asarray(lay["w_gu"])
    logits = cupy.asarray(lay["logits"])

    def routed() -> tuple[Any, Any, Any]:
        return cupy.zeros((T, k), np.int32), cupy.zeros((T, k), np.float32), cupy.zeros((T * k, MI), low)

    x_old, h = cupy.asarray(x0), cupy.zeros((T, H), low)
    sg.launch(cupy, low, A, WP, cupy.zeros((T, H), np.float32), partials, counters, T, H, K, norm=(x_old, G, h, 1e-6))
    old = routed()
    moe.moe_route_gemm_rows(cupy, logits, h, W, *old, norm_topk_prob=True)
    x_new, stale = cupy.asarray(x0), cupy.zeros((T, H), low)
    sg.launch(cupy, low, A, WP, cupy.zeros((T, H), np.float32), partials, counters, T, H, K, resid=x_new)
    new = routed()
    moe.moe_norm_route_gemm_rows(cupy, logits, x_new, G, stale, W, *new, norm_topk_prob=True, eps=1e-6)
    assert np.array_equal(x_new.get(), x_old.get()), "x += C"
    for name, o, n in zip(("experts", "weights", "activations"), old, new):
        assert np.array_equal(n.get(), o.get()), f"the two forms' {name}"
    assert not stale.get().any(), "h is left unwritten"
    twin = (np.zeros((T, k), np.int32), np.zeros((T, k), np.float32), np.zeros((T * k, MI), low))
    h_twin = np.zeros((T, H), low)
    moe.moe_norm_route_gemm_rows(np, lay["logits"], x_new.get(), g, h_twin, lay["w_gu"], *twin, norm_topk_prob=True,
                                 eps=1e-6)
    assert np.array_equal(new[0].get(), twin[0]), "the twin's experts"
    scale = magnitudes(widen_host(h_twin)[np.arange(T * k) // k], lay["w_gu"], twin[0].reshape(-1))
    assert_gemm_close(new[2].get(), widen_host(twin[2]).astype(np.float64), scale[:, :MI] * scale[:, MI:],
                      f"normed route + gate/up {dtype}")
    assert np.abs(x_new.get() - x0).max() > 0.1, "non-vacuity: the add moved the residual"
    assert np.abs(widen_host(new[2].get())).max() > 0.01, "non-vacuity: activations far from zero"
    assert np.abs(widen_host(h_twin) - x0).max() > 0.5, "non-vacuity: the norm changed the row"


@pytest.mark.gpu
def test_on_the_gpu_a_decode_step_with_the_consumer_norm_computes_the_same_logits() -> None:
    """CUDA, bf16: the step with the consumer's norm against the norm epilogue's, whichever algorithm each plan
    picked (each GEMM's own; the logits to the GEMMs' summation orders). Every pair is moved: the guard's answer
    follows the tuner's timed picks, so left to it the consumer's ops ran in some processes and not in others (the
    H200, session 25); the guard has its own test."""
    from backends.cuda import CudaBackend

    backend = CudaBackend()
    plain, _, _ = decode_step(backend, False)
    backend.fuses_norm = lambda *args, **kw: True  # type: ignore[method-assign]
    moved, names, _ = decode_step(backend, True)
    kinds = {p.epilogue for p in backend.blas.lt.plans.values()}
    assert {"resid", "norm_in", "norm_in_swiglu"} <= kinds and CONSUMER_OPS <= set(names), "non-vacuity: its plans"
    assert np.abs(moved - plain).max() <= 0.02 * np.abs(plain).max()
    assert np.argmax(moved, -1).tolist() == np.argmax(plain, -1).tolist()


@pytest.mark.gpu
def test_on_the_gpu_a_moe_decode_step_with_the_moe_consumer_norm_computes_the_same_logits() -> None:
    """CUDA, bf16, tiny-qwen3-moe: the step whose MoE layers take the consumer's norm (o adding into x, the router
    and the routed gate/up norming x) against the norm epilogue's, every pair moved as above."""
    from backends.cuda import CudaBackend

    backend = CudaBackend()
    plain, _, _ = decode_step(backend, True, "tiny-qwen3-moe")
    backend.fuses_norm = lambda *args, **kw: True  # type: ignore[method-assign]
    moved, names, _ = decode_step(backend, True, "tiny-qwen3-moe", moe_consumer_norm=True)
    assert "moe_norm_route_gemm_rows" in names and "gemm_add" in names, "non-vacuity: the MoE consumer's ops ran"
    assert np.abs(moved - plain).max() <= 0.02 * np.abs(plain).max()
    assert np.argmax(moved, -1).tolist() == np.argmax(plain, -1).tolist()


def test_the_cuda_answer_is_the_norm_plans_pick(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA backend's fuses_norm, its plumbing on the CPU (no cuBLAS here: a stand-in CuPy module and a plan put
    in place): Cublas hands gemm_add_rms_norm's operands to CublasLt, which answers with the shape's norm plan: yes
    for a skinny configuration, no for a cuBLASLt algorithm, no where no skinny GEMM is set up."""
    import sys
    import types

    from backends.cublas import Cublas
    from backends.cublaslt import CUDA_R_16BF, CublasLt

    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(
        float32=np.float32, cuda=types.SimpleNamespace(get_current_stream=lambda: None)))
    lt = CublasLt.__new__(CublasLt)
    lt.skinny, lt.is_tuning, lt.tuning_s = (0, 0), False, 0.0
    key = (CUDA_R_16BF, 1, 1024, 2048, "norm")
    lt.plans = {key: types.SimpleNamespace(algo=sg.DEFAULT)}
    blas = Cublas.__new__(Cublas)
    blas.lt = lt
    a, b = np.zeros((1, 2048), np.uint16), np.zeros((2048, 1024), np.uint16)
    c, x, w, h = (np.zeros((1, 1024), np.float32), np.zeros((1, 1024), np.float32), np.ones(1024, np.float32),
                  np.zeros((1, 1024), np.uint16))
    assert blas.fuses_norm(a, b, c, x, w, h, eps=1e-6) is True
    lt.plans[key] = types.SimpleNamespace(algo=object())  # a cuBLASLt algorithm: GEMM, then the norm kernel
    assert blas.fuses_norm(a, b, c, x, w, h, eps=1e-6) is False
    lt.plans[key] = types.SimpleNamespace(algo=sg.DEFAULT)
    lt.skinny = None
    assert blas.fuses_norm(a, b, c, x, w, h, eps=1e-6) is False
    assert len(lt.plans) == 1, "non-vacuity: the answers came from the plan put in place, none planned anew"


def test_a_launch_naming_two_epilogues_is_refused_before_anything_compiles() -> None:
    """The kernel runs one epilogue (NORM_IN's prologue may take SwiGLU's): a launch naming two would run one and
    drop the other's outputs silently, so the binding refuses it, by name, before it looks up an instance."""
    x = np.zeros((1, 64), np.float32)
    refused = [dict(norm=(x, x, x, 1e-6), resid=x), dict(norm=(x, x, x, 1e-6), act=x), dict(act=x, resid=x),
               dict(norm_in=(x, x, 1e-6), resid=x), dict(norm_in=(x, x, 1e-6), norm=(x, x, x, 1e-6))]
    for kw in refused:
        with pytest.raises(ValueError, match="one epilogue a launch"):
            sg.kind(**kw)
    served = {sg.kind(): "", sg.kind(act=x): "swiglu", sg.kind(resid=x): "resid",
              sg.kind(norm_in=(x, x, 1e-6), act=x): "norm_in_swiglu"}
    assert all(k == v for k, v in served.items()) and len(served) == 4, "non-vacuity: one a launch is served"


def test_the_cuda_ops_refuse_a_weight_whose_rows_are_not_a_rows_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """gemm_add and rms_norm_gemm hand cuBLASLt or the skinny kernel raw pointers: B [k', n] against A [m, k] with
    k' != k would read past B, so the binding answers False (nothing launched) before the plan is asked."""
    import sys
    import types

    from backends.cublas import Cublas

    asked: list[str] = []
    blas = Cublas.__new__(Cublas)
    blas.lt = types.SimpleNamespace(gemm_add=lambda *a: asked.append("gemm_add") or True,
                                    rms_norm_gemm=lambda *a: asked.append("rms_norm_gemm") or True)
    blas.bind = lambda stream: None
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(
        float32=np.float32, cuda=types.SimpleNamespace(get_current_stream=lambda: types.SimpleNamespace(ptr=0))))
    a, c, x = np.zeros((1, 64), np.uint16), np.zeros((1, 32), np.float32), np.zeros((1, 32), np.float32)
    xk, w, h = np.zeros((1, 64), np.float32), np.ones(64, np.float32), np.zeros((1, 64), np.uint16)
    for rows in (63, 65):
        b = np.zeros((rows, 32), np.uint16)
        assert blas.gemm_add(a, b, c, x) is False and blas.rms_norm_gemm(xk, w, h, b, c, None, 1e-6) is False
    assert asked == [], "nothing reached the plan"
    b = np.zeros((64, 32), np.uint16)
    assert blas.gemm_add(a, b, c, x) and blas.rms_norm_gemm(xk, w, h, b, c, None, 1e-6), "non-vacuity: served"
    assert asked == ["gemm_add", "rms_norm_gemm"]
