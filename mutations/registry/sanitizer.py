"""The sanitizer as DESIGN states it (issue 18): released and re-owned pool blocks, replays over temporaries
someone still holds, quarantine, poisoning.
"""

from __future__ import annotations

from mutations.model import Mutation
from mutations.registry.gates import CPU

ENTRIES: list[Mutation] = [
    Mutation(
        id="sanitizer-ignores-released-blocks",
        description="the sanitizer checks freed buffers only: a kernel reading a released pool block runs silently",
        file="backends/cpu.py",
        old="        if not owned_by_graph and blk is not None and (not blk.is_live or blk.generation != t.generation):",
        new="        if False:",
        gates=(f"{CPU}::test_sanitizer_names_a_kernel_reading_a_released_pool_block_with_both_stacks",
               f"{CPU}::test_sanitizer_names_a_stale_tensor_whose_block_another_owner_holds_now"),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="sanitizer-ignores-other-owners",
        description="the sanitizer does not tell a block's owners apart: a stale tensor reads its successor's data",
        file="backends/cpu.py",
        old="        if not owned_by_graph and blk is not None and (not blk.is_live or blk.generation != t.generation):",
        new="        if not owned_by_graph and blk is not None and not blk.is_live:",
        gates=(f"{CPU}::test_sanitizer_names_a_stale_tensor_whose_block_another_owner_holds_now",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="sanitizer-aliasing-unchecked",
        description="a graph replays over a temporary that a long-lived tensor still holds, unreported",
        file="vt/engine/worker/graph_driver.py", old="                self.pool.check_idle(slot.pinned, f\"the graph of slot {slot.key}\")\n",
        new="                pass\n",
        gates=(f"{CPU}::test_sanitizer_refuses_a_replay_over_a_temporary_someone_still_holds[pool-lane]",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="sanitizer-no-quarantine",
        description="a released block is handed out again first (LIFO) even when the sanitizer runs",
        file="vt/pool.py", old="            elif self.is_sanitizing:  # quarantine", new="            elif False:  # quarantine",
        gates=(f"{CPU}::test_sanitizer_quarantines_a_released_block_behind_every_other_free_one",),
        expect="sanitize=True",
    ),
    Mutation(
        id="pool-release-not-poisoned",
        description="a released pool block keeps its contents: a stale read sees plausible numbers",
        file="vt/pool.py", old="                self.backend.poison(blk.buffer)\n", new="                pass\n",
        gates=(f"{CPU}::test_sanitizer_names_a_kernel_reading_a_released_pool_block_with_both_stacks",),
        expect="a released block is poisoned",
    ),
]
