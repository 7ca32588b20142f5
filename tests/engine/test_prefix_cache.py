"""Automatic prefix caching (vt/engine/core/kv_manager.py): keys chained through the parent block, a shared
system prompt computed once, n > 1 samples sharing through the cache, and the engine's outputs equal with and
without it."""

from __future__ import annotations

import pytest

from vt.engine.config import EngineConfig
from vt.engine.core.kv_manager import KVCacheManager
from vt.engine.core.request import Request, Status
from vt.engine.core.scheduler import Scheduler
from vt.engine.sample.params import SamplingParams

BS = 16


def run_to_completion(sched: Scheduler, reqs: list[Request], out_tokens: int = 1) -> None:
    """The runner stood in for: each request past its prefill gets one token a step, and finishes after
    out_tokens."""
    for r in reqs:
        sched.add(r)
    for _ in range(10_000):
        if not sched.has_work():
            return
        out = sched.schedule()
        for rid in out.scheduled_ids:
            r = next(x for x in sched.running if x.id == rid)
            if r.num_computed < r.num_prefill:
                continue
            r.output_ids.append(7)
            if len(r.output_ids) >= out_tokens:
                r.status = Status.FINISHED
                sched.finish(r)
    raise AssertionError("the scheduler never drained")


def scheduler(caching: bool, num_blocks: int = 2048, max_num_seqs: int = 16, budget: int = 8192) -> Scheduler:
    cfg = EngineConfig(model="tiny-qwen3", max_model_len=2048, num_blocks=num_blocks, block_size=BS,
                       max_num_seqs=max_num_seqs, max_num_batched_tokens=budget, enable_prefix_caching=caching)
    return Scheduler(cfg, KVCacheManager(num_blocks, BS, cfg.max_blocks_per_seq, enable_caching=caching))


def test_a_block_matches_only_behind_the_same_whole_prefix() -> None:
    kv = KVCacheManager(16, 4, 8, enable_caching=True)
    a, b = [1, 2, 3, 4, 9, 9, 9, 9, 5], [9, 9, 9, 9, 5]  # b's first block holds a's second block's tokens
    kv.allocate("a", [len(a)])
    kv.cache_full_blocks("a", a, len(a))
    assert kv.lookup(a) == kv.block_ids("a")[:2], "non-vacuous: a's own prefix is served"
    assert kv.lookup(b) == [], "b's first block has the tokens of a's second but not its prefix: no hit"
    assert kv.lookup([1, 2, 3, 4, 9, 9, 9, 8, 1]) == kv.block_ids("a")[:1], "the first block alone"


def test_an_evicted_block_is_never_served() -> None:
    kv = KVCacheManager(3, 4, 8, enable_caching=True)
    a = [1, 2, 3, 4, 5, 6, 7, 8, 0]
    kv.allocate("a", [len(a)])
    kv.cache_full_blocks("a", a, len(a))
    kv.release("a")  # tail first into the queue: the partial block, then block 1, then block 0
    assert len(kv.lookup(a)) == 2, "non-vacuous: released, its two full blocks are still cached"
    kv.allocate("b", [4])  # takes the least recently released: a's partial block
    kv.allocate("c", [4])  # then a's second block: its key goes
    assert len(kv.lookup(a)) == 1, "the evicted second block is not served; the first still is"
    assert all(kv.block_key[b] is None for b in kv.block_ids("c")), "a block taken for new KV carries no key"


def test_64_requests_sharing_a_1024_token_prompt_compute_a_tenth_of_the_prefill() -> None:
    system = list(range(1000, 2024))
    counts = {}
    for caching in (False, True):
        sched = scheduler(caching)
        reqs = [Request(f"r{i}", system + [3000 + i] * 16, SamplingParams(temperature=0).resolve({}))
                for i in range(64)]
        run_to_completion(sched, reqs)
        counts[caching] = sched.prefill_tokens
    assert counts[False] >= 64 * 1040, "non-vacuous: without caching every prompt is computed whole"
    assert counts[True] <= counts[False] / 10, f"prefill tokens with caching {counts[True]}, without {counts[False]}"


def test_a_request_asking_for_prompt_logprobs_computes_its_whole_prompt() -> None:
    sched = scheduler(True)
    prompt = list(range(100))
    plain = SamplingParams(temperature=0).resolve({})
    scored = SamplingParams(temperature=0, prompt_logprobs=1).resolve({})
    run_to_completion(sched, [Request("warm", prompt, plain)])
    before = sched.prefill_tokens
    run_to_completion(sched, [Request("scored", prompt, scored)])
    assert sched.prefill_tokens - before == len(prompt), "every position scored, so every position computed"
    run_to_completion(sched, [Request("again", prompt, plain)])
    assert sched.prefill_tokens - before - len(prompt) < BS, "non-vacuous: a plain repeat is served from the cache"


@pytest.mark.parametrize("caching", [False, True])
def test_n_samples_of_a_prompt_longer_than_the_budget_share_it_through_the_cache(caching: bool) -> None:
    sched = scheduler(caching, budget=64)
    params = SamplingParams(temperature=0).resolve({})
    prompt = list(range(200))
    reqs = [Request(f"s{i}", prompt, params) for i in range(4)]
    for r in reqs:
        r.siblings = reqs
    run_to_completion(sched, reqs)
    if caching:
        assert sched.prefill_tokens <= 200 + 3 * BS, f"{sched.prefill_tokens} prefill tokens for 4 samples of 200"
    else:
        assert sched.prefill_tokens >= 4 * 200 - 3 * BS, "non-vacuous: without the cache each sample computes it"


def test_the_keys_are_each_blocks_tokens_chained_behind_its_parents_key() -> None:
    """keys_of (one bytes conversion for all the blocks) gives each block's SHA-256 of its parent's key and its
    tokens as int64 bytes, block by block, from scratch and extending a known prefix of them."""
    import hashlib

    import numpy as np

    kv = KVCacheManager(16, 4, 8, enable_caching=True)
    tokens = [int(t) for t in np.random.default_rng(0).integers(0, 150_000, 21)]
    want: list[bytes] = []
    for i in range(5):
        block = np.array(tokens[4 * i : 4 * i + 4], np.int64).tobytes()
        want.append(hashlib.sha256((want[-1] if want else b"") + block).digest())
    assert kv.keys_of(tokens, 5) == want
    assert kv.keys_of(tokens, 5, want[:2]) == want, "extending a known prefix"
    assert len(set(want)) == 5, "non-vacuity: distinct keys"


def count_hashes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The prefix cache's SHA-256 calls from now on, counted in the returned list's one item."""
    import hashlib

    from vt.engine.core import kv_manager

    calls = [0]
    real = hashlib.sha256

    def counting(data: bytes = b"") -> object:
        calls[0] += 1
        return real(data)

    monkeypatch.setattr(kv_manager.hashlib, "sha256", counting)
    return calls


def test_a_lookup_hashes_only_up_to_the_first_block_not_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    """A miss hashes its first block only, not its whole prompt; a hit of two blocks hashes those and the first one
    past them. A step admitting a long uncached prompt keys it once, after its prefill, not also to find nothing."""
    calls = count_hashes(monkeypatch)
    kv = KVCacheManager(64, 4, 32, enable_caching=True)
    a = list(range(40))  # 10 full blocks (the last token never served from the cache)
    calls[0] = 0
    assert kv.lookup(a) == [] and calls[0] == 1, f"a miss hashed {calls[0]} blocks"
    kv.allocate("a", [8])
    kv.cache_full_blocks("a", a, 8)  # a's first two blocks cached
    calls[0] = 0
    assert len(kv.lookup(a)) == 2 and calls[0] == 3, f"a two-block hit hashed {calls[0]} blocks"


def test_a_request_waiting_for_blocks_hashes_its_prefix_once_across_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """B shares A's first 63 blocks but cannot be admitted while A holds nearly every block: each step looks B up
    again, and its keys come from B's own memo after the first (a 1,040-token prompt would otherwise hash its 64
    blocks every step)."""
    calls = count_hashes(monkeypatch)
    cfg = EngineConfig(model="tiny-qwen3", max_model_len=1056, num_blocks=66, block_size=BS, max_num_seqs=4,
                       max_num_batched_tokens=2048, enable_prefix_caching=True)
    sched = Scheduler(cfg, KVCacheManager(66, BS, cfg.max_blocks_per_seq, enable_caching=True))
    params = SamplingParams(max_tokens=100, ignore_eos=True).resolve()
    prompt = list(range(1000, 2024))  # 64 blocks
    a = Request("a", prompt, params)
    b = Request("b", prompt[:1008] + list(range(32)), params)  # A's first 63 blocks, then its own
    sched.add(a)
    sched.schedule()  # A's whole prompt prefilled and keyed
    a.output_ids.append(7)
    sched.add(b)
    calls[0] = 0
    for _ in range(6):
        out = sched.schedule()
        assert "b" not in {r.req_id for r in out.new_reqs}, "B is not admitted: A holds the blocks it needs"
        a.output_ids.append(7)
    assert len(b.block_keys) == 64, "non-vacuity: B was looked up, its 63 shared blocks hit and the next keyed"
    assert calls[0] <= 64 + 1, f"B's blocks hashed once across six steps (and one of A's filling): {calls[0]}"
