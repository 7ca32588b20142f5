"""The split CUDA sampler (issue 29; VT_SAMPLER=split): each row's vocabulary over SPLIT blocks, pass by pass, the
last block of a row merging the partials in block order. It draws what the NumPy reference draws at a real
vocabulary, the same on every replay of a captured graph (its counters back at zero), and the engine's tokens are
the one-block kernel's. GPU lane only; the reference's own block-histogram merge is gated on the CPU
(tests/engine/test_radix_select.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine.sampler_rig import run_sampler
from vt.engine.sample.sampler import RowSpec, gumbel_noise, log_f32, row_hash

pytestmark = pytest.mark.gpu

V = 151_936


def _rows(n: int = 32) -> tuple[np.ndarray, list[RowSpec]]:
    rng = np.random.default_rng(8)
    logits = (rng.standard_normal((n, V)) * 3).astype(np.float32)
    kinds = [dict(temperature=0.7), dict(temperature=0.6, top_k=20, top_p=0.95), dict(temperature=1.0, min_p=0.05),
             dict(temperature=1.0, top_p=0.9), dict(temperature=0.0), dict(temperature=1.0, num_logprobs=5),
             dict(temperature=0.8, top_k=50, top_p=0.8, min_p=0.02), dict(temperature=0.9, top_k=1)]
    hist = rng.integers(0, V, 200)
    specs = [RowSpec(**kinds[i % len(kinds)], seed=7000 + i, counter=i,
                     history=hist if i % 9 == 0 else None, num_prompt=100, repetition=1.2 if i % 9 == 0 else 1.0,
                     bias=((int(rng.integers(V)), 30.0),) if i % 7 == 0 else ()) for i in range(n)]
    return logits, specs


# A row's blocks: the fewest and the most the engine picks (split_blocks: 2 at B >= 256, 16 at B <= 32), and 64, where
# the row's candidates can outgrow the last block's merge (the tie rows: 100 in every block).
BLOCKS = [2, 16, 64]


@pytest.mark.parametrize("blocks", BLOCKS)
def test_the_split_sampler_draws_what_the_numpy_reference_draws(blocks: int) -> None:
    logits, specs = _rows()
    cpu, split = run_sampler("cpu", logits, specs), run_sampler("cuda-split", logits, specs, blocks=blocks)
    same = cpu.ids == split.ids
    assert same.sum() >= 31, f"rows that differ: {np.flatnonzero(~same).tolist()}"  # an expf ulp may move one
    lp = [i for i, s in enumerate(specs) if s.num_logprobs]
    assert lp and all(cpu.lp_ids[i, -1] == split.lp_ids[i, -1] for i in lp if same[i])
    np.testing.assert_allclose(split.lp_vals[lp, -1], cpu.lp_vals[lp, -1], atol=1e-4)
    assert len(set(cpu.ids.tolist())) > 16, "non-vacuity: the rows drew different tokens"


def test_a_captured_split_sampler_replays_the_same_draws() -> None:
    """Its counters are back at zero after every launch: a graph replayed three times draws the same three times."""
    import cupy

    from vt.capture import GraphCaptureScope
    from vt.engine.sample.sampler import NF, NI, NLP, pack, sample_tokens
    from vt.engine.worker.graph_driver import split_scratch
    from vt.registry import make_backend

    logits, specs = _rows(8)
    b = make_backend("cuda")
    rows = pack(specs, 8, 200)
    assert rows.hist is not None and rows.bias_ids is not None and rows.bias_vals is not None
    W = rows.bias_ids.shape[1]
    t = [b.empty(s, d) for s, d in (((8, V), np.float32), ((8, NF), np.float32), ((8, NI), np.int64),
                                    ((8, 200), np.int64), ((8, 200), np.float32), ((8, W), np.int64),
                                    ((8, W), np.float32), ((8, W), np.float32), ((8,), np.int64),
                                    ((8, NLP), np.float32), ((8, NLP), np.int64))]
    for i, host in ((1, rows.fparams), (2, rows.iparams), (3, rows.hist), (5, rows.bias_ids), (6, rows.bias_vals)):
        b.copy_h2d(t[i], host)
    scratch = split_scratch(b, 8)
    stream = b.new_stream()
    draws = []
    with b.use_stream(stream):
        b.copy_h2d(t[0], logits[:8])
        b.launch(sample_tokens, *t, *scratch)  # compiled and warm, outside the capture
        scope = GraphCaptureScope(b, stream, enabled=True)
        with scope:
            b.launch(sample_tokens, *t, *scratch)
        assert scope.graph is not None
        for _ in range(3):
            b.copy_h2d(t[0], logits[:8])  # the sampler penalizes and biases in place
            scope.graph.replay(stream)
            draws.append(b.copy_d2h(t[8]).tolist())
        assert not cupy.asnumpy(scratch[3].array()).any(), "every counter back at zero"
    assert draws[0] == draws[1] == draws[2]
    ref = run_sampler("cpu", logits[:8], specs[:8]).ids.tolist()
    assert sum(a == b for a, b in zip(draws[0], ref)) >= 7, (draws[0], ref)  # an expf ulp may move one


def _tie_rows() -> tuple[np.ndarray, list[RowSpec]]:
    """Rows the candidate kernel must get right past its easy case: equal largest logits in one block (forty in ten
    threads; twenty in twenty threads, where the block's bound is their key), half-precision logits (ties near the
    top), 6,400 ties spread over the row (more candidates than the merge holds at 64 blocks, more than a block keeps at
    16), a constant row (every token ties: the one-block draw), a NaN (the row samples -1), and the kinds on either
    side of KMAX."""
    from vt.engine.sample.sampler import KMAX, QUAD, THREADS

    Vt = 16 * QUAD * THREADS  # at 16 blocks a row, one quad a thread: thread t of block 0 holds tokens 4t .. 4t + 3
    rng = np.random.default_rng(29)
    rows, specs = [], []
    for i in range(8):
        threads, each = (10, 4) if i < 4 else (20, 1)
        x = (rng.standard_normal(Vt) - 10).astype(np.float32)
        x[[QUAD * t + c for t in range(threads) for c in range(each)]] = 5.0
        rows.append(x)
        specs.append(RowSpec(temperature=1.0, top_k=20, seed=100 + i))
    for i, (top_k, top_p, min_p) in enumerate([(1, 1.0, 0.0), (20, 0.9, 0.0), (KMAX, 0.95, 0.05), (KMAX + 1, 1.0, 0.0),
                                               (0, 0.9, 0.0), (0, 1.0, 0.1), (0, 1.0, 0.0), (20, 1.0, 0.0)]):
        rows.append((rng.standard_normal(Vt) * 3).astype(np.float16).astype(np.float32))
        specs.append(RowSpec(temperature=0.8, top_k=top_k, top_p=top_p, min_p=min_p, seed=200 + i))
    spread = (rng.standard_normal(Vt) - 10).astype(np.float32)  # 100 ties in every 512 tokens: at 64 blocks a row,
    spread[[b * THREADS + t for b in range(Vt // THREADS) for t in range(100)]] = 5.0  # more than the merge holds
    rows.append(spread)
    specs.append(RowSpec(temperature=1.0, top_k=20, seed=302))
    rows.append(np.zeros(Vt, np.float32))
    specs.append(RowSpec(temperature=1.0, top_k=20, seed=300))
    nan = (rng.standard_normal(Vt)).astype(np.float32)
    nan[Vt // 3] = np.nan
    rows.append(nan)
    specs.append(RowSpec(temperature=1.0, top_k=20, seed=301))
    return np.stack(rows), specs


@pytest.mark.parametrize("blocks", BLOCKS)
def test_the_candidate_sampler_draws_what_the_reference_draws_at_ties(blocks: int) -> None:
    logits, specs = _tie_rows()
    cpu, split = run_sampler("cpu", logits, specs), run_sampler("cuda-split", logits, specs, blocks=blocks)
    same = cpu.ids == split.ids
    assert same.sum() >= len(specs) - 1, f"rows that differ: {np.flatnonzero(~same).tolist()}"  # an expf ulp
    assert split.ids[-1] == -1, "the NaN row samples -1"
    tied = {int(t) for t in cpu.ids[:8]}
    assert len(tied) >= 4 and all(logits[i, t] == 5.0 for i, t in enumerate(cpu.ids[:8])), sorted(tied)


def test_a_captured_sampler_leaves_the_general_rows_to_the_passes_after_it() -> None:
    """general=False (a decode graph) draws every row but those `needs_general` names (top-k above KMAX, top-p
    alone), which stay -2; the general passes launched after it draw them as one launch does."""
    from vt.engine.sample.sampler import needs_general, pack

    logits, specs = _rows(16)
    skipped = run_sampler("cuda-split", logits, specs, general="skipped")
    general = [needs_general(r.fparams, r.iparams, V) for r in (pack([s], 1, 200) for s in specs)]
    assert any(general) and not all(general), "non-vacuity: both kinds of row"
    assert [bool(i == -2) for i in skipped.ids] == general, skipped.ids.tolist()
    after = run_sampler("cuda-split", logits, specs, general="after")
    inline = run_sampler("cuda-split", logits, specs)
    assert after.ids.tolist() == inline.ids.tolist()


def test_a_decode_graph_with_rows_only_the_general_passes_draw() -> None:
    """Through the CUDA engine with graphs: top-p alone, top-k above KMAX and Qwen3's defaults side by side, seeded;
    every request gets its tokens (the driver runs the general passes after the replay) and the same tokens on a
    second engine (the draws are the seeds', not the batch's)."""
    from vt import LLM, SamplingParams
    from vt.errors import EngineInvariantError

    params = [SamplingParams(temperature=1.0, top_p=0.9, seed=1, max_tokens=12, ignore_eos=True),
              SamplingParams(temperature=0.8, top_k=50, seed=2, max_tokens=12, ignore_eos=True),
              SamplingParams(temperature=0.6, top_k=20, top_p=0.95, seed=3, max_tokens=12, ignore_eos=True)]
    prompts = [{"prompt_token_ids": [5 + i, 17, 99, 3]} for i in range(3)]
    runs = []
    for _ in range(2):
        llm = LLM(model="tiny-qwen3", backend="cuda", max_model_len=128, max_num_seqs=4, num_blocks=64)
        try:
            out = llm.generate(prompts, params)
        except EngineInvariantError as e:
            pytest.fail(f"a row the graph left to the general passes was never drawn: {e}")
        runs.append([o.outputs[0].token_ids for o in out])
        assert llm.engine.runner.decoder.num_replays > 0, "non-vacuity: decode steps replayed graphs"
    assert all(len(t) == 12 for t in runs[0]) and runs[0] == runs[1]


@pytest.mark.parametrize("vocab", [V, V - 1], ids=["float4-rows", "unaligned-rows"])
def test_a_greedy_row_picks_the_first_of_its_largest_logits_in_one_pass(vocab: int) -> None:
    """The greedy rows with nothing to change first take one pass (the finite check and the argmax together, float4
    loads where the row is 16-byte aligned; the split sampler's blocks each take their chunk's, merged in block
    order): the lowest index among equal largest logits, wherever those sit among the threads, a float4's lanes and
    the blocks; -1 for a row with a NaN or an infinity; and greedy rows that are not plain (a bias) take the general
    path and agree with it."""
    rng = np.random.default_rng(41)
    rows, specs = [], []
    # ties within one thread: a float4's lanes ([1, 0], and 16,386 / 16,385), and 512 apart (the scalar pass's stride);
    # across the split sampler's blocks ([140,000, 30,000]: the lower block's must win the last block's merge)
    for ties in ([vocab - 1], [7, 3, 9000], [4 * 512 * 8 + 2, 4 * 512 * 8 + 1], [1, 0], list(range(2, vocab, 4099)),
                 [600, 88], [140_000, 30_000]):
        x = (rng.standard_normal(vocab) * 2).astype(np.float32)
        x[ties] = 40.0
        rows.append(x)
        specs.append(RowSpec(temperature=0.0))
    for bad in (np.nan, np.inf, -np.inf):
        x = rng.standard_normal(vocab).astype(np.float32)
        x[vocab // 2 + 1] = bad
        rows.append(x)
        specs.append(RowSpec(temperature=0.0))
    x = (rng.standard_normal(vocab) * 2).astype(np.float32)
    rows.append(x)
    specs.append(RowSpec(temperature=0.0, bias=((int(np.argmin(x)), 100.0),)))
    logits = np.stack(rows)
    want = [vocab - 1, 3, 4 * 512 * 8 + 1, 0, 2, 88, 30_000, -1, -1, -1, int(np.argmin(x))]
    assert run_sampler("cpu", logits, specs).ids.tolist() == want  # the reference agrees with the rows' design
    for backend in ("cuda", "cuda-split"):
        assert run_sampler(backend, logits, specs).ids.tolist() == want, backend


@pytest.mark.parametrize("blocks", BLOCKS)
def test_a_temperature_row_draws_in_whichever_block_holds_its_mass(blocks: int) -> None:
    """Rows of temperature alone (Gumbel-max; vt_cand_mass's blocks each take their chunk's largest score, the row's
    last block the largest of those): each row's mass sits in 48 tokens at its own 64th of the vocabulary, so every
    block of the launch holds some row's draw (at 64 blocks a row, the window at the middle of each 64th lies in that
    block's chunk, the last block's too), and the merge must keep every block's. The kernel draws what the reference
    draws, every row (no expf in this draw: the same bits), inside its window."""
    n, width = 64, 48
    rng = np.random.default_rng(29)
    logits = np.full((n, V), -60.0, np.float32)
    starts = [r * V // n + V // (2 * n) - width // 2 for r in range(n)]
    for r, s in enumerate(starts):
        logits[r, s : s + width] = rng.standard_normal(width).astype(np.float32)
    # every other row with a top-k of the whole vocabulary or more: no filter, so Gumbel-max on both bodies
    specs = [RowSpec(temperature=0.8, seed=900 + r, counter=r, top_k=(0, V, V + 7)[r % 3]) for r in range(n)]
    cpu, split = run_sampler("cpu", logits, specs), run_sampler("cuda-split", logits, specs, blocks=blocks)
    assert split.ids.tolist() == cpu.ids.tolist(), f"rows that differ: {np.flatnonzero(cpu.ids != split.ids).tolist()}"
    assert all(s <= t < s + width for s, t in zip(starts, cpu.ids.tolist())), "the reference draws in the windows"
    offsets = {int(t) - s for s, t in zip(starts, cpu.ids.tolist())}
    assert len(offsets) > 8, "non-vacuity: the rows draw, not take their argmax"
    block = run_sampler("cuda", logits, specs)
    assert block.ids.tolist() == cpu.ids.tolist(), "the one-block draw (vt_sample's) is the same Gumbel-max"


def test_the_gumbel_draw_skips_only_tokens_whose_bound_is_above_their_noise() -> None:
    """The Gumbel draw (vt_cand_mass, vt_sample) skips a token when its tempered logit plus gumbel_bound falls below
    the best exact score its block has seen, and never computes its exact noise: the draw stays exact only if the
    bound is at least the noise, for every uniform the hash can give. All 2**23 are checked here; the bound is within
    0.05 of the noise, else it would skip next to nothing."""
    import cupy

    from backends.kernels.sampler import gumbel_bounds

    noise, bound = (a.get() for a in gumbel_bounds(cupy))
    k = np.arange(1 << 23, dtype=np.uint32)
    u = (k | np.uint32(0x3F800000)).view(np.float32) - np.float32(1) + np.float32(2.0**-24)
    assert np.array_equal(noise, -log_f32(-log_f32(u))), "non-vacuity: the kernel's uniforms and noise are the twin's"
    under = np.flatnonzero(bound < noise)
    assert under.size == 0, f"{under.size} uniforms with a bound below their noise, k = {under[:5].tolist()}"
    # headroom: the bound's own error (MUFU's log2) is far below its slack, 2**-6, on this card; other cards' log2
    # may err otherwise within the documented bound, which this margin covers
    assert float((bound - noise).min()) >= 2.0**-7, "the bound keeps half its slack above the noise"
    assert float((bound - noise).max()) < 0.05, "the bound hugs the noise"


def test_a_temperature_row_whose_scores_are_all_negative_draws_what_the_reference_draws() -> None:
    """The block's threshold is an order-preserving int key of a float score (atomicMax); every tempered logit here
    is near -40, so every score, the threshold and the winner are negative, and a key that misorders or misdecodes
    negative scores skips the row's winner. Gumbel rows have no expf: the draws must equal the twin's, every row."""
    n = 64
    rng = np.random.default_rng(35)
    logits = (rng.standard_normal((n, V)) * 2 - 40).astype(np.float32)
    specs = [RowSpec(temperature=1.0, seed=3500 + r, counter=r) for r in range(n)]
    cpu = run_sampler("cpu", logits, specs)
    scores = logits[np.arange(n), cpu.ids] + gumbel_noise(row_hash(np.arange(3500, 3500 + n), np.arange(n)), V)[
        np.arange(n), cpu.ids]
    assert (scores < 0).all() and len(set(cpu.ids.tolist())) > n // 2, "non-vacuity: negative winners, drawn apart"
    for backend in ("cuda-split", "cuda"):
        got = run_sampler(backend, logits, specs).ids
        assert got.tolist() == cpu.ids.tolist(), f"{backend}: rows that differ: {np.flatnonzero(got != cpu.ids)}"
