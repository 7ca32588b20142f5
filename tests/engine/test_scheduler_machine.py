"""The scheduler and the KV manager against a plain reference, driven by hypothesis: requests arrive,
steps run (the runner is stood in for: each scheduled request gets one token), requests finish.
Guarantees: at most max_num_seqs run; every block is free or in exactly one table; no table is wider
than max_model_len allows and every running request's table covers its tokens; preemption takes the
newest running request first and puts it at the front of the queue; a step that preempted admits nothing."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from vt.engine.config import EngineConfig
from vt.engine.core.kv_manager import KVCacheManager
from vt.engine.core.request import Request, Status
from vt.engine.core.scheduler import Scheduler
from vt.engine.sample.params import SamplingParams

MAX_LEN, BLOCKS, SEQS, BS, BUDGET = 64, 16, 3, 8, 40  # a budget below max_model_len: prompts get chunked


class SchedulerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.cfg = EngineConfig(model="tiny-qwen3", max_model_len=MAX_LEN, num_blocks=BLOCKS, block_size=BS,
                                max_num_seqs=SEQS, max_num_batched_tokens=BUDGET)
        self.kv = KVCacheManager(BLOCKS, BS, self.cfg.max_blocks_per_seq)
        self.sched = Scheduler(self.cfg, self.kv)
        self.params = SamplingParams(temperature=0).resolve({})
        self.next_id = 0
        self.admitted: list[str] = []  # admission order of the running requests, the reference
        self.preemptions = 0

    @rule(n=st.integers(1, MAX_LEN - 1))
    def arrive(self, n: int) -> None:
        self.sched.add(Request(f"r{self.next_id}", list(range(n)), self.params))
        self.next_id += 1

    @rule()
    def step(self) -> None:
        running_before = [r.id for r in self.sched.running]
        out = self.sched.schedule()
        if out.preempted_ids:
            self.preemptions += 1
            k = len(out.preempted_ids)
            assert out.preempted_ids == running_before[::-1][:k], "newest running request first"
            assert [r.id for r in list(self.sched.waiting)[:k]] == out.preempted_ids[::-1], "requeued at the front"
            assert not out.new_reqs, "a step that preempted admits nothing"
        assert len(out.scheduled_ids) <= SEQS
        assert sum(out.num_scheduled_tokens.values()) <= BUDGET, "a step computes at most the token budget"
        for rid in out.scheduled_ids:  # the runner's stand-in: one token each, finishing at max_model_len
            r = next(x for x in self.sched.running if x.id == rid)
            if r.num_computed < r.num_prefill:
                continue  # a prefill chunk short of the end: no token yet
            r.output_ids.append(1)
            if r.num_tokens >= MAX_LEN:
                r.status = Status.FINISHED
                self.sched.finish(r)

    @precondition(lambda self: self.sched.running)
    @rule(data=st.data())
    def finish(self, data) -> None:
        r = data.draw(st.sampled_from(self.sched.running))
        r.status = Status.FINISHED
        self.sched.finish(r)

    @invariant()
    def at_most_max_num_seqs_run(self) -> None:
        assert len(self.sched.running) <= SEQS, f"{len(self.sched.running)} running, max_num_seqs={SEQS}"

    @invariant()
    def blocks_are_conserved_and_tables_fit(self) -> None:
        held = [b for tables in self.kv.tables.values() for t in tables for b in t]
        assert len(held) == len(set(held)), "a block in two tables"
        assert sorted(held + list(self.kv.free)) == list(range(BLOCKS)), "a block lost or duplicated"
        assert set(self.kv.tables) <= {r.id for r in self.sched.running}, "a table without a running request"
        for r in self.sched.running:
            n = len(self.kv.block_ids(r.id))
            assert n <= self.cfg.max_blocks_per_seq, f"{r.id}: table of {n} blocks overruns the width"
            assert n * BS >= r.num_computed, f"{r.id}: {r.num_computed} tokens computed in {n} blocks"


SchedulerMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=50, deadline=None,
                                               derandomize=True)  # the same runs every time: a stable gate
TestSchedulerMachine = SchedulerMachine.TestCase
