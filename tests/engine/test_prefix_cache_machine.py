"""The scheduler with prefix caching against a plain reference, driven by hypothesis: prompts made of a few
shared blocks (so prefixes repeat, and equal blocks sit behind different prefixes; some of whole blocks, so cached
through their last token), steps with the runner stood in for, requests finishing, a pool small enough to evict.
The reference records, for every block whose KV a step computes, the tokens it was computed behind. Guarantees:
every block is free or referenced, never both, and its count of references is the tables naming it; a key names
one block, which carries it; a request is served a cached block only if that block's KV was computed behind
exactly the request's own prefix (so an evicted block, or one keyed without its parent, is never served)."""

from __future__ import annotations

from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from vt.engine.config import EngineConfig
from vt.engine.core.kv_manager import KVCacheManager
from vt.engine.core.request import Request, Status
from vt.engine.core.scheduler import Scheduler
from vt.engine.sample.params import SamplingParams

MAX_LEN, BLOCKS, SEQS, BS, BUDGET = 64, 14, 3, 8, 40
PIECES = [list(range(1, 9)), list(range(11, 19)), list(range(1, 9))]  # block-sized pieces; two equal on purpose


class PrefixCacheMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.cfg = EngineConfig(model="tiny-qwen3", max_model_len=MAX_LEN, num_blocks=BLOCKS, block_size=BS,
                                max_num_seqs=SEQS, max_num_batched_tokens=BUDGET)
        self.kv = KVCacheManager(BLOCKS, BS, self.cfg.max_blocks_per_seq, enable_caching=True)
        self.sched = Scheduler(self.cfg, self.kv)
        self.params = SamplingParams(temperature=0).resolve({})
        self.next_id = 0
        self.computed_behind: dict[int, tuple[int, ...]] = {}  # block -> the tokens up to its end, as computed
        self.hits = 0

    @rule(pieces=st.lists(st.integers(0, len(PIECES) - 1), min_size=1, max_size=5), tail=st.integers(0, 3))
    def arrive(self, pieces: list[int], tail: int) -> None:
        prompt = [t for i in pieces for t in PIECES[i]] + [9] * tail
        self.sched.add(Request(f"r{self.next_id}", prompt, self.params))
        self.next_id += 1

    @rule()
    def step(self) -> None:
        out = self.sched.schedule()
        new_ids = [n.req_id for n in out.new_reqs]
        # The step's forward writes every token's KV of a layer before that layer's attention, and computes new
        # requests in admission order: a new request may read blocks an earlier admission of this step computes.
        for new in out.new_reqs:
            req = next(r for r in self.sched.running if r.id == new.req_id)
            for i in range(new.num_cached // BS):
                b = new.block_ids[0][i]
                assert self.computed_behind.get(b) == tuple(req.all_ids[: (i + 1) * BS]), (
                    f"{req.id} served block {b} for its block {i}: computed behind "
                    f"{self.computed_behind.get(b)}, not its own prefix")
            self.hits += new.num_cached // BS
            self.record(req, new.num_cached)
        for r in self.sched.running:
            if r.id not in new_ids and r.id in out.num_scheduled_tokens:
                self.record(r, out.prefill_chunks.get(r.id, r.num_computed - out.num_scheduled_tokens[r.id]))
        for rid in out.scheduled_ids:
            r = next(x for x in self.sched.running if x.id == rid)
            if r.num_computed < r.num_prefill:
                continue
            r.output_ids.append(9)
            if r.num_tokens >= MAX_LEN or len(r.output_ids) >= 3:
                r.status = Status.FINISHED
                self.sched.finish(r)

    def record(self, r: Request, start: int) -> None:
        """r's step computes positions [start, num_computed): each block it fills was computed behind r's prefix."""
        table = self.kv.block_ids(r.id)
        for i in range(start // BS, min(r.num_computed, r.num_tokens) // BS):
            self.computed_behind[table[i]] = tuple(r.all_ids[: (i + 1) * BS])

    @precondition(lambda self: self.sched.running)
    @rule(data=st.data())
    def finish(self, data) -> None:
        r = data.draw(st.sampled_from(self.sched.running))
        r.status = Status.FINISHED
        self.sched.finish(r)

    @invariant()
    def a_block_is_free_or_referenced_never_both(self) -> None:
        named = Counter(b for tables in self.kv.tables.values() for t in tables for b in t)
        free = list(self.kv.free)
        assert len(free) == len(set(free)), "a block twice in the free queue"
        assert not set(free) & set(named), f"referenced blocks in the free queue: {set(free) & set(named)}"
        assert set(free) | set(named) == set(range(BLOCKS)), "a block neither free nor referenced"
        for b in range(BLOCKS):
            assert self.kv.refs[b] == named[b], f"block {b}: {self.kv.refs[b]} references, {named[b]} tables"

    @invariant()
    def a_key_names_one_block_which_carries_it(self) -> None:
        for key, b in self.kv.cached.items():
            assert self.kv.block_key[b] == key, f"block {b} does not carry the key that names it"
        assert sum(k is not None for k in self.kv.block_key) == len(self.kv.cached)


PrefixCacheMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                                 derandomize=True)
TestPrefixCacheMachine = PrefixCacheMachine.TestCase


def test_the_machines_rules_do_serve_hits() -> None:
    """Non-vacuity: the rules above, in a fixed order, get prefixes served (and behind a different first block,
    the equal second block is not)."""
    m = PrefixCacheMachine()
    m.arrive([0, 1], 1)
    for _ in range(4):
        m.step()
    m.arrive([0, 1], 2)
    m.arrive([1, 1], 1)
    for _ in range(4):
        m.step()
        m.a_block_is_free_or_referenced_never_both()
        m.a_key_names_one_block_which_carries_it()
    assert m.hits == 2, f"{m.hits} blocks served: the second prompt's two, none of the third's"
