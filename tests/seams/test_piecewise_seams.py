"""Seam tests for piecewise prefill graphs (vt/engine/worker/piecewise.py), the decode slots' pattern per token
bucket: cold step, drain (freed > 0), reset counters, capture, allocs_in_step > 0, allocs_in_capture == 0;
replayed logits equal eager logits bit for bit; and the buckets agree with the unsplit, unpadded prefill."""

from __future__ import annotations

import numpy as np
import pytest

from models.base import prefill_logits
from seams.harness import SeamHarness
from seams.lanes import GRAPHS_REASON, guarantee
from tests.helpers import guarding
from vt.errors import CaptureUnsupported, IllegalMemoryAccess

MODELS = ["tiny-qwen3", "tiny-qwen3-moe"]
# (prompt lengths, first positions): whole prompts, a chunk over KV already written, mixed; 5 and 40
# tokens pad up to the 16 and 64 buckets
STEPS = {"one-5": ([5], [0]), "two-40": ([17, 23], [0, 0]), "chunk-at-32": ([30], [32])}


def _seqs(h: SeamHarness, lengths: list[int], starts: list[int], seed: int) -> list[tuple]:
    """Prompts of these lengths at these first positions, each with its own blocks (the KV before a chunk
    is written by an unsplit prefill first)."""
    rng, vocab, bs = np.random.default_rng(seed), h.model.cfg.vocab_size, h.block_size
    out, next_block = [], 0
    for n, p0 in zip(lengths, starts):
        blocks = list(range(next_block, next_block + -(-(p0 + n) // bs)))
        next_block += len(blocks)
        toks = rng.integers(3, vocab, p0 + n).tolist()
        if p0:
            h.backend.pool.release(prefill_logits(h.model, [(toks[:p0], blocks)], h.kv))
        out.append((toks[p0:], blocks, p0))
    return out


def _prefill(h: SeamHarness, seqs: list[tuple], all_rows: tuple = ()) -> np.ndarray:
    logits = h.driver.prefill(seqs, all_rows)
    with h.backend.use_stream(h.driver.stream):
        out = h.backend.copy_d2h(logits)
    h.pool.release(logits)
    return out


SEAM_CASES = [guarantee(m, s, id=f"{m}-{s}", reason=GRAPHS_REASON) for m in MODELS for s in STEPS]


@pytest.mark.parametrize("model, step", SEAM_CASES)
def test_P1_a_buckets_capture_allocates_nothing_after_drain(model: str, step: str) -> None:
    h = SeamHarness(model)
    seqs = _seqs(h, *STEPS[step], seed=0)
    _prefill(h, seqs)
    bucket = h.driver.buckets[max(h.driver.buckets)]
    assert not bucket.is_captured, "a bucket's first step is eager"
    assert h.pool.drain() > 0, "precondition: the drain really emptied the free lists"
    h.backend.reset_counters()
    with guarding("a segment's capture allocated after the drain (the pre-grow left it short)", CaptureUnsupported):
        _prefill(h, seqs)
    assert bucket.is_captured and len(bucket.graph.segments) == h.model.cfg.num_hidden_layers + 1, "captured"
    needed = sum(bucket.demand.values())  # type: ignore[union-attr]
    assert h.backend.allocs_in_step >= needed > 0, (
        f"non-vacuity: {h.backend.allocs_in_step} driver allocations for a profile of {needed} blocks (the "
        "pre-grow refills the drained free lists, outside the segments' captures)")
    assert h.backend.allocs_in_capture == 0, f"{h.backend.allocs_in_capture} driver allocation(s) inside a segment"


@pytest.mark.parametrize("lane", [guarantee("pool", id="pool-lane", reason=GRAPHS_REASON)])
def test_P1_every_bucket_the_largest_included_captures_nothing_after_drain(lane: str) -> None:
    """A step that fills each bucket of the driver's ladder exactly, bucket by bucket: cold, drain, capture;
    no segment's capture allocates, the largest bucket's included."""
    h = SeamHarness("tiny-qwen3")
    for i, T in enumerate(h.driver.token_ladder):
        seqs = _seqs(h, [T], [0], seed=i)
        _prefill(h, seqs)
        assert h.pool.drain() > 0, f"precondition ({T} tokens): the drain really emptied the free lists"
        h.backend.reset_counters()
        with guarding(f"the {T}-token bucket's capture allocated after the drain", CaptureUnsupported):
            _prefill(h, seqs)
        assert h.driver.buckets[T].is_captured, f"non-vacuity: the {T}-token bucket captured"
        assert h.backend.allocs_in_capture == 0, (
            f"{h.backend.allocs_in_capture} driver allocation(s) inside a segment of the {T}-token bucket")
    assert sorted(h.driver.buckets) == h.driver.token_ladder, "non-vacuity: every bucket of the ladder ran"


@pytest.mark.parametrize("model, step", SEAM_CASES)
def test_P2_replayed_prefill_logits_equal_eager_bit_for_bit(model: str, step: str) -> None:
    graphs, eager = SeamHarness(model), SeamHarness(model, graphs=False)
    for round_ in range(4):  # cold, capture (and its replay), replay, replay with new tokens
        seed = 0 if round_ < 3 else 1
        a, b = _prefill(graphs, _seqs(graphs, *STEPS[step], seed)), _prefill(eager, _seqs(eager, *STEPS[step], seed))
        assert np.array_equal(a, b), f"round {round_}: replayed logits differ from eager"
    assert graphs.driver.num_prefill_replays >= 2 and eager.driver.num_prefill_captures == 0, "both paths ran"


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("step", list(STEPS))
def test_P3_bucketed_prefill_agrees_with_the_unsplit_unpadded_prefill(model: str, step: str) -> None:
    h, plain = SeamHarness(model), SeamHarness(model)
    for _ in range(3):
        got = _prefill(h, _seqs(h, *STEPS[step], seed=0))
        t = prefill_logits(plain.model, _seqs(plain, *STEPS[step], seed=0), plain.kv)
        want = plain.backend.copy_d2h(t)
        plain.pool.release(t)
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-5)
        assert (got.argmax(-1) == want.argmax(-1)).all()
    padded = next(iter(h.driver.buckets))
    assert padded > sum(STEPS[step][0]), "non-vacuity: the bucket padded the step"


# one 64-token bucket, three different steps through it: two prompts; three prompts with prompt logprobs
# (every row of the second); one chunk over KV already written, its every row too
ROUNDS = [(([17, 23], [0, 0]), ()), (([9, 30, 2], [0, 0, 0]), (1,)), (([40], [16]), (0,)), (([25, 20], [0, 0]), ())]


@pytest.mark.parametrize("model", [guarantee(m, id=m, reason=GRAPHS_REASON) for m in MODELS])
def test_P4_one_bucket_replays_whatever_sequences_its_step_holds(model: str) -> None:
    graphs, eager, plain = SeamHarness(model), SeamHarness(model, graphs=False), SeamHarness(model)
    for i, ((lengths, starts), all_rows) in enumerate(ROUNDS):
        a = _prefill(graphs, _seqs(graphs, lengths, starts, seed=i), all_rows)
        b = _prefill(eager, _seqs(eager, lengths, starts, seed=i), all_rows)
        t = prefill_logits(plain.model, _seqs(plain, lengths, starts, seed=i), plain.kv, all_rows)
        want = plain.backend.copy_d2h(t)
        plain.pool.release(t)
        assert np.array_equal(a, b), f"round {i}: the replay differs from eager"
        np.testing.assert_allclose(a, want, rtol=0, atol=2e-5, err_msg=f"round {i}: differs from the unsplit prefill")
    assert list(graphs.driver.buckets) == [64] and graphs.driver.num_prefill_replays >= 2, (
        "non-vacuity: one bucket, captured and then replayed over other sequences")


@pytest.mark.parametrize("model", [guarantee(m, id=m, reason=GRAPHS_REASON) for m in MODELS])
def test_P5_a_drain_never_frees_a_live_buckets_temporaries(model: str) -> None:
    """Sanitized: a drain between replays must leave the segments' temporaries alone (they are pinned), or
    the next replay writes freed memory."""
    from backends.cpu import CpuBackend

    h = SeamHarness(model, backend_obj=CpuBackend(sanitize=True))
    seqs = _seqs(h, *STEPS["two-40"], seed=0)
    first = _prefill(h, seqs)
    _prefill(h, seqs)  # captured
    bucket = h.driver.buckets[64]
    assert bucket.is_captured and bucket.pinned, "non-vacuity: a captured bucket with temporaries"
    with guarding("the drain freed a live bucket's temporaries: its replay read freed memory", IllegalMemoryAccess):
        assert h.pool.drain() > 0, "non-vacuity: the drain freed something"
        np.testing.assert_array_equal(_prefill(h, seqs), first)


@pytest.mark.parametrize("budget", [64, 512])
@pytest.mark.parametrize("lane", [guarantee("pool", id="pool-lane", reason=GRAPHS_REASON)])
def test_P4_greedy_tokens_with_graphs_equal_eager_at_every_bucket_edge(lane: str, budget: int) -> None:
    """Prompts whose lengths land on each token bucket's edge (and one past it), prefilled whole or in chunks
    of the step budget, beside decoding requests (mixed steps): greedy tokens with piecewise and decode graphs
    are the eager run's, token for token."""
    from vt import LLM, SamplingParams
    from vt.engine.worker.piecewise import token_ladder

    edges = token_ladder(budget)
    lengths = sorted({n for t in edges for n in (t - 1, t, t + 1) if 1 < n <= 2 * budget})
    prompts = [[3 + (7 * i + 11 * j) % 500 for j in range(n)] for i, n in enumerate(lengths)]
    sp = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)

    def run(eager: bool) -> tuple[list, int]:
        llm = LLM(model="tiny-qwen3", max_model_len=2 * budget + 16, num_blocks=256, max_num_seqs=4,
                  max_num_batched_tokens=budget, enforce_eager=eager)
        outs = [o.outputs[0].token_ids for o in llm.generate(prompts, sp)]
        return outs, llm.engine.runner.decoder.num_prefill_replays
    graphs, replays = run(False)
    eager, none = run(True)
    assert graphs == eager
    assert replays > 0 and none == 0, "non-vacuity: piecewise graphs replayed on one side only"
    assert len(lengths) >= 3 * len(edges) - 2, "non-vacuity: every bucket edge is a prompt length"


@pytest.mark.parametrize("lane", [guarantee("pool", id="pool-lane")])
def test_P6_a_step_above_every_bucket_returns_nothing_to_the_driver(lane: str) -> None:
    """A step longer than the largest bucket runs eagerly, unsplit. Its temporaries (the block tables, token rows
    and tiles too) must come from the pool and go back to it: a driver free (cudaFree) waits for the whole
    device, so a step that freed its own would stall the host behind its forward, every step."""
    h = SeamHarness("tiny-qwen3")
    T = h.driver.token_ladder[-1] + 40
    frees, allocs, handed = [], [], []
    for seed in range(3):
        seqs = _seqs(h, [T // 2, T - T // 2], [0, 0], seed)
        h.backend.reset_counters()
        before = h.pool.hits + h.pool.misses + h.pool.borrows
        _prefill(h, seqs)
        frees.append(h.backend.frees_in_step)
        allocs.append(h.backend.allocs_in_step)
        handed.append(h.pool.hits + h.pool.misses + h.pool.borrows - before)
    assert frees == [0, 0, 0], f"driver frees in each of three eager {T}-token steps: {frees}"
    assert allocs[1:] == [0, 0], f"driver allocations in each step after the first: {allocs}"
    assert max(h.driver.buckets, default=0) < T and min(handed) > 0, (
        f"non-vacuity: no bucket holds {T} tokens (the step ran eagerly) and it drew {handed} pool blocks")
