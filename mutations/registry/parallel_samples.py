"""n > 1 (issue 13): the samples share the prompt's full blocks; the partial block is each sample's own copy;
release follows the refcount.
"""

from __future__ import annotations

from mutations.model import Mutation
from mutations.registry.gates import PAR

ENTRIES: list[Mutation] = [
    Mutation(
        id="fork-shares-the-partial-block",
        description="the samples share the prompt's partial last block too, and overwrite each other's tokens in it",
        file="vt/engine/core/scheduler.py", old="self.kv.fork(leader, req.id, n // self.kv.block_size)",
        new="self.kv.fork(leader, req.id, -(-n // self.kv.block_size))",
        gates=(f"{PAR}::test_each_sample_is_the_request_it_would_be_alone",
               f"{PAR}::test_the_samples_share_the_prompts_full_blocks"),
        # the two-launch path: with the rope variant the twin refuses the samples' writes into one block first
        env=(("VT_ROPE_IN_ATTENTION", "0"),),
    ),
    Mutation(
        id="fork-partial-block-not-copied",
        description="a forked sample's own partial prompt block is never filled from its leader's",
        file="vt/engine/worker/runner.py", old="            if n % bs:  # the partial last block", new="            if False:  # the partial last block",
        gates=(f"{PAR}::test_each_sample_is_the_request_it_would_be_alone",
               f"{PAR}::test_a_sample_that_finishes_early_leaves_the_shared_blocks_to_the_others"),
    ),
    Mutation(
        id="release-ignores-the-refcount",
        description="a sample that finishes frees the prompt blocks its siblings still read",
        file="vt/engine/core/kv_manager.py",
        old="            self.refs[b] -= 1\n            if self.refs[b] == 0:\n",
        new="            self.refs[b] -= 1\n            if True:\n",
        # (the free queue is a set in order since prefix caching: a block freed twice is not counted twice, so the
        # blocks-in-use count of test_the_samples_share_the_prompts_full_blocks no longer goes negative)
        gates=(f"{PAR}::test_a_sample_that_finishes_early_leaves_the_shared_blocks_to_the_others",),
    ),
]
