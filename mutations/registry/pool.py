"""DevicePool (vt/pool.py): the pre-grow, loans between size classes, the bypass flag read once, drain; and
one test-setup mutation that proves the pool test's own guard.
"""

from __future__ import annotations

from mutations.model import Kind, Mutation
from mutations.registry.gates import POOL

ENTRIES: list[Mutation] = [
    Mutation(
        id="pool-pregrow-returns-0",
        description="pregrow_for_capture returns 0 without growing anything",
        file="vt/pool.py", old="        grown = 0\n", new="        return 0\n        grown = 0\n",
        gates=(f"{POOL}::test_pregrow_makes_the_profiled_gets_hits_and_is_idempotent", f"{POOL}::TestPoolMachine"),
    ),
    Mutation(
        id="pool-put-demotes-loan",
        description="put returns a borrowed block to the requester's class instead of its own",
        file="vt/pool.py",
        old="                blk.home.free.append(blk)", new="                requester.free.append(blk)",
        gates=(f"{POOL}::test_put_returns_a_borrowed_block_to_its_own_class_and_decrements_the_requester",
               f"{POOL}::TestPoolMachine"),
    ),
    Mutation(
        id="pool-bypass-flag-reread",
        description="the pool re-reads VT_POOL_BYPASS on every get instead of once per process",
        file="vt/pool.py", old="            if self.is_bypass:\n                blk = Block(",
        new="            if __import__('os').environ.get('VT_POOL_BYPASS') == '1':\n                blk = Block(",
        gates=("tests/vt/test_env.py::test_pool_lane_does_not_change_when_the_environment_does",),
    ),
    Mutation(
        id="pool-drain-frees-live",
        description="drain frees every pooled block, live ones included",
        file="vt/pool.py", old="doomed = [b for sc in self._classes.values() for b in sc.free if b not in self._pins]",
        new="doomed = list(self._owned)",
        gates=(f"{POOL}::test_drain_frees_only_free_blocks", f"{POOL}::TestPoolMachine"),
    ),
    Mutation(
        id="test-pool-pregrow-nothing-to-drain",
        description="the pregrow test forgets to put its blocks back, so its drain frees nothing",
        kind=Kind.TEST_SETUP, file=POOL,
        old="    for b in blocks:\n        pool.put(b)\n    demand = pool.step_demand_profile()\n",
        new="    demand = pool.step_demand_profile()\n",
        gates=(f"{POOL}::test_pregrow_makes_the_profiled_gets_hits_and_is_idempotent",),
        expect="freed > 0",
    ),
]
