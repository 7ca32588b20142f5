"""The candidate sampler (issue 29): a row with top-k up to KMAX draws from the few tokens its warps kept, not from
a selection over the whole vocabulary. `candidate_support` is the NumPy twin of how the CUDA kernel finds them
(backends/kernels/sampler.cu, vt_cand_scan): it must return exactly the top-k support (every token whose key
reaches the k-th largest, ties kept), or defer to the exact one-block draw where a block has more tokens at its
bound than it keeps. Against the definition by sorting."""

from __future__ import annotations

import numpy as np
import pytest

from vt.engine.sample.sampler import (
    KMAX,
    QUAD,
    SPLIT,
    THREADS,
    RowSpec,
    candidate_support,
    chunk_span,
    keys,
    needs_general,
    pack,
    support,
)


def by_sorting(x: np.ndarray, top_k: int) -> np.ndarray:
    k = keys(x)
    return np.flatnonzero(k >= np.sort(k)[-top_k])


def _row(rng: np.random.Generator, V: int, kind: str) -> np.ndarray:
    x = (rng.standard_normal(V) * 3).astype(np.float32)
    if kind == "fp16":  # what a half-precision head leaves: many equal logits near the top
        x = x.astype(np.float16).astype(np.float32)
    elif kind == "integers":
        x = np.round(x).astype(np.float32)
    elif kind == "five-ones":
        x[:] = 0.0
        x[rng.integers(V, size=5)] = 1.0
    return x


@pytest.mark.parametrize("V", [300, 5000, 40_000])
def test_the_candidates_are_the_whole_top_k_support_or_the_row_defers(V: int) -> None:
    rng = np.random.default_rng(V)
    found = deferred = 0
    for i in range(48):
        kind = ("normal", "fp16", "integers", "five-ones")[i % 4]
        x, top_k = _row(rng, V, kind), int(rng.integers(1, KMAX + 1))
        got = candidate_support(keys(x), top_k)
        want = by_sorting(x, top_k)
        if got is None:
            deferred += 1
        else:
            found += 1
            assert np.array_equal(got, want), f"{kind} row, top_k={top_k}: {np.setxor1d(got, want).size} tokens differ"
        idx, w = support(x, top_k, 1.0, 0.0)  # what the sampler draws from, whichever way it was found
        assert np.array_equal(idx[w > 0], want)
    assert found >= 24, "non-vacuity: most rows draw from their candidates"


@pytest.mark.parametrize("blocks", [2, 16, 64])
def test_every_chunk_starts_on_a_whole_quad_and_the_chunks_cover_the_row(blocks: int) -> None:
    """The CUDA passes load a chunk four tokens at a time, float4 where the chunk's start is 16-byte aligned: every
    chunk of a row must start at a multiple of QUAD tokens, the chunks must cover the row, and none may be wider
    than the even share rounded up to a quad (the block count still spreads the row)."""
    rounded = 0
    for V in (5, 300, 1001, 32_000, 151_935, 151_936):
        span, share = chunk_span(V, blocks), -(-V // blocks)
        starts = [min(V, g * span) for g in range(blocks)]
        assert all(a % QUAD == 0 for a in starts if a < V), (V, span)
        assert blocks * span >= V and share <= span < share + QUAD, (V, span, share)
        rounded += span != share
    assert rounded, "non-vacuity: some even share is not a whole number of quads"


def held_by(threads: int, each: int) -> np.ndarray:
    """Tokens of block 0 that `threads` threads hold, `each` a thread, where every thread holds one quad (a row of
    SPLIT * QUAD * THREADS tokens): thread t holds tokens QUAD t .. QUAD t + QUAD - 1."""
    return np.array([QUAD * t + c for t in range(threads) for c in range(each)])


@pytest.mark.parametrize("threads, each", [(10, 4), (20, 1)], ids=["40-in-10-threads", "20-in-20-threads"])
def test_ties_at_a_blocks_bound_are_all_kept(threads: int, each: int) -> None:
    """Equal largest logits in block 0: forty held by ten threads (four each; the block's bound, its threads' 20th
    largest key, is far below them), or twenty held by twenty threads (the bound IS their key). With top-k 20 the
    support is every tied token, and the candidates must hold them all."""
    V = SPLIT * QUAD * THREADS  # every thread of every block holds one quad
    x = (np.random.default_rng(1).standard_normal(V) - 10).astype(np.float32)
    tied = held_by(threads, each)
    x[tied] = 5.0
    assert np.array_equal(by_sorting(x, 20), tied), "non-vacuity: the support is the tied tokens"
    got = candidate_support(keys(x), 20)
    assert got is not None and np.array_equal(got, tied), (
        f"the candidates hold {None if got is None else got.size} of the {tied.size} tied tokens")


def test_a_row_of_equal_logits_takes_the_one_block_draw() -> None:
    """Every token ties: each block has more tokens at its bound than it can keep, so the row defers (and the
    exact draw keeps the whole vocabulary)."""
    x = np.zeros(SPLIT * 2 * THREADS, np.float32)
    assert candidate_support(keys(x), 20) is None
    idx, w = support(x, 20, 1.0, 0.0)
    assert idx.size == x.size and (w > 0).all()


def test_which_rows_need_the_general_passes() -> None:
    """A captured decode graph draws with the candidates and the plain mass only; the graph driver runs the general
    passes after it when a row has top-k above KMAX or top-p without top-k (greedy and forced rows never)."""
    V = 1000
    cases = {(0.7, 0, 1.0): False, (0.6, 20, 0.95): False, (0.6, KMAX, 0.5): False, (0.6, KMAX + 1, 1.0): True,
             (1.0, 0, 0.9): True, (1.0, V, 0.9): True, (0.0, 0, 0.9): False, (1.0, 0, 1.0): False}
    for (temperature, top_k, top_p), general in cases.items():
        rows = pack([RowSpec(temperature=temperature, top_k=top_k, top_p=top_p)], 4, 1)
        assert needs_general(rows.fparams, rows.iparams, V) is general, (temperature, top_k, top_p)
    forced = pack([RowSpec(temperature=1.0, top_p=0.9, forced=3)], 1, 1)
    assert not needs_general(forced.fparams, forced.iparams, V), "a forced row is never drawn"
