"""The scheduler and KV manager against a reference state machine (issue 18): max_num_seqs, block accounting."""

from __future__ import annotations

from mutations.model import Mutation

ENTRIES: list[Mutation] = [
    Mutation(
        id="scheduler-ignores-max-num-seqs",
        description="admission ignores max_num_seqs: more requests run than the batch has rows",
        file="vt/engine/core/scheduler.py",
        old="        while self.waiting and len(self.running) < self.cfg.max_num_seqs:",
        new="        while self.waiting:",
        gates=("tests/engine/test_scheduler_machine.py::TestSchedulerMachine",),
        expect="max_num_seqs",
    ),
    Mutation(
        id="kv-release-loses-a-block",
        description="releasing a request's blocks drops the last one: the pool shrinks a block at a time",
        file="vt/engine/core/kv_manager.py", old="        for b in (b for t in tables for b in reversed(t)):",
        new="        for b in [b for t in tables for b in reversed(t)][:-1]:",
        gates=("tests/engine/test_scheduler_machine.py::TestSchedulerMachine",),
        expect="a block lost or duplicated",
    ),
]
