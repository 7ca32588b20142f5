"""paged_rows_attention (VT_SHARED_ROWS_ATTENTION=mma): a step whose rows share sequences (a prefix hit's tail run
whole, a row a token) attends on tensor cores, a block serving one KV head for 64 query rows, split along the context
by its own rule and combined by the decode kernel's reduce. The twin is attention within the rounding of q and P to
the cache dtype; on the GPU the kernel equals its twin within that bound. The decoder takes it by default (`auto`)
or where asked, over a 16-bit cache at most 64 query heads a KV head, in the graphs the driver keeps apart for such
steps."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest

from backends.kernels import rows_attention
from backends.kernels.fused import HEAD_DIMS
from tests.backends.launches import launched_names
from tests.backends.test_kernels import STORAGE, DecodeCase, assert_within_bound, run_decode
from tests.backends.test_shared_rows_attention import step_launches
from tests.helpers import flag_set
from vt.dtypes import narrow_host, widen_host

# name: ((context, rows) a sequence, nh, nkv, table width in blocks, block size): a sequence's rows are its last tokens
ROWS_CASES = {
    "prefix-hit-16x1024": ([(1024, 16)], 16, 8, 64, 16),  # a 16-token tail over a cached 1,008-token prefix
    "three-chunks-gqa4": ([(37, 3), (300, 3), (513, 3)], 8, 2, 33, 16),  # 16 tokens a segment at most
    "runs-cross-blocks-gqa8": ([(700, 5), (90, 5)], 16, 2, 44, 16),  # 8: the second run crosses an aligned group
    "mha-partition-edges": ([(256, 5), (257, 5)], 4, 4, 17, 16),  # 64; runs ending on a partition's edge
    # a whole step's decode rows (a run each) beside a tail that starts mid-group
    "decode-rows-beside-a-tail": ([(300, 1), (45, 1), (900, 1), (1000, 16), (129, 1)], 16, 8, 64, 16),
    "block-128-gqa3": ([(600, 7), (130, 2)], 6, 2, 5, 128),  # 21 tokens a segment; key tiles start mid-block
    "one-partition-of-80-keys": ([(70, 4)], 4, 2, 5, 16),  # P = 1 over a table of 80 keys (not whole key tiles)
    "mha-run-of-70": ([(200, 70)], 4, 4, 13, 16),  # 64 tokens a segment: a run cut at 64, its length in two ballots
}
LOW = ("bfloat16", "float16")


def rows_case(name: str, hd: int, dtype: str, seed: int = 0, spec: tuple | None = None) -> tuple[DecodeCase, int]:
    """(case, block size): ROWS_CASES' rows, each with a copy of its sequence's table, token_row naming each run by
    its first row and two padding rows (position 0 over trash tables) as the graph driver stages them; every cache
    slot past a context NaN; partitions as many as the kernel's own rule splits the table into."""
    from vt.engine.worker.graph_driver import shared_token_rows

    seqs, nh, nkv, width, bs = spec or ROWS_CASES[name]
    rng = np.random.default_rng(seed)
    kv = STORAGE[dtype]
    blocks = (len(seqs) + 1) * width
    k = narrow_host(rng.standard_normal((blocks, bs, nkv, hd)).astype(np.float32), kv)
    v = narrow_host(rng.standard_normal((blocks, bs, nkv, hd)).astype(np.float32), kv)
    tables = rng.permutation(blocks).reshape(len(seqs) + 1, width).astype(np.int64)  # the last: trash
    poison = narrow_host(np.full((nkv, hd), np.nan, np.float32), kv)
    for r, (ctx, _) in enumerate([*seqs, (0, 0)]):
        for pos in range(ctx, width * bs):
            k[tables[r, pos // bs], pos % bs] = poison
            v[tables[r, pos // bs], pos % bs] = poison
    owner = [r for r, (_, n) in enumerate(seqs) for _ in range(n)]
    positions = [ctx - n + i for ctx, n in seqs for i in range(n)] + [0, 0]
    per_token = tables[owner + [len(seqs)] * 2]
    token_row = shared_token_rows(per_token[: len(owner)], len(positions))
    q = (rng.standard_normal((len(positions), nh, hd)) * hd**-0.5).astype(np.float32)
    P = rows_attention.num_partitions(len(q), nkv, nh // nkv, width, bs)
    return DecodeCase(q, k, v, per_token, token_row, np.array(positions, np.int64), np.dtype(kv), P), bs


def reference(c: DecodeCase, bs: int) -> np.ndarray:
    """float64 softmax attention, token by token, over the keys its table names up to its position."""
    T, nh, hd = c.q.shape
    group = nh // c.k_cache.shape[2]
    out = np.zeros((T, nh, hd))
    for t in range(T):
        pos = np.arange(int(c.positions[t]) + 1)
        blocks = c.tables[c.token_row[t], pos // bs]
        k = widen_host(c.k_cache[blocks, pos % bs]).astype(np.float64)  # [ctx, nkv, hd]
        v = widen_host(c.v_cache[blocks, pos % bs]).astype(np.float64)
        for h in range(nh):
            s = k[:, h // group] @ c.q[t, h]
            w = np.exp(s - s.max())
            out[t, h] = (w / w.sum()) @ v[:, h // group]
    return out


def run_rows_mma(xp: Any, c: DecodeCase) -> np.ndarray:
    return run_decode(xp, c, rows_attention.paged_rows_attention)


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("case", ROWS_CASES)
def test_the_rows_twin_is_attention_within_the_rounding_of_q_and_p(case: str, dtype: str) -> None:
    """Each row attends keys 0..its position of its sequence (a float64 reference), within a few ulps of the cache
    dtype: q and P are rounded as the tensor cores take them. Keys past every context are NaN and never reach a row."""
    c, bs = rows_case(case, 32, dtype)
    live = slice(0, len(c.q) - 2)
    got = widen_host(run_rows_mma(np, c)).astype(np.float64)[live]
    want = reference(c, bs)[live]
    assert np.isfinite(got).all(), "a poisoned key past a row's context reached its output"
    tol = 2**-6 if dtype == "bfloat16" else 2**-9
    err = np.abs(got - want) / (1 + np.abs(want))
    assert err.max() <= tol, f"max error {err.max():.2e} over {tol:.1e} ({case}, {dtype})"
    assert np.abs(want).max() > 0.1, "non-vacuity: the outputs are not all near zero"


def segments(token_row: np.ndarray, per: int) -> list[tuple[int, int]]:
    """The kernel's segments (first token, tokens): a run of one token_row, cut where an aligned group of `per`
    tokens begins (rows_attention.cu's leads)."""
    out: list[tuple[int, int]] = []
    for y in range(len(token_row)):
        if y % per == 0 or token_row[y - 1] != token_row[y]:
            out.append((y, 1))
        else:
            out[-1] = (out[-1][0], out[-1][1] + 1)
    return out


def test_the_rows_cases_reach_what_the_kernel_must_get_right() -> None:
    """Non-vacuity of the cases: several partitions and one partition over a table of no whole key tiles, a run cut
    where an aligned group begins, a segment of one token (a decode row) beside a long one, one past 32 tokens, a row
    whose context ends before a partition its segment reads, the padding rows as one run, block sizes past a key
    tile, and every GQA ratio the row-to-head mapping serves (one that does not divide 64 too)."""
    cut = single = idle = odd = long = 0
    parts: set[int] = set()
    for name in ROWS_CASES:
        c, bs = rows_case(name, 16, "bfloat16")
        nh, nkv = c.q.shape[1], c.k_cache.shape[2]
        per = rows_attention.tokens_a_block(nh // nkv)
        keys = c.tables.shape[1] * bs
        segs = segments(c.token_row, per)
        long += any(n > 32 for _, n in segs)  # run_length's second ballot round
        cut += sum(y % per == 0 and y > 0 and c.token_row[y - 1] == c.token_row[y] for y, _ in segs)
        single += any(n == 1 for _, n in segs[:-1]) and any(n > 1 for _, n in segs)
        part = keys if c.num_partitions == 1 else rows_attention.partition_size(len(c.q), nkv, nh // nkv, keys)
        parts.add(c.num_partitions)
        odd += c.num_partitions == 1 and keys % rows_attention.KEY_TILE != 0
        for y, n in segs:  # a row with nothing in its segment's last partition
            pos = c.positions[y:y + n]
            idle += bool((pos + 1 <= (pos.max() // part) * part).any())
        assert len(set(c.token_row[-2:].tolist())) == 1, "the padding rows: one run"
    assert cut and single and idle and odd and long and max(parts) > 1, (cut, single, idle, odd, long, parts)
    assert {v[1] // v[2] for v in ROWS_CASES.values()} >= {1, 2, 3, 4, 8}
    assert max(v[4] for v in ROWS_CASES.values()) > rows_attention.KEY_TILE, "a block larger than a key tile"


def test_the_rows_kernel_splits_a_hits_context_into_more_partitions_than_the_decode_kernel() -> None:
    """A block serves 64 / G tokens, so a hit's 16 rows are one block a KV head where the decode kernel has sixteen:
    the rows kernel's rule splits the context finer (more blocks for the same keys), in whole key tiles."""
    from backends.kernels import decode_attention

    T, nkv, G, keys = 16, 8, 2, 1024
    mma = rows_attention.partition_size(T, nkv, G, keys)
    plain = decode_attention.partition_size(T, nkv, keys)
    assert mma % rows_attention.KEY_TILE == 0 and mma < plain, (mma, plain)
    blocks = nkv * -(-T // rows_attention.tokens_a_block(G)) * -(-keys // mma)
    assert blocks >= 48, f"a hit's launch is {blocks} blocks: too few to spread over an H200's 132 SMs"


TARGETS = {"8": 1, "16": 2, "32": 4, "256": 8}  # VT_ROWS_TARGET_BLOCKS -> the hit's partitions (env.py's comment)


@pytest.mark.parametrize("target", TARGETS)
def test_the_target_blocks_flag_sets_a_hits_partitions_and_the_twin_stays_attention(target: str) -> None:
    """VT_ROWS_TARGET_BLOCKS: the hit's 16 rows over 1,024 keys (8 KV heads, G = 2: a block a KV head) split into
    target / 8 partitions of at least MIN_PARTITION keys, one at 8 (no reduce); the twin stays float64 attention
    within the rounding of q and P at each, so the scratch the decoder sizes by num_partitions covers the table."""
    with flag_set("VT_ROWS_TARGET_BLOCKS", target):
        c, bs = rows_case("prefix-hit-16x1024", 32, "bfloat16")
        keys = c.tables.shape[1] * bs
        part = keys if c.num_partitions == 1 else rows_attention.partition_size(len(c.q), 8, 2, keys)
        got = widen_host(run_rows_mma(np, c)).astype(np.float64)[:16]
    assert c.num_partitions == TARGETS[target], (c.num_partitions, part)
    assert part % rows_attention.KEY_TILE == 0 and part >= rows_attention.MIN_PARTITION, part
    err = np.abs(got - reference(c, bs)[:16]) / (1 + np.abs(reference(c, bs)[:16]))
    assert err.max() <= 2**-6, f"max error {err.max():.2e} at {c.num_partitions} partitions"


def test_a_one_tile_floor_splits_a_hit_into_one_tile_partitions_and_the_twin_stays_attention() -> None:
    """VT_ROWS_MIN_PARTITION=64: the hit's 16 rows over 1,024 keys (8 KV heads, G = 2) split into 16 partitions of
    one key tile (twice the default's blocks, each half the keys); the twin stays float64 attention."""
    with flag_set("VT_ROWS_MIN_PARTITION", "64"):
        c, bs = rows_case("prefix-hit-16x1024", 32, "bfloat16")
        keys = c.tables.shape[1] * bs
        part = rows_attention.partition_size(len(c.q), 8, 2, keys)
        got = widen_host(run_rows_mma(np, c)).astype(np.float64)[:16]
    assert (c.num_partitions, part) == (keys // rows_attention.KEY_TILE, rows_attention.KEY_TILE), (c.num_partitions,
                                                                                                   part)
    default, _ = rows_case("prefix-hit-16x1024", 32, "bfloat16")
    assert default.num_partitions == c.num_partitions // 2, "non-vacuity: the default floor gives half as many"
    err = np.abs(got - reference(c, bs)[:16]) / (1 + np.abs(reference(c, bs)[:16]))
    assert err.max() <= 2**-6, f"max error {err.max():.2e} at {c.num_partitions} partitions"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", LOW)
def test_cuda_rows_attention_in_one_tile_partitions_equals_its_twin(dtype: str) -> None:
    """The hit's 16 rows over 1,024 keys under VT_ROWS_MIN_PARTITION=64: every block one key tile, none pipelined."""
    import cupy

    with flag_set("VT_ROWS_MIN_PARTITION", "64"):
        for hd in (64, 128):
            c, _ = rows_case("prefix-hit-16x1024", hd, dtype, seed=hd)
            got, want = run_rows_mma(cupy, c), run_rows_mma(np, c)
            assert c.num_partitions == 16, c.num_partitions
            assert_within_bound(got[:16], want[:16], f"rows attention one-tile partitions hd={hd} {dtype}",
                                rounded_p=True)


# A hit over 8,192 keys: partitions of 4 key tiles at the default target (the GPU cases above have at most 2)
LONG_HIT = ([(8192, 16)], 16, 8, 512, 16)


def test_a_long_hits_partitions_stream_more_than_two_key_tiles() -> None:
    """Non-vacuity for the GPU test below: the default rule gives the long hit several tiles a partition."""
    c, bs = rows_case("long-hit-16x8192", 16, "bfloat16", spec=LONG_HIT)
    keys = c.tables.shape[1] * bs
    part = rows_attention.partition_size(len(c.q), c.k_cache.shape[2], c.q.shape[1] // c.k_cache.shape[2], keys)
    assert part >= 3 * rows_attention.KEY_TILE and c.num_partitions > 1, (part, c.num_partitions)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", LOW)
def test_cuda_rows_attention_over_a_long_hit_equals_its_twin(dtype: str) -> None:
    """A hit's 16 rows over 8,192 keys at the default target: each block pipelines several key tiles."""
    import cupy

    for hd in (64, 128):
        c, _ = rows_case("long-hit-16x8192", hd, dtype, seed=hd, spec=LONG_HIT)
        got, want = run_rows_mma(cupy, c), run_rows_mma(np, c)
        assert np.isfinite(widen_host(got[:16])).all(), f"hd={hd}: a poisoned key or value was read"
        assert_within_bound(got[:16], want[:16], f"rows attention long hit hd={hd} {dtype}", rounded_p=True)


@pytest.mark.gpu
@pytest.mark.parametrize("target", TARGETS)
def test_cuda_rows_attention_at_every_target_equals_its_twin(target: str) -> None:
    """The kernel at each partition count the flag gives the hit (one: its output written directly, no reduce)."""
    import cupy

    with flag_set("VT_ROWS_TARGET_BLOCKS", target):
        for hd in HEAD_DIMS:
            c, _ = rows_case("prefix-hit-16x1024", hd, "bfloat16", seed=hd)
            got, want = run_rows_mma(cupy, c), run_rows_mma(np, c)
            assert c.num_partitions == TARGETS[target], "non-vacuity: the flag reached the rule"
            assert np.isfinite(widen_host(got[:16])).all(), f"hd={hd}: a poisoned key or value was read"
            assert_within_bound(got[:16], want[:16], f"rows attention target {target} hd={hd}", rounded_p=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("case", ROWS_CASES)
def test_cuda_rows_attention_equals_its_twin(case: str, dtype: str) -> None:
    """Every head dim: each live row's output (through the partitions and the reduce) within the twin's bound, and
    finite: NaN-poisoned keys past every context, and the padding row's poisoned table, never reach a live row."""
    import cupy

    for hd in HEAD_DIMS:
        c, _ = rows_case(case, hd, dtype, seed=hd)
        got, want = run_rows_mma(cupy, c), run_rows_mma(np, c)
        live = slice(0, len(c.q) - 2)
        assert np.isfinite(widen_host(got[live])).all(), f"hd={hd}: a poisoned key or value was read"
        assert_within_bound(got[live], want[live], f"rows attention {case} hd={hd} {dtype}", rounded_p=True)


def test_the_flag_picks_the_kernel_and_the_decoder_keeps_it_to_a_16_bit_cache(caplog: pytest.LogCaptureFixture) -> None:
    """VT_SHARED_ROWS_ATTENTION=mma (and auto, the default): a bf16 model's rows kernel is the tensor-core one; a
    float32 model keeps the plain decode kernel (no float32 mma), said in one line where mma was asked by name; 1 and
    0 read as before `mma` (rows, off); anything else is refused by name."""
    from models.loader import load_checkpoint, resolve_model
    from models.registry import load_model
    from vt.env import Flags
    from vt.errors import ConfigError
    from vt.registry import make_backend

    ckpt = load_checkpoint(resolve_model("tiny-qwen3"))

    def kernel(value: str | None, dtype: str) -> str | None:
        with flag_set("VT_SHARED_ROWS_ATTENTION", value):
            return load_model(ckpt, make_backend("cpu"), dtype).rows_kernel

    caplog.set_level(logging.WARNING, logger="vt")
    assert kernel("mma", "bfloat16") == "mma"
    assert kernel(None, "bfloat16") == "mma", "auto, the default: the tensor-core kernel where the model takes it"
    assert kernel(None, "float32") is None, "auto over a float32 cache: the plain kernel"
    assert "does not apply" not in caplog.text, "auto falls back silently; no line where the kernel is taken"
    assert kernel("mma", "float32") is None, "a float32 cache: the plain kernel"
    assert "VT_SHARED_ROWS_ATTENTION=mma does not apply" in caplog.text, "a declined flag is said, not silent"
    assert kernel("off", "bfloat16") is None, "non-vacuity: off turns it off"
    assert (kernel("1", "bfloat16"), kernel("0", "bfloat16")) == ("rows", None)
    with flag_set("VT_SHARED_ROWS_ATTENTION", "tensor"), pytest.raises(ConfigError, match="VT_SHARED_ROWS_ATTENTION"):
        Flags.from_environ()


@pytest.mark.parametrize("group", [64, 128])
def test_the_decoder_keeps_the_mma_kernel_to_at_most_64_query_heads_a_kv_head(
        group: int, caplog: pytest.LogCaptureFixture) -> None:
    """A block's 64 rows hold at most 64 query heads of one KV head: past that auto keeps the plain kernel without a
    word, and mma or rows asked by name say they do not apply (the binding would refuse the step)."""
    from types import SimpleNamespace

    from models.decoder import DecoderForCausalLM
    from vt.dtypes import STORAGE as DTYPES

    model = SimpleNamespace(cfg=SimpleNamespace(num_attention_heads=2 * group, num_key_value_heads=2),
                            kv_dtype=DTYPES["bfloat16"], dtype="bfloat16")
    caplog.set_level(logging.WARNING, logger="vt")
    taken = {asked: DecoderForCausalLM._rows_kernel(model, asked) for asked in ("auto", "mma", "rows")}  # type: ignore
    if group <= rows_attention.ROWS:
        assert taken == {"auto": "mma", "mma": "mma", "rows": None}, "non-vacuity: 64 a KV head takes it"
        assert "VT_SHARED_ROWS_ATTENTION=rows does not apply" in caplog.text, "rows at GQA 64: declined, said"
    else:
        assert taken == {"auto": None, "mma": None, "rows": None}, taken
        lines = [r.getMessage() for r in caplog.records]
        assert not any("=auto" in line for line in lines), "auto falls back silently"
        assert any("=mma does not apply (128 query heads" in line for line in lines), lines


def test_a_step_of_rows_sharing_sequences_attends_on_tensor_cores_in_a_graph_apart() -> None:
    """With the mma kernel, the short step's graph is apart and every layer's attention is paged_rows_attention, its
    logits the plain kernel's within bf16 rounding; a decode step's graph keeps the plain kernel."""
    logits, names, driver = step_launches(True, True, kernel="mma", dtype="bfloat16")
    L = driver.model.cfg.num_hidden_layers
    assert driver.last_slot.key[4], "the step's graph is apart from a decode step's"
    assert names.count("paged_rows_attention") == L * names.count("embed") > 0, names
    assert "paged_decode_attention" not in names
    plain, plain_names, _ = step_launches(False, True, dtype="bfloat16")
    assert "paged_rows_attention" not in plain_names
    scale = np.abs(plain).max()
    assert np.abs(logits - plain).max() <= 2**-5 * scale, "the plain kernel's logits, within bf16 rounding"
    _, decode_names, _ = step_launches(True, False, kernel="mma", dtype="bfloat16")
    assert "paged_rows_attention" not in decode_names, "non-vacuity: a decode step keeps the plain kernel"


def test_a_prefix_hits_tail_runs_on_tensor_cores_and_generates_the_plain_kernels_tokens(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end on the CPU, bf16: a prefix-cache hit's 16-token tail over 624 cached keys runs whole through
    paged_rows_attention (its context in the kernel's own partitions, its scratch sized by them), and the greedy
    tokens equal the run with the plain decode kernel, their logprobs within a few bf16 roundings of the attention
    (0.015 apart here; a tail that misses 128 of its keys moved the first by 0.25)."""
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
    greedy = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, logprobs=0)

    def tokens(flag: str) -> tuple[list[int], np.ndarray, int]:
        with flag_set("VT_SHARED_ROWS_ATTENTION", flag):
            llm = LLM("tiny-qwen3", backend="cpu", dtype="bfloat16", max_model_len=1024, num_blocks=256,
                      max_num_seqs=4)
            llm.generate([prefix], greedy)
            names.clear()
            out = llm.generate([prefix + tail], greedy)[0].outputs[0]
            chosen = [lp[t].logprob for t, lp in zip(out.token_ids, out.logprobs, strict=True)]
            return list(out.token_ids), np.array(chosen), llm.engine.runner.num_whole_prefills

    with_mma, mma_logprobs, whole = tokens("mma")
    mma_launches = names.count("paged_rows_attention")
    without, plain_logprobs, _ = tokens("off")
    assert whole >= 1 and mma_launches > 0, f"non-vacuity: the tail ran whole ({whole}) on tensor cores"
    assert "paged_rows_attention" not in names, "without the flag, the plain kernel"
    assert with_mma == without, (with_mma, without)
    gap = np.abs(mma_logprobs - plain_logprobs)
    assert gap.max() <= 0.05, f"the chosen tokens' logprobs {gap.round(3)} apart: more than the attention's rounding"


def test_the_rows_ops_launches_are_named_as_the_gates_count_them() -> None:
    """The backend's op launches the library's kernel under its own name (the gates above count launches by it)."""
    from vt.registry import make_backend

    backend = make_backend("cpu")
    c, _ = rows_case("mha-partition-edges", 16, "bfloat16")
    T, nh, hd = c.q.shape
    P = c.num_partitions
    with launched_names(backend) as names:
        backend.paged_rows_attention(c.q, c.k_cache, c.v_cache, c.tables, c.token_row, c.positions,
                                     np.zeros((T, nh, hd), c.out_dtype), np.zeros((T, nh, P, hd), np.float32),
                                     np.zeros((T, nh, P, 2), np.float32))
    assert names == ["paged_rows_attention"], names


def test_a_late_chunk_in_a_mixed_step_attends_on_tensor_cores_and_keeps_the_tokens(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A prompt chunked beside another's decode row (mixed steps, the piecewise graph's eager attention break): once
    its context is long, each short chunk's tokens attend through paged_rows_attention with the flag, and the greedy
    tokens and their logprobs are the plain kernel's (bf16, within the attention's rounding)."""
    from backends.cpu import CpuBackend
    from models.decoder import SHORT_PREFILL_TOKENS
    from vt import LLM, SamplingParams
    from vt.engine.worker.runner import ModelRunner

    names: list[str] = []
    launch = CpuBackend.launch

    def spy(self: CpuBackend, kernel: Any, *args: Any, **kw: Any) -> None:
        names.append(getattr(kernel, "__name__", ""))
        launch(self, kernel, *args, **kw)

    monkeypatch.setattr(CpuBackend, "launch", spy)
    monkeypatch.setattr(ModelRunner, "_runs_whole", lambda *args: False)  # every short step through the break
    rng = np.random.default_rng(1)
    prompts = [[int(t) for t in rng.integers(3, 500, n)] for n in (SHORT_PREFILL_TOKENS + 1, 300)]
    sp = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=0)

    def run(flag: str) -> tuple[list[list[int]], np.ndarray, int]:
        with flag_set("VT_SHARED_ROWS_ATTENTION", flag):
            llm = LLM("tiny-qwen3", backend="cpu", dtype="bfloat16", max_model_len=512, num_blocks=128,
                      enable_prefix_caching=False, max_num_batched_tokens=SHORT_PREFILL_TOKENS // 2, max_num_seqs=2)
            names.clear()
            outs = [o.outputs[0] for o in llm.generate(prompts, sp)]
            chosen = [lp[t].logprob for o in outs for t, lp in zip(o.token_ids, o.logprobs, strict=True)]
            return [list(o.token_ids) for o in outs], np.array(chosen), names.count("paged_rows_attention")

    tokens, logprobs, launches = run("mma")
    plain_tokens, plain_logprobs, plain_launches = run("off")
    L = load_layers()
    assert launches >= L and launches % L == 0 and plain_launches == 0, (launches, plain_launches)
    assert tokens == plain_tokens, (tokens, plain_tokens)
    gap = np.abs(logprobs - plain_logprobs)
    assert gap.max() <= 0.05, f"the chosen tokens' logprobs {gap.round(3)} apart: more than the attention's rounding"


def load_layers() -> int:
    from models.loader import load_checkpoint, resolve_model

    return int(load_checkpoint(resolve_model("tiny-qwen3")).config.num_hidden_layers)


def test_partials_short_of_the_table_are_refused() -> None:
    """Scratch for fewer partitions than the kernel's rule cuts the table into would leave the keys past them out of
    every row, silently, in the kernel and the twin alike: refused with the sizes, before anything runs."""
    from vt.errors import EngineInvariantError

    c, _ = rows_case("prefix-hit-16x1024", 16, "bfloat16")
    T, nh, hd = c.q.shape

    def run(P: int) -> None:
        rows_attention.paged_rows_attention(np, c.q, c.k_cache, c.v_cache, c.tables, c.token_row, c.positions,
                                            np.zeros((T, nh, hd), c.out_dtype), np.zeros((T, nh, P, hd), np.float32),
                                            np.zeros((T, nh, P, 2), np.float32))

    run(c.num_partitions)  # non-vacuity: the rule's own count runs
    with pytest.raises(EngineInvariantError, match="short of the table"):
        run(c.num_partitions - 1)


def long_decode_launches(mma_from: str, dtype: str = "bfloat16", backend_name: str = "cpu") -> tuple[
        np.ndarray, list[str], int]:
    """tiny-qwen3's decode step of two sequences over 1,024-key tables (64 blocks of 16, one of them past the
    rope variant's widest table) through the graph driver under VT_DECODE_MMA_FROM=mma_from, cold, captured and
    replayed: its logits, the kernels launched and the layers."""
    from models.loader import load_checkpoint, resolve_model
    from models.registry import load_model
    from vt.engine.worker.graph_driver import DecodeInputs, GraphDriver
    from vt.registry import make_backend

    backend = make_backend(backend_name)
    with flag_set("VT_DECODE_MMA_FROM", mma_from):
        model = load_model(load_checkpoint(resolve_model("tiny-qwen3")), backend, dtype)
    kv = model.make_kv_cache(num_blocks=130, block_size=16)
    rng = np.random.default_rng(0)
    for cache in (*kv.k, *kv.v):  # older keys: what the tensor-core kernel's rounding of P acts on
        backend.copy_h2d(cache, narrow_host(rng.standard_normal(cache.shape).astype(np.float32), cache.dtype))
    tables = np.stack([np.arange(1, 65), np.arange(65, 129)])
    positions = np.array([700, 1000])
    slots = np.array([tables[r, p // 16] * 16 + p % 16 for r, p in enumerate(positions)])
    driver = GraphDriver(model, kv, max_num_seqs=4)
    with launched_names(backend) as names:
        for _ in range(3):
            driver.step(DecodeInputs(np.array([11, 400]), positions, slots, tables))
    return driver.last_logits(), names, model.cfg.num_hidden_layers


def test_decode_rows_over_a_table_the_flag_calls_long_attend_on_tensor_cores() -> None:
    """VT_DECODE_MMA_FROM=1024: a decode step over 1,024-key tables attends with the tensor-core rows kernel in every
    layer (each token a run of its own) and never the decode kernel, its logits the plain kernel's within bf16
    rounding (the kernel rounds q and P to the cache dtype). Guards: at 2048 (tables narrower than the flag) and
    off, the plain kernel."""
    logits, names, layers = long_decode_launches("1024")
    assert names.count("paged_rows_attention") == layers * names.count("embed") > 0, names
    assert "paged_decode_attention" not in names
    plain, plain_names, _ = long_decode_launches("0")
    assert "paged_rows_attention" not in plain_names and "paged_decode_attention" in plain_names
    scale = np.abs(plain).max()
    assert np.abs(logits - plain).max() <= 2**-5 * scale, "the plain kernel's logits, within bf16 rounding"
    assert not np.array_equal(logits, plain), "non-vacuity: the rows kernel's rounding shows, so it ran"
    _, narrow_names, _ = long_decode_launches("2048")
    assert "paged_rows_attention" not in narrow_names, "tables narrower than the flag keep the plain kernel"


def test_the_decoder_keeps_long_decode_on_tensor_cores_to_a_16_bit_cache(caplog: pytest.LogCaptureFixture) -> None:
    """VT_DECODE_MMA_FROM over a float32 cache (no float32 mma): the plain kernel, said in one line; bf16 takes it
    silently; a value outside the choices is refused by name."""
    from models.loader import load_checkpoint, resolve_model
    from models.registry import load_model
    from vt.env import Flags
    from vt.errors import ConfigError
    from vt.registry import make_backend

    ckpt = load_checkpoint(resolve_model("tiny-qwen3"))
    caplog.set_level(logging.WARNING, logger="vt")
    with flag_set("VT_DECODE_MMA_FROM", "4096"):
        assert load_model(ckpt, make_backend("cpu"), "bfloat16").decode_mma_from == 4096
        assert "does not apply" not in caplog.text
        assert load_model(ckpt, make_backend("cpu"), "float32").decode_mma_from == 0
    assert "VT_DECODE_MMA_FROM=4096 does not apply" in caplog.text, "a declined flag is said, not silent"
    with flag_set("VT_DECODE_MMA_FROM", "3000"), pytest.raises(ConfigError, match="VT_DECODE_MMA_FROM"):
        Flags.from_environ()


@pytest.mark.gpu
def test_cuda_long_decode_on_tensor_cores_gives_the_plain_kernels_logits() -> None:
    """On the GPU, VT_DECODE_MMA_FROM=1024's step over 1,024-key tables, captured and replayed, gives the plain
    decode kernel's logits within bf16 rounding, and not bit for bit (the rows kernel ran: its P is rounded)."""
    logits, _, _ = long_decode_launches("1024", backend_name="cuda")
    plain, _, _ = long_decode_launches("0", backend_name="cuda")
    scale = np.abs(plain).max()
    assert np.abs(logits - plain).max() <= 2**-5 * scale, "the plain kernel's logits, within bf16 rounding"
    assert not np.array_equal(logits, plain), "non-vacuity: the rows kernel's rounding shows, so it ran"
