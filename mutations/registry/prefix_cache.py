"""Automatic prefix caching (issue 30): a key that forgets its parent, a served block left evictable, an evicted
block's key kept. The unit tests and the state machine against its reference are the gates."""

from __future__ import annotations

from mutations.model import Mutation

UNIT = "tests/engine/test_prefix_cache.py"
MACHINE = "tests/engine/test_prefix_cache_machine.py"
KV = "vt/engine/core/kv_manager.py"

ENTRIES: list[Mutation] = [
    Mutation(
        id="prefix-cache-key-without-its-parent",
        description="a full block's key hashes its own tokens only, not its parent's key",
        file=KV, old="        return hashlib.sha256(parent + np.asarray(tokens, dtype=np.int64).tobytes()).digest()",
        new="        return hashlib.sha256(np.asarray(tokens, dtype=np.int64).tobytes()).digest()",
        gates=(f"{UNIT}::test_a_block_matches_only_behind_the_same_whole_prefix",
               f"{MACHINE}::TestPrefixCacheMachine::runTest",
               f"{MACHINE}::test_the_machines_rules_do_serve_hits"),
    ),
    Mutation(
        id="prefix-cache-hit-stays-evictable",
        description="a cached block served to a request stays in the free queue, so it can be evicted while held",
        file=KV, old="            if self.refs[b] == 0:\n                del self.free[b]\n",
        new="            if self.refs[b] == 0:\n                pass\n",
        gates=(f"{MACHINE}::TestPrefixCacheMachine::runTest", f"{MACHINE}::test_the_machines_rules_do_serve_hits"),
    ),
    Mutation(
        id="prefix-cache-eviction-keeps-the-key",
        description="a free block taken for new KV keeps its key, so its old prefix is still served from it",
        file=KV, old="        if key is not None:\n            del self.cached[key]\n            self.block_key[b] = None\n",
        new="        if key is not None:\n            pass\n",
        gates=(f"{UNIT}::test_an_evicted_block_is_never_served", f"{MACHINE}::TestPrefixCacheMachine::runTest"),
    ),
]
