"""paged_decode_attention_rows (VT_SHARED_ROWS_ATTENTION): a step whose rows share sequences (a short prefill run
whole, a row a token) attends with blocks that serve a few consecutive rows, those of one sequence reading each key
once. Each row's output is the plain decode kernel's, bit for bit, on the GPU; the CPU runs the plain kernel's twin.
The graph driver gives such steps graphs apart, and the decoder takes the kernel only there."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from backends.kernels import decode_attention
from backends.kernels.fused import HEAD_DIMS
from tests.backends.launches import launched_names
from tests.backends.test_kernels import BS, DecodeCase, assert_within_bound, decode_case, decode_reference, run_decode
from tests.helpers import flag_set
from vt.dtypes import narrow_host, widen_host

# name: (contexts, nh, nkv, table width in blocks, rows a sequence)
SHARED_CASES = {
    # a 16-token tail over a cached 1,008-token prefix: with the padding row, 17 rows x 8 KV heads, one partition
    "prefix-hit-16x1024": ([1024], 16, 8, 64, 16),
    "three-chunks-straddle": ([37, 300, 513], 8, 2, 33, 3),  # runs of 3 rows: blocks of 4 rows hold two sequences
    "one-row-each-gqa8": ([5, 64, 200], 16, 2, 16, 1),  # no two rows share: each block serves rows in turn
    "mha-partition-edges": ([256, 257], 4, 4, 17, 5),  # a run ending on a partition's edge, one just past it
}


def shared_case(name: str, hd: int, dtype: str, seed: int = 0) -> DecodeCase:
    """SHARED_CASES' rows, then one padding row (position 0 over the poisoned spare table row), as a graph bucket's."""
    contexts, nh, nkv, width, per = SHARED_CASES[name]
    c = decode_case(contexts, nh, nkv, hd, dtype, width, per, seed=seed)
    q = np.concatenate([c.q, c.q[:1]])
    token_row = np.append(c.token_row, len(contexts)).astype(np.int64)  # the spare row: every block poisoned
    positions = np.append(c.positions, 0).astype(np.int64)
    P = decode_attention.num_partitions(len(q), nkv, width, BS)
    return DecodeCase(q, c.k_cache, c.v_cache, c.tables, token_row, positions, c.out_dtype, P)


def run_rows(xp: Any, c: DecodeCase) -> np.ndarray:
    return run_decode(xp, c, decode_attention.paged_decode_attention_rows)


@pytest.mark.parametrize("case", SHARED_CASES)
def test_the_rows_op_on_the_cpu_is_dense_attention_row_by_row(case: str) -> None:
    """The CPU runs the plain kernel's twin for it: each row attends keys 0..its position of its sequence."""
    c = shared_case(case, 16, "float32")
    got = run_rows(np, c).astype(np.float64)[:-1]
    want = decode_reference(c)[:-1]
    assert np.abs(got - want).max() <= 1e-5 * (1 + np.abs(want).max()), case
    assert np.abs(want).max() > 0.1, "non-vacuity: the outputs are not all near zero"


def test_the_shared_cases_reach_what_the_kernel_must_get_right() -> None:
    """Non-vacuity of the GPU cases: partitions, blocks whose rows hold two sequences, rows that share nothing, a
    run of rows crossing a partition edge, every GQA ratio the kernel's head mapping serves."""
    R = decode_attention.ROWS_A_BLOCK
    mixed = parts = edge = 0
    for name in SHARED_CASES:
        c = shared_case(name, 16, "float32")
        mixed += sum(len(set(c.token_row[g:g + R].tolist())) > 1 for g in range(0, len(c.token_row), R))
        parts = max(parts, c.num_partitions)
        part = decode_attention.partition_size(len(c.q), c.k_cache.shape[2], c.tables.shape[1] * BS)
        ctx = c.positions + 1
        edge += bool(c.num_partitions > 1 and ((ctx % part == 0) | (ctx % part == 1)).any())
    assert mixed and parts > 1 and edge, (mixed, parts, edge)
    assert {v[1] // v[2] for v in SHARED_CASES.values()} >= {1, 2, 4, 8}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("case", SHARED_CASES)
def test_cuda_rows_kernel_equals_the_plain_kernel_bit_for_bit(case: str, dtype: str) -> None:
    """Each row's output (or partition's partials, through the same reduce) equals the plain kernel's bit for bit at
    every head dim; NaN-poisoned keys past every context (and the padding row's poisoned table) never reach a live
    row; both within the twin's bound."""
    import cupy

    for hd in HEAD_DIMS:
        c = shared_case(case, hd, dtype, seed=hd)
        got, plain = run_rows(cupy, c), run_decode(cupy, c)
        live = slice(0, len(c.q) - 1)
        assert np.isfinite(widen_host(got[live])).all(), f"hd={hd}: a poisoned key or value was read"
        assert np.array_equal(got[live], plain[live]), f"hd={hd}: not the plain kernel's output ({differs(got, plain)})"
        assert_within_bound(got[live], run_decode(np, c)[live], f"rows attention {case} hd={hd} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_rows_kernel_never_weighs_a_later_rows_key(dtype: str) -> None:
    """A run's later rows' keys sit inside the block's reach: an earlier row never weighs them, not even as 0 x inf.
    The last row's own value is inf (an overflowed cache entry); every earlier row still equals the plain kernel."""
    import cupy

    for hd in HEAD_DIMS:
        c = shared_case("prefix-hit-16x1024", hd, dtype, seed=hd)
        ctx = int(c.positions[-2]) + 1  # the last live row's context: its own key is ctx - 1
        block = c.tables[c.token_row[-2], (ctx - 1) // BS]
        c.v_cache[block, (ctx - 1) % BS] = narrow_host(np.full(1, np.inf, np.float32), c.v_cache.dtype)[0]
        got, plain = run_rows(cupy, c), run_decode(cupy, c)
        earlier = slice(0, len(c.q) - 2)
        assert np.isfinite(widen_host(got[earlier])).all(), f"hd={hd}: an earlier row weighed the later row's value"
        assert np.array_equal(got[earlier], plain[earlier]), \
            f"hd={hd}: not the plain kernel's output ({differs(got[earlier], plain[earlier])})"
        assert not np.isfinite(widen_host(plain[-2])).all(), "non-vacuity: the last row itself reads the inf"


def test_the_driver_names_a_run_of_one_table_by_its_first_row() -> None:
    """A short step's rows carry a copy of their sequence's table each (runner._prefill_whole): the driver stages one
    token_row for a run of equal tables, so the rows kernel sees one sequence's tokens as one; the padding rows (all
    trash tables) are one run named by the first of them; decode steps keep a row each."""
    from vt.engine.worker.graph_driver import shared_token_rows

    a, b = np.array([3, 5, 6, 0]), np.array([7, 1, 2, 4])
    tables = np.stack([a, a, a, b, b, a])  # a's chunk, b's, then a row of a again (not a run with the first)
    assert shared_token_rows(tables, 8).tolist() == [0, 0, 0, 3, 3, 5, 6, 6]
    assert shared_token_rows(tables[:1], 3).tolist() == [0, 1, 1], "one row, then padding"
    _, _, driver = step_launches(True, True)
    n = driver.last_slot.token_row.shape[0]
    staged = np.asarray(driver.last_slot.staged[3 * n : 4 * n])
    assert staged[:3].tolist() == [0, 0, 0], f"the step's three rows of one table: {staged[:3]}"
    _, _, decode = step_launches(True, False)
    assert np.asarray(decode.last_slot.staged[3 * n : 4 * n])[:3].tolist() == [0, 1, 2], "a decode step: a row each"


def test_a_model_of_as_many_query_heads_a_kv_head_as_rows_a_block_keeps_the_plain_kernel(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows kernel reads a key once a query head for ROWS_A_BLOCK rows, the plain kernel once a KV head a row: at
    ROWS_A_BLOCK query heads a KV head (and up) it would read as much or more, so the flag leaves such a model on the
    plain kernel."""
    from models import decoder
    from models.loader import load_checkpoint, resolve_model
    from models.registry import load_model
    from vt.registry import make_backend

    with flag_set("VT_SHARED_ROWS_ATTENTION", "1"):
        ckpt = load_checkpoint(resolve_model("tiny-qwen3"))  # 4 query heads, 2 KV heads
        assert load_model(ckpt, make_backend("cpu"), "float32").rows_kernel == "rows", "non-vacuity: 2 a KV head"
        monkeypatch.setattr(decoder, "ROWS_A_BLOCK", 2)  # blocks of 2 rows: 2 query heads a KV head is no saving
        assert load_model(ckpt, make_backend("cpu"), "float32").rows_kernel is None


def differs(got: np.ndarray, want: np.ndarray) -> str:
    """How two outputs differ: a float contraction's last-bit difference reads apart from a wrong row."""
    a, b = widen_host(got).astype(np.float64), widen_host(want).astype(np.float64)
    bad = ~((a == b) | (np.isnan(a) & np.isnan(b)))
    rows = sorted({int(t) for t in np.argwhere(bad)[:, 0]})
    return f"{int(bad.sum())} values in rows {rows[:8]}, at most {np.nanmax(np.abs(a - b)):.3g} apart"


def step_launches(shared_rows: bool, rows_share: bool, kernel: str = "rows", dtype: str = "float32") -> tuple[
        np.ndarray, list[str], Any]:
    """tiny-qwen3's step of three tokens of one chunk (each its own row, a copy of the table) through the graph
    driver, cold, captured and replayed: its logits, the kernels launched and the driver."""
    from models.loader import load_checkpoint, resolve_model
    from models.registry import load_model
    from vt.engine.worker.graph_driver import DecodeInputs, GraphDriver
    from vt.registry import make_backend

    backend = make_backend("cpu")
    model = load_model(load_checkpoint(resolve_model("tiny-qwen3")), backend, dtype)
    model.rows_kernel = kernel if shared_rows else None
    model.rope_in_attention = False  # the plain kernel on the other side, at any width
    driver = GraphDriver(model, model.make_kv_cache(num_blocks=16, block_size=16), max_num_seqs=4)
    table = np.array([3, 5, 6, 0])
    positions = np.array([20, 21, 22])
    slots = np.array([table[p // 16] * 16 + p % 16 for p in positions])
    inp = DecodeInputs(np.array([11, 12, 13]), positions, slots, np.tile(table, (3, 1)),
                       rows_share_sequences=rows_share)
    with launched_names(backend) as names:
        for _ in range(3):
            driver.step(inp)
    return driver.last_logits(), names, driver


def test_a_step_of_rows_sharing_sequences_attends_with_the_rows_kernel_in_a_graph_apart() -> None:
    """VT_SHARED_ROWS_ATTENTION on: the short step's graph is apart and every layer's attention is the rows kernel,
    with the logits the plain kernel gives; a decode step's graph keeps the plain kernel."""
    logits, names, driver = step_launches(True, True)
    L = driver.model.cfg.num_hidden_layers
    assert driver.last_slot.key[4], "the step's graph is apart from a decode step's"
    assert names.count("paged_decode_attention_rows") == L * names.count("embed") > 0, names
    assert "paged_decode_attention" not in names
    plain, plain_names, _ = step_launches(False, True)
    assert np.array_equal(logits, plain) and "paged_decode_attention_rows" not in plain_names, "the same logits"
    _, decode_names, _ = step_launches(True, False)
    assert "paged_decode_attention_rows" not in decode_names, "non-vacuity: a decode step keeps the plain kernel"


def test_the_cuda_core_rows_kernel_is_off_unless_asked() -> None:
    """VT_SHARED_ROWS_ATTENTION unset (auto) never takes the CUDA-core rows kernel (slower on the H200, session 28):
    a float32 model keeps the plain kernel and a bf16 one takes the tensor-core kernel; =1 turns the rows kernel on
    (vt/env.py reads it once)."""
    from models.loader import load_checkpoint, resolve_model
    from models.registry import load_model
    from vt.registry import make_backend

    def model_with(value: str | None, dtype: str = "float32") -> Any:
        with flag_set("VT_SHARED_ROWS_ATTENTION", value):
            return load_model(load_checkpoint(resolve_model("tiny-qwen3")), make_backend("cpu"), dtype)

    assert model_with(None).rows_kernel is None
    assert model_with(None, "bfloat16").rows_kernel == "mma"
    assert model_with("1").rows_kernel == "rows", "non-vacuity: the flag turns it on"


def test_a_prefix_hits_tail_runs_whole_through_the_rows_kernel_and_generates_the_same_tokens(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end on the CPU: with the flag, start-up captures the short steps' graphs apart, a prefix-cache hit's
    16-token tail runs whole through the rows kernel, and the tokens equal the run without the flag."""
    from backends.cpu import CpuBackend
    from vt import LLM, SamplingParams

    names: list[str] = []
    launch = CpuBackend.launch

    def spy(self: CpuBackend, kernel: Any, *args: Any, **kw: Any) -> None:
        names.append(getattr(kernel, "__name__", ""))
        launch(self, kernel, *args, **kw)

    monkeypatch.setattr(CpuBackend, "launch", spy)
    rng = np.random.default_rng(0)
    prefix = [int(t) for t in rng.integers(3, 500, 624)]  # tiny-qwen3's vocabulary: 512
    tail = [int(t) for t in rng.integers(3, 500, 16)]
    greedy = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)

    def tokens(flag: str) -> tuple[list[int], int]:
        with flag_set("VT_SHARED_ROWS_ATTENTION", flag):
            llm = LLM("tiny-qwen3", backend="cpu", max_model_len=1024, num_blocks=256, max_num_seqs=4)
            llm.generate([prefix], greedy)
            names.clear()
            out = llm.generate([prefix + tail], greedy)[0].outputs[0].token_ids
            return list(out), llm.engine.runner.num_whole_prefills

    with_rows, whole = tokens("1")
    rows_launches = names.count("paged_decode_attention_rows")
    without, _ = tokens("0")
    assert whole >= 1 and rows_launches > 0, f"non-vacuity: the tail ran whole ({whole}) through the rows kernel"
    assert "paged_decode_attention_rows" not in names, "without the flag, the plain kernel"
    assert with_rows == without, (with_rows, without)
