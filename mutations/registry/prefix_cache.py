"""Memory the way a vLLM user sizes it (issue 30): prefix caching (a key that forgets its parent, a served block
left evictable, an evicted block's key kept; the unit tests and the state machine against its reference are the
gates), and the KV pool checked against the memory there is before anything is allocated."""

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
    Mutation(
        id="kv-pool-check-ignores-the-weights",
        description="the memory check counts the KV pool alone: a pool that fits only without the weights passes",
        file="vt/engine/memory.py", old="    if need + weights <= available:\n", new="    if need <= available:\n",
        gates=("tests/engine/test_memory_check.py::test_the_boundary_is_exact_and_counts_the_weights",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="backend-auto-ignores-the-gpu",
        description="backend auto picks the CPU even where CuPy sees a GPU",
        file="vt/registry.py", old='        return "cuda" if cupy.cuda.runtime.getDeviceCount() > 0 else "cpu"\n',
        new='        return "cpu"\n',
        gates=("tests/vt/test_backend_auto.py::test_auto_picks_cuda_only_where_cupy_sees_a_gpu[1-cuda]",),
    ),
]
