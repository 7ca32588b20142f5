"""Memory the way a vLLM user sizes it (issue 30): prefix caching (a key that forgets its parent, a served block
left evictable, an evicted block's key kept; the unit tests and the state machine against its reference are the
gates), and the KV pool checked against the memory there is before anything is allocated."""

from __future__ import annotations

from mutations.model import Mutation

UNIT = "tests/engine/test_prefix_cache.py"
MACHINE = "tests/engine/test_prefix_cache_machine.py"
KV = "vt/engine/core/kv_manager.py"
MEM = "tests/engine/test_memory_check.py"

ENTRIES: list[Mutation] = [
    Mutation(
        id="prefix-cache-key-without-its-parent",
        description="a full block's key hashes its own tokens only, not its parent's key",
        file=KV, old="            parent = hashlib.sha256(parent + data[i * step : (i + 1) * step]).digest()",
        new="            parent = hashlib.sha256(data[i * step : (i + 1) * step]).digest()",
        gates=(f"{UNIT}::test_a_block_matches_only_behind_the_same_whole_prefix",
               f"{UNIT}::test_the_keys_are_each_blocks_tokens_chained_behind_its_parents_key",
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
    Mutation(
        id="gpu-memory-utilization-ignored",
        description="the KV budget is 0.9 of the GPU whatever gpu_memory_utilization says",
        file="vt/engine/memory.py", old="    requested = int(total * utilization)\n", new="    requested = int(total * 0.9)\n",
        gates=(f"{MEM}::test_the_kv_budget_follows_gpu_memory_utilization",
               f"{MEM}::test_a_gpu_that_others_fill_past_the_utilization_is_refused_by_name"),
    ),
    Mutation(
        id="kv-budget-forgets-the-profiled-step",
        description="the KV cache is sized from the utilization alone: the weights and the largest step are not "
                    "subtracted, so the step after sizing runs out of memory",
        file="vt/engine/memory.py", old="    budget = requested - non_kv - int(total * GRAPH_RESERVE_FRACTION)\n",
        new="    budget = requested - int(total * GRAPH_RESERVE_FRACTION)\n",
        gates=(f"{MEM}::test_the_kv_budget_follows_gpu_memory_utilization",
               f"{MEM}::test_a_gpu_that_others_fill_past_the_utilization_is_refused_by_name"),
    ),
    Mutation(
        id="cuda-engine-ignores-gpu-memory-utilization",
        description="the CUDA engine sizes its KV cache at 0.9 whatever gpu_memory_utilization says",
        file="vt/engine/front/llm_engine.py", old="self.cfg.gpu_memory_utilization, own)",
        new="0.9, own)", needs_gpu=True,
        gates=(f"{MEM}::test_on_the_gpu_the_kv_cache_follows_the_utilization",),
    ),
    Mutation(
        id="cuda-given-num-blocks-ignores-the-largest-step",
        description="a given num_blocks on CUDA is checked against the weights alone, not the largest step's peak",
        file="vt/engine/front/llm_engine.py",
        old="            elif cfg.backend == \"cuda\" and free_at_start is not None:",
        new="            elif False:", needs_gpu=True,
        gates=(f"{MEM}::test_on_the_gpu_a_given_num_blocks_counts_the_largest_steps_peak",),
    ),
]

DRAFT = "tests/engine/test_prefix_cache_draft.py"
DRAFT_HIT = f"{DRAFT}::test_a_hit_starts_the_draft_behind_the_prefix_and_it_proposes_what_it_does_uncached"

ENTRIES += [
    Mutation(
        id="draft-hit-served-without-the-drafts-blocks",
        description="a speculating request is served the target's cached prefix where the draft group holds none",
        file=KV, old="            if b is None or (draft and d is None):", new="            if b is None:",
        gates=(f"{DRAFT}::test_a_speculating_request_is_served_only_as_far_as_the_drafts_group_is_cached",),
    ),
    Mutation(
        id="draft-group-never-cached",
        description="the draft's prompt blocks are never keyed: a draft-model engine serves no prefix hits",
        file=KV, old="        if draft_computed and self.num_groups > DRAFT:", new="        if False:",
        gates=(DRAFT_HIT, f"{DRAFT}::test_a_speculating_request_is_served_only_as_far_as_the_drafts_group_is_cached"),
    ),
    Mutation(
        id="draft-prefills-the-cached-prefix-again",
        description="on a hit the draft prefills the whole prompt again, its cached prefix included",
        file="vt/engine/spec_decode/proposers.py",
        old="            self.driver.pool.release(self.driver.prefill([(r.token_ids[r.num_cached:], "
            "batch.blocks(r.req_id, DRAFT),\n                                                           r.num_cached)",
        new="            self.driver.pool.release(self.driver.prefill([(r.token_ids, batch.blocks(r.req_id, DRAFT),\n"
            "                                                           0)",
        gates=(DRAFT_HIT,),
    ),
]

# Session 29: the keys on the TTFT path (every admission looks its prompt up)
ENTRIES += [
    Mutation(
        id="prefix-lookup-hashes-the-whole-prompt",
        description="a lookup keys every full block of the prompt before it looks the first one up: a miss hashes its "
                    "whole prompt to find nothing, on every admission",
        file=KV,
        old="            yield from self.chained_keys(token_ids, 0, stop, root)\n",
        new="            yield from self.keys_of(token_ids, stop, root=root)\n",
        gates=(f"{UNIT}::test_a_lookup_hashes_only_up_to_the_first_block_not_cached",),
        expect="a miss hashed",
    ),
    Mutation(
        id="prefix-keys-hash-the-parent-alone",
        description="a block's key drops its own tokens when extending a known prefix (the bytes slice starts past "
                    "them): every block past the first keys like its parent",
        file=KV,
        old="            parent = hashlib.sha256(parent + data[i * step : (i + 1) * step]).digest()",
        new="            parent = hashlib.sha256(parent + data[(i + 1) * step : (i + 1) * step]).digest()",
        gates=(f"{UNIT}::test_the_keys_are_each_blocks_tokens_chained_behind_its_parents_key",
               f"{UNIT}::test_a_block_matches_only_behind_the_same_whole_prefix"),
    ),
]

# Session 37: a request waiting for blocks is looked up every step
ENTRIES += [
    Mutation(
        id="prefix-lookup-forgets-the-requests-keys",
        description="a lookup drops the keys a request's memo holds and hashes its prefix again: a request waiting "
                    "for blocks rehashes its whole cached prefix every step",
        file=KV,
        old="        yield from memo[:stop]\n",
        new="        del memo[:]\n",
        gates=(f"{UNIT}::test_a_request_waiting_for_blocks_hashes_its_prefix_once_across_steps",),
        expect="hashed once across six steps",
    ),
]

# Session 44: a prompt of whole blocks, cached through its last token, computes that token alone
OUTPUTS = "tests/engine/test_prefix_cache_outputs.py"
FULL_HIT = f"{OUTPUTS}::test_a_prompt_cached_through_its_last_token_computes_that_token_alone_and_writes_no_kv"

ENTRIES += [
    Mutation(
        id="prefix-hit-stops-a-block-short",
        description="a lookup never serves the block holding the last token (vLLM's rule): a prompt of whole blocks, "
                    "all cached, computes its last block again instead of its last token",
        file=KV,
        old="        for key in self._keys_through(token_ids, len(token_ids) // self.block_size, memo, root):",
        new="        for key in self._keys_through(token_ids, (len(token_ids) - 1) // self.block_size, memo, root):",
        gates=(f"{FULL_HIT}[piecewise-prefill-cpu]", f"{FULL_HIT}[whole-decode-step-cpu]"),
        expect="not its last one alone",
    ),
    Mutation(
        id="prefix-full-hit-prefill-writes-the-shared-block",
        description="a chunk through the prefill graphs writes the KV of tokens the cache holds already: a full hit's "
                    "last token is written into the block the cache shares",
        file="models/base.py",
        old="        slots.append(np.where(p < held, -1, blocks[p // bs] * bs + p % bs))",
        new="        slots.append(blocks[p // bs] * bs + p % bs)",
        gates=(f"{FULL_HIT}[piecewise-prefill-cpu]",),
        expect="wrote its last token's KV into the shared block",
    ),
    Mutation(
        id="prefix-full-hit-whole-step-writes-the-shared-block",
        description="a step run whole as a decode step writes the KV of tokens the cache holds already: a full hit's "
                    "last token over a long context is written into the block the cache shares",
        file="vt/engine/worker/runner.py",
        old="        slots = np.where(positions < held[owner], -1, self._kv_slots(token_rows, positions, tables))",
        new="        slots = self._kv_slots(token_rows, positions, tables)",
        gates=(f"{FULL_HIT}[whole-decode-step-cpu]",),
        expect="wrote its last token's KV into the shared block",
    ),
    Mutation(
        id="draft-prefills-nothing-on-a-full-hit",
        description="a request whose prompt both groups hold through its last token still gets a draft prefill "
                    "launch, of no tokens",
        file="vt/engine/spec_decode/proposers.py",
        old="        prefills = [r for r in fresh if r.num_cached < len(r.token_ids)]",
        new="        prefills = fresh",
        gates=(f"{DRAFT}::test_a_prompt_cached_through_its_last_token_leaves_the_draft_nothing_to_prefill",),
        expect="not none",
    ),
]

# Session 44: OpenAI's usage.prompt_tokens_details.cached_tokens and vLLM's RequestOutput.num_cached_tokens
DETAILS = "tests/server/test_prompt_tokens_details.py::test_usage_counts_the_prompt_tokens_the_prefix_cache_served"
OFFLINE_CACHED = f"{OUTPUTS}::test_each_output_says_how_many_prompt_tokens_the_cache_served"

ENTRIES += [
    Mutation(
        id="cached-tokens-count-the-held-kv",
        description="a request's cached tokens count every token whose KV the cache holds: a prompt sent again "
                    "reports its last token too, which it computed",
        file="vt/engine/core/scheduler.py",
        old="                req.num_cached_tokens = 0 if leader else start\n",
        new="                req.num_cached_tokens = 0 if leader else held\n",
        gates=(OFFLINE_CACHED, f"{DETAILS}[in-process]"),
    ),
    Mutation(
        id="usage-cached-tokens-always-zero",
        description="usage's prompt_tokens_details says 0 cached tokens whatever the cache served",
        file="vt/server/app.py",
        old='            usage["prompt_tokens_details"] = {"cached_tokens": sum(out.num_cached_tokens or 0 for out in outs)}\n',
        new='            usage["prompt_tokens_details"] = {"cached_tokens": 0}\n',
        gates=(f"{DETAILS}[in-process]", f"{DETAILS}[vt-serve]"),
        expect="sent again, the prompt is served all but its last token",
    ),
    Mutation(
        id="engine-process-drops-the-cached-tokens",
        description="the engine core process sends a one-sample request's output without its cached tokens: vt "
                    "serve's usage says 0",
        file="vt/engine/core/proc.py",
        old="                [delta], cached_of(r))",
        new="                [delta], None)",
        gates=(f"{DETAILS}[vt-serve]",),
        expect="sent again, the prompt is served all but its last token",
    ),
    Mutation(
        id="serve-ignores-enable-prompt-tokens-details",
        description="vt serve takes --enable-prompt-tokens-details and never hands it to the server",
        file="vt/cli.py",
        old="                                              prompt_tokens_details=args.enable_prompt_tokens_details,\n",
        new="",
        gates=(f"{DETAILS}[vt-serve]",),
        expect="asked for, usage carries prompt_tokens_details",
    ),
    Mutation(
        id="usage-details-without-the-flag",
        description="usage carries prompt_tokens_details whether or not the server was asked for it",
        file="vt/server/app.py",
        old="        if self.server.prompt_tokens_details:  # OpenAI's field",
        new="        if True:  # OpenAI's field",
        gates=("tests/server/test_prompt_tokens_details.py::test_without_the_flag_usage_carries_no_prompt_tokens_"
               "details",),
    ),
]

# Session 44: LLM.reset_prefix_cache
RESET = "tests/engine/test_prefix_cache_reset.py"
RESET_AGAIN = f"{RESET}::test_after_a_reset_a_prompt_sent_again_is_computed_again"

ENTRIES += [
    Mutation(
        id="prefix-reset-keeps-the-keys",
        description="a prefix-cache reset says it is done and keeps every key: a prompt sent again is served the KV "
                    "computed before it",
        file=KV, old="        self.cached.clear()\n        self.block_key = [None] * self.num_blocks\n", new="",
        gates=(f"{RESET_AGAIN}[in-process]", f"{RESET_AGAIN}[engine-process]"),
        expect="after the reset the cache served",
    ),
    Mutation(
        id="prefix-reset-while-blocks-are-held",
        description="a prefix-cache reset goes ahead while requests hold KV blocks",
        file=KV, old="        if self.tables:\n            return False\n        self.cached.clear()",
        new="        if False:\n            return False\n        self.cached.clear()",
        gates=(f"{RESET}::test_a_reset_while_a_request_holds_blocks_is_refused_and_the_cache_kept",),
        expect="a reset while a request holds blocks is refused",
    ),
    Mutation(
        id="engine-core-answers-a-reset-without-resetting",
        description="the engine core process answers a prefix-cache reset as done without doing it",
        file="vt/engine/core/proc.py",
        old='            _send(self.conn, ("reset", msg[1], self.engine.reset_prefix_cache()))',
        new='            _send(self.conn, ("reset", msg[1], True))',
        gates=(f"{RESET_AGAIN}[engine-process]",),
        expect="after the reset the cache served",
    ),
    Mutation(
        id="reset-waits-on-a-dead-core",
        description="the front's reader, on the core's end of file, fails the requests in flight but not a "
                    "prefix-cache reset waiting on the core's answer: it waits for good",
        file="vt/engine/core/proc.py",
        old="        except (EOFError, OSError):\n            self._resets.put(None)\n",
        new="        except (EOFError, OSError):\n",
        gates=(f"{RESET}::test_a_reset_waiting_on_a_core_that_dies_ends_in_engine_dead_error",),
        expect="the reset waited on a dead core",
    ),
    Mutation(
        id="engine-core-client-takes-any-reset-answer",
        description="the front takes the first reset answer in its queue as its own: one left by a call that stopped "
                    "waiting is read as the next call's",
        file="vt/engine/core/proc.py", old="                if answer[0] == n:\n", new="                if True:\n",
        gates=(f"{RESET}::test_a_reset_through_the_core_takes_only_its_own_answer",),
        expect="an answer left by an earlier call",
    ),
]

# Session 47: the prefix-cache counters count what vLLM v1 counts
COUNTS = "tests/engine/test_prefix_cache_metrics.py"
VLLM_METRICS = "tests/server/test_vllm_metrics.py"
SCHED = "vt/engine/core/scheduler.py"

ENTRIES += [
    Mutation(
        id="prefix-counters-count-readmissions",
        description="a readmission after preemption adds its lookup to the prefix-cache queries and hits, not to "
                    "vLLM's preempted_* kept apart",
        file=SCHED, old="        if req.num_preemptions > 0:\n", new="        if False:\n",
        gates=(f"{COUNTS}::test_a_readmission_after_preemption_is_not_counted_as_a_query",
               f"{VLLM_METRICS}::test_the_prefix_counters_leave_out_readmissions_after_preemption"),
        expect="each prompt token",
    ),
    Mutation(
        id="prefix-counters-skip-forked-samples",
        description="a sample forked from its leader (n > 1) is never counted: its prompt is queried once for all n",
        file=SCHED, old="            if self._may_use_cache(req):  # vLLM's prefix-cache counters, in tokens, once per admission\n",
        new="            if self._may_use_cache(req) and not leader:\n",
        gates=(f"{COUNTS}::test_each_of_n_samples_queries_its_prompt_and_a_fork_hits_the_blocks_it_shares",
               f"{VLLM_METRICS}::test_each_of_n_samples_queries_the_prompt_and_a_fork_hits_what_it_shares"),
        expect="each fork hits the blocks it shares",
    ),
    Mutation(
        id="prefix-counters-fork-hits-nothing",
        description="a forked sample queries its prompt but counts none of the leader's blocks it shares as hits",
        file=SCHED,
        old="                self._count_lookup(req, n, len(shared[TARGET]) * self.kv.block_size if leader else start)\n",
        new="                self._count_lookup(req, n, 0 if leader else start)\n",
        gates=(f"{COUNTS}::test_each_of_n_samples_queries_its_prompt_and_a_fork_hits_the_blocks_it_shares",
               f"{VLLM_METRICS}::test_each_of_n_samples_queries_the_prompt_and_a_fork_hits_what_it_shares"),
        expect="each fork hits the blocks it shares",
    ),
]

SALT = "tests/engine/test_cache_salt.py"
SALT_SERVER = "tests/server/test_cache_salt_server.py"
ENTRIES += [
    Mutation(
        id="cache-salt-ignored-by-the-engine",
        description="the engine roots every request's key chain at the empty key, whatever its cache_salt",
        file="vt/engine/front/llm_engine.py", old="        root = KVCacheManager.salt_root(cache_salt)\n",
        new="        root = KVCacheManager.salt_root(None)\n",
        gates=(f"{SALT}::test_the_offline_api_serves_a_prefix_only_under_the_salt_it_was_cached_with",),
        expect="each salt (and none) computes the prompt itself",
    ),
    Mutation(
        id="cache-salt-keys-cached-blocks-unsalted",
        description="a salted request's lookup is rooted at its salt, but its computed blocks are keyed unsalted",
        file=SCHED, old="                                      root=req.cache_root)\n",
        new="                                      root=b\"\")\n",
        gates=(f"{SALT}::test_the_offline_api_serves_a_prefix_only_under_the_salt_it_was_cached_with",),
        expect="each salt (and none) computes the prompt itself",
    ),
    Mutation(
        id="cache-salt-decode-filled-blocks-keyed-unsalted",
        description="a block a salted request's decode fills is keyed under no salt: any request is served it",
        file=KV, old="                self.cache_full_blocks(req.id, req.all_ids, req.num_computed, root=req.cache_root)\n",
        new="                self.cache_full_blocks(req.id, req.all_ids, req.num_computed)\n",
        gates=(f"{SALT}::test_a_block_its_decode_fills_is_keyed_under_its_salt",),
        expect="another salt, or none, is served nothing of it",
    ),
    Mutation(
        id="cache-salt-dropped-on-the-wire",
        description="the engine process's add message carries no cache salt",
        file="vt/engine/core/proc.py",
        old="        msg = (\"add\", rid, ids, _params_wire(replace(params, detokenize=False) if here else params), cache_salt)\n",
        new="        msg = (\"add\", rid, ids, _params_wire(replace(params, detokenize=False) if here else params), None)\n",
        gates=(f"{SALT}::test_the_offline_api_serves_a_prefix_only_under_the_salt_it_was_cached_with",
               f"{SALT_SERVER}::test_a_prompt_is_served_its_cached_prefix_only_under_its_own_salt"),
        expect="each salt (and none) computes the prompt itself",
    ),
    Mutation(
        id="cache-salt-dropped-by-the-server",
        description="the API server reads cache_salt but hands the engine none",
        file="vt/server/app.py", old="        self.gens = [server.llm.generate(ids, parsed.params, f\"{rid}-{i}\", parsed.cache_salt)\n",
        new="        self.gens = [server.llm.generate(ids, parsed.params, f\"{rid}-{i}\", None)\n",
        gates=(f"{SALT_SERVER}::test_a_prompt_is_served_its_cached_prefix_only_under_its_own_salt",),
        expect="each salt (and none) computes the prompt itself",
    ),
    Mutation(
        id="cache-salt-empty-string-taken",
        description="an empty cache_salt is taken as no salt, not refused",
        file="vt/engine/front/llm_engine.py",
        old="    if cache_salt is not None and (not isinstance(cache_salt, str) or not cache_salt):\n",
        new="    if cache_salt is not None and not isinstance(cache_salt, str):\n",
        gates=(f"{SALT}::test_a_salt_that_is_not_a_non_empty_string_is_refused_by_name",
               f"{SALT_SERVER}::test_a_salt_that_is_not_a_non_empty_string_is_a_400_naming_the_field"),
    ),
]
