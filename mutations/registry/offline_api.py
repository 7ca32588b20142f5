"""The offline API (issue 13, in part): prompt shapes, chat templates, the detokenizer and stop conditions,
penalties, top-k / top-p / min-p, seeded draws and logprobs, on the NumPy sampler and (needs_gpu) the CUDA one.
"""

from __future__ import annotations

from mutations.model import Mutation
from mutations.registry.gates import API, API_ORACLE, DETOK, FIL, FILC, GUAR, PEN

FAILURES = "tests/engine/test_failures.py"
CLI = "tests/vt/test_cli.py"
SEED = "tests/engine/test_seed_range.py"
SERVER = "tests/server/test_openai_server.py"
SPELL = "tests/engine/test_vllm_spellings.py"
PROGRESS = "tests/engine/test_offline_progress.py"
PARITY = "tests/engine/test_offline_vllm_parity.py"
BAD_WORDS = "tests/engine/test_bad_words.py"
OPTIONS = "tests/engine/test_offline_vllm_options.py"
# vt generate from its sampling params to its engine's load (the mutant below moves the params after it)
GENERATE_HEAD = (
    '    params = _sampling_params(args)  # a bad flag is named before anything loads: an 8B checkpoint loads for a minute\n'
    '    if args.max_model_len and args.max_model_len > 0 and args.max_tokens > args.max_model_len:  # a bad length is\n'
    "        # the engine config's to name, not max_tokens' fault\n"
    '        raise RequestError(f"--max-tokens {args.max_tokens}: more than --max-model-len {args.max_model_len} allows")\n'
    "    if not args.max_model_len:  # the checkpoint's limit, read before anything is built\n"
    '        from models.loader import load_checkpoint, resolve_model\n'
    '\n'
    '        limit = load_checkpoint(resolve_model(args.model)).config.max_position_embeddings\n'
    '        if args.max_tokens > limit:\n'
    '            raise RequestError(f"--max-tokens {args.max_tokens}: more than the model\'s max_position_embeddings "\n'
    '                               f"({limit}) allows")\n'
    '    llm = _loaded(lambda: LLM(args.model, **_engine_kwargs(args)), args.model)\n'
)

ENTRIES: list[Mutation] = [
    Mutation(
        id="offline-llm-steps-a-dead-engine-again",
        description="a fatal step error is raised typed, but the LLM is not marked dead: the failed requests stay "
                    "queued and the next call steps them again (here they spin unsampled: the call hangs)",
        file="vt/engine/front/llm.py", old="            self.dead = e\n", new="",
        gates=(f"{FAILURES}::test_a_fatal_step_error_leaves_the_offline_llm_dead_with_its_cause_never_stuck",),
        expect="it hangs",
    ),
    Mutation(
        id="prompt-dict-iterated-as-a-list",
        description="a single {'prompt': ...} dict is taken as a list of prompts: vt generates for the word 'prompt'",
        file="vt/engine/front/llm.py", old="    is_single = isinstance(prompts, (str, dict)) or",
        new="    prompts = list(prompts) if isinstance(prompts, dict) else prompts\n    is_single = isinstance(prompts, str) or",
        gates=(f"{API}::test_every_prompt_shape_vllm_accepts_generates_the_same",
               f"{API}::test_a_prompt_of_another_shape_is_a_typed_error_and_queues_nothing[both-keys]",
               f"{API}::test_a_prompt_of_another_shape_is_a_typed_error_and_queues_nothing[unknown-key]"),
    ),
    Mutation(
        id="chat-template-without-trim-blocks",
        description="chat templates render without trim_blocks: every block tag leaves its newline behind",
        file="vt/engine/front/chat.py", old="ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)",
        new="ImmutableSandboxedEnvironment(trim_blocks=False, lstrip_blocks=True)",
        gates=tuple(f"{API_ORACLE}::test_chat_renders_the_template_as_transformers_does[{g}-layered]" for g in ("True", "False")),
    ),
    Mutation(
        id="chat-template-without-lstrip-blocks",
        description="chat templates render without lstrip_blocks: indented block tags leave their indentation",
        file="vt/engine/front/chat.py", old="ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)",
        new="ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=False)",
        gates=tuple(f"{API_ORACLE}::test_chat_renders_the_template_as_transformers_does[{g}-layered]" for g in ("True", "False")),
    ),
    Mutation(
        id="detok-releases-partial-characters",
        description="an output cut inside a character ends in half of it (U+FFFD)",
        file="vt/engine/front/detokenizer.py",
        old="        return self.text + self._unreleased()[0].rstrip(REPLACEMENT)\n",
        new="        return self.text + self._unreleased()[0]\n",
        gates=tuple(f"{DETOK}::test_an_output_cut_inside_a_character_ends_before_it[{c}]" for c in ("euro", "emoji")),
    ),
    Mutation(
        id="detok-window-never-advances",
        description="the detokenizer never records how far its text reaches: the end repeats the released text",
        file="vt/engine/front/detokenizer.py", old="        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)",
        new="        self.prefix_offset = self.read_offset",
        gates=(f"{DETOK}::test_the_released_text_is_the_whole_decode_and_never_ends_in_a_partial_character",
               *(f"{DETOK}::test_an_output_cut_inside_a_character_ends_before_it[{c}]" for c in ("euro", "emoji"))),
    ),
    Mutation(
        id="stop-search-misses-straddlers",
        description="stop strings are searched in the new text only: one straddling two releases is missed",
        file="vt/engine/front/detokenizer.py", old="        start = max(0, len(self.text) - self.max_stop + 1)",
        new="        start = len(self.text)",
        gates=(f"{DETOK}::test_a_stop_string_is_found_wherever_it_falls_and_cut_before",
               f"{DETOK}::test_a_stop_string_of_multibyte_characters_splitting_across_tokens[e-acute-space-c]",
               f"{DETOK}::test_a_byte_fallback_output_that_unmakes_a_released_character_goes_on"),
    ),
    Mutation(
        id="stop-token-ids-ignored",
        description="stop_token_ids are accepted and never stop anything",
        file="vt/engine/front/llm_engine.py", old="        elif can_stop and token in p.stop_token_ids:", new="        elif False:",
        gates=(f"{API}::test_a_stop_token_id_finishes_with_its_id_as_the_stop_reason",
               f"{API}::test_min_tokens_holds_off_eos_and_stop_ids_then_lets_them_stop"),
    ),
    Mutation(
        id="sampling-params-refuse-numpy-numbers",
        description="SamplingParams(max_tokens=np.int64(5)) is refused as 'max_tokens=5: must be an int >= 1'",
        file="vt/engine/sample/params.py", old="            setattr(self, name, _plain(getattr(self, name)))\n",
        new="            pass\n",
        gates=(f"{API}::test_numpy_numbers_are_taken_as_pythons_own_in_sampling_params",),
        expect="NumPy numbers refused",
    ),
    Mutation(
        id="stop-token-text-kept",
        description="the EOS or stop token id that ends an output is detokenized: its text ends the output text "
                    "(vLLM leaves it out unless include_stop_str_in_output)",
        file="vt/engine/front/llm_engine.py",
        old="        stop = r.detok.add(token, can_stop) if not ends or p.include_stop_str_in_output else None\n",
        new="        stop = r.detok.add(token, can_stop)\n",
        gates=(f"{API}::test_the_stop_tokens_text_is_left_out_unless_include_stop_str_in_output[in-process]",),
    ),
    Mutation(
        id="front-detokenizes-the-stop-token",
        description="the engine process's front detokenizes the EOS or stop token id that ended an output: its text "
                    "ends the output text, unlike the in-process engine's",
        file="vt/engine/core/proc.py", old="                for t in ids[:-1] if ends else ids:\n",
        new="                for t in ids:\n",
        gates=(f"{API}::test_the_stop_tokens_text_is_left_out_unless_include_stop_str_in_output[engine-process]",),
    ),
    Mutation(
        id="include-stop-str-ignored",
        description="include_stop_str_in_output is accepted and the stop string is cut anyway",
        file="vt/engine/front/detokenizer.py", old="(len(s) if self.include_stop else 0)", new="0",
        gates=(f"{API}::test_include_stop_str_in_output_keeps_the_stop_string",),
    ),
    Mutation(
        id="repetition-penalty-multiplies-positive-logits",
        description="the repetition penalty multiplies every seen token's logit, raising positive ones",
        file="vt/engine/sample/sampler.py", old="        v = np.where(v > 0, v / F32(rep), v * F32(rep)).astype(F32)\n",
        new="        v = (v * F32(rep)).astype(F32)\n",
        gates=(f"{PEN}::test_repetition_penalty_matches_transformers[cpu]",
               f"{PEN}::test_a_strong_repetition_penalty_changes_greedy_output_in_the_engine"),
    ),
    Mutation(
        id="cuda-repetition-penalty-multiplies-positive-logits",
        description="the CUDA sampler's repetition penalty multiplies every seen token's logit",
        file="backends/kernels/sampler.cu", old="v = v > 0.0f ? __fdiv_rn(v, rep) : __fmul_rn(v, rep);",
        new="v = __fmul_rn(v, rep);", needs_gpu=True,
        gates=(f"{PEN}::test_repetition_penalty_matches_transformers[cuda]",
               f"{PEN}::test_repetition_penalty_matches_transformers[cuda-split]",
               f"{PEN}::test_a_strong_repetition_penalty_changes_greedy_output_in_the_engine"),
    ),
    Mutation(
        id="presence-penalty-per-occurrence",
        description="the presence penalty is charged per occurrence, like the frequency penalty",
        file="vt/engine/sample/sampler.py", old="(F32(freq) * counts[hit].astype(F32) + F32(pres))",
        new="(F32(freq) * counts[hit].astype(F32) + F32(pres) * counts[hit].astype(F32))",
        gates=tuple(f"{PEN}::test_presence_and_frequency_follow_openai_on_output_tokens_only[{c}-cpu]"
                    for c in ("0.8-0.0", "-0.4-1.3")),
    ),
    Mutation(
        id="frequency-penalty-counts-the-prompt",
        description="the frequency penalty counts prompt tokens too, not only the output's",
        file="vt/engine/sample/sampler.py", old="np.unique(hist[num_prompt:], return_counts=True)",
        new="np.unique(hist, return_counts=True)",
        gates=tuple(f"{PEN}::test_presence_and_frequency_follow_openai_on_output_tokens_only[{c}-cpu]"
                    for c in ("0.8-0.0", "0.0-0.5", "-0.4-1.3")),
    ),
    Mutation(
        id="cuda-frequency-penalty-counts-the-prompt",
        description="the CUDA sampler counts prompt tokens too for presence and frequency",
        file="backends/kernels/sampler.cu", old="for (int k = num_prompt; k < num_hist; k++) cnt += h[k] == t;",
        new="for (int k = 0; k < num_hist; k++) cnt += h[k] == t;", needs_gpu=True,
        gates=tuple(f"{PEN}::test_presence_and_frequency_follow_openai_on_output_tokens_only[{c}-{b}]"
                    for c in ("0.8-0.0", "0.0-0.5", "-0.4-1.3") for b in ("cuda", "cuda-split")),
    ),
    Mutation(
        id="penalties-never-applied",
        description="penalties are validated and carried, never staged for the sampler",
        file="vt/engine/worker/runner.py", old="        b.min_tokens[row], b.penalized[row] = p.min_tokens, spec.has_penalties\n",
        new="        b.min_tokens[row], b.penalized[row] = p.min_tokens, False\n",
        gates=(f"{PEN}::test_a_strong_repetition_penalty_changes_greedy_output_in_the_engine",),
    ),
    Mutation(
        id="top-k-off",
        description="top_k is accepted and never applied",
        file="vt/engine/sample/sampler.py",
        old="    found = candidate_support(k, top_k) if 0 < top_k < V and top_k <= KMAX else None\n    if found is not None:\n        idx = found\n    elif 0 < top_k < V:\n        idx = np.flatnonzero",
        new="    if False:\n        idx = np.flatnonzero",
        gates=(*(f"{FIL}::test_top_k_keeps_the_k_most_likely[{k}]" for k in (1, 3, 7)),
               f"{FIL}::test_top_p_applies_to_the_top_k_survivors",
               *FILC("test_draws_follow_the_renormalized_support_chi_square", "top_k-cpu", "all-cpu")),
    ),
    Mutation(
        id="cuda-top-k-off",
        description="the CUDA sampler never applies top_k",
        file="backends/kernels/sampler.cu", old="if (top_k > 0 && top_k < V) f.kmin", new="if (false) f.kmin", needs_gpu=True,
        gates=(*FILC("test_draws_follow_the_renormalized_support_chi_square", "top_k-cuda", "all-cuda"), f"{FIL}::test_the_cuda_sampler_draws_what_the_numpy_reference_draws_at_a_real_vocabulary"),
    ),
    Mutation(
        id="top-p-off",
        description="top_p is accepted and never applied",
        file="vt/engine/sample/sampler.py", old="    if top_p < 1.0:\n        # exact", new="    if False:\n        # exact",
        gates=(*(f"{FIL}::test_top_p_keeps_the_smallest_set_reaching_p[{p}]" for p in (0.3, 0.5, 0.6, 0.9)),
               f"{FIL}::test_top_p_applies_to_the_top_k_survivors",
               *FILC("test_draws_follow_the_renormalized_support_chi_square", "top_p-cpu", "all-cpu"),
               *FILC("test_a_top_p_too_small_for_one_unit_of_mass_keeps_the_top_token", "cpu")),
    ),
    Mutation(
        id="cuda-top-p-off",
        description="the CUDA sampler never applies top_p",
        file="backends/kernels/sampler.cu", old="    if (top_p < 1.0f) {", new="    if (false) {", needs_gpu=True,
        gates=(*FILC("test_draws_follow_the_renormalized_support_chi_square", "top_p-cuda", "all-cuda"), f"{FIL}::test_the_cuda_sampler_draws_what_the_numpy_reference_draws_at_a_real_vocabulary",
               f"{FIL}::test_a_top_p_too_small_for_one_unit_of_mass_keeps_the_top_token[cuda]"),
    ),
    Mutation(
        id="top-p-one-short",
        description="top_p keeps the largest set below p instead of the smallest set reaching it",
        file="vt/engine/sample/sampler.py", old="        w *= k[idx] >= cut\n", new="        w *= k[idx] > cut\n",
        gates=(*(f"{FIL}::test_top_p_keeps_the_smallest_set_reaching_p[{p}]" for p in (0.3, 0.5, 0.6, 0.9)),
               f"{FIL}::test_top_p_applies_to_the_top_k_survivors",
               *FILC("test_draws_follow_the_renormalized_support_chi_square", "top_p-cpu", "all-cpu"),
               *FILC("test_a_top_p_too_small_for_one_unit_of_mass_keeps_the_top_token", "cpu")),
    ),
    Mutation(
        id="min-p-off",
        description="min_p is accepted and never applied",
        file="vt/engine/sample/sampler.py", old="    if min_p > 0.0:\n        w *= e", new="    if False:\n        w *= e",
        gates=(*(f"{FIL}::test_min_p_keeps_tokens_at_least_min_p_times_the_top[{m}]" for m in (0.3, 0.6)),
               *FILC("test_draws_follow_the_renormalized_support_chi_square", "min_p-cpu")),
    ),
    Mutation(
        id="cuda-min-p-off",
        description="the CUDA sampler never applies min_p",
        file="backends/kernels/sampler.cu", old="f.weighted = 1; f.min_p = min_p;", new="f.weighted = 1; f.min_p = 0.0f;",
        needs_gpu=True, gates=(*FILC("test_draws_follow_the_renormalized_support_chi_square", "min_p-cuda"), f"{FIL}::test_the_cuda_sampler_draws_what_the_numpy_reference_draws_at_a_real_vocabulary"),
    ),
    Mutation(
        id="seed-counter-ignored",
        description="draws depend on the seed only, not on the output position: every position draws the same uniform",
        file="vt/engine/sample/sampler.py", old="GOLDEN * (counter.astype(np.uint64) + np.uint64(1))", new="GOLDEN",
        # two of the five filter settings: a fixed uniform breaks every one alike (CI time: each gate ~3 s mutated)
        gates=(*FILC("test_draws_follow_the_renormalized_support_chi_square", *(f"{k}-cpu" for k in ("plain", "all"))),
               # (not the temperature test since Gumbel-max: one key for every draw takes the top token at 0.25 and
               # another at 1.0, which that test's own assertion allows)
               *FILC("test_banned_tokens_are_never_drawn_and_non_finite_rows_fail_alone", "cpu"),
               *FILC("test_a_top_p_too_small_for_one_unit_of_mass_keeps_the_top_token", "cpu")),
    ),
    Mutation(
        id="cuda-seed-counter-ignored",
        description="the CUDA sampler's draws depend on the seed only, not on the output position",
        file="backends/kernels/sampler.cu", old="mix64(seed + 0x9E3779B97F4A7C15ull * (counter + 1ull))",
        new="mix64(seed + 0x9E3779B97F4A7C15ull)", needs_gpu=True,
        # both CUDA samplers draw from one key (the split one's [cuda-split] cases failed beside them on the H200)
        gates=(*FILC("test_draws_follow_the_renormalized_support_chi_square",
                     *(f"{k}-{b}" for k in ("plain", "top_k", "top_p", "min_p", "all") for b in ("cuda", "cuda-split"))),
               *FILC("test_banned_tokens_are_never_drawn_and_non_finite_rows_fail_alone", "cuda", "cuda-split"),
               *FILC("test_a_top_p_too_small_for_one_unit_of_mass_keeps_the_top_token", "cuda", "cuda-split"),
               f"{FIL}::test_the_cuda_sampler_draws_what_the_numpy_reference_draws_at_a_real_vocabulary"),
    ),
    Mutation(
        id="logprobs-from-the-penalized-row",
        description="logprobs are taken from a rescaled row instead of the model's logits",
        file="vt/engine/sample/sampler.py", old="    x = row.astype(np.float64)\n", new="    x = row.astype(np.float64) / 2\n",
        gates=(*(f"{API_ORACLE}::test_logprobs_are_the_models_log_softmax_as_transformers_computes_it[{s}]"
                 for s in ("plain", "ngram")),
               f"{API_ORACLE}::test_prompt_logprobs_score_each_prompt_token_as_transformers_does"),
    ),
    Mutation(
        id="logprobs-of-an-accepted-run-misaligned",
        description="after a verify, every accepted token gets the first position's logprobs",
        file="vt/engine/worker/runner.py", old="[i * q + j for j in range(len(toks))]", new="[i * q for _ in range(len(toks))]",
        gates=(f"{API_ORACLE}::test_logprobs_are_the_models_log_softmax_as_transformers_computes_it[ngram]",),
    ),
    Mutation(
        id="stop-reason-unset",
        description="a request stopped by a stop string does not say which",
        file="vt/engine/front/llm_engine.py", old="            r.stop_reason = stop\n", new="",
        gates=(f"{API}::test_a_stop_string_names_itself_as_the_stop_reason",
               f"{API}::test_include_stop_str_in_output_keeps_the_stop_string"),
    ),
    Mutation(
        id="sampler-drops-a-blocks-partial-histogram",
        description="the radix selection merges the blocks' partial histograms without the first block's: top-k and "
                    "top-p thresholds miss the tokens that block counted",
        file="vt/engine/sample/sampler.py", old="    return parts.sum(axis=0)\n", new="    return parts[1:].sum(axis=0)\n",
        gates=tuple(f"tests/engine/test_radix_select.py::test_thresholds_merge_every_blocks_partial_histogram[{c}]"
                    for c in ("120-1.0", "400-1.0", "0-0.5", "0-0.9", "300-0.8")),
    ),
    Mutation(
        id="cuda-split-drops-a-blocks-partial-histogram",
        description="the split CUDA sampler's last block merges the partial histograms of every block but the first",
        file="backends/kernels/sampler.cu",
        old="        for (int g = 0; g < G; g++) h += parts[((long long)r * G + g) * 256 + b];  // block order",
        new="        for (int g = 1; g < G; g++) h += parts[((long long)r * G + g) * 256 + b];  // block order",
        needs_gpu=True,
        gates=("tests/engine/test_split_sampler.py::test_the_split_sampler_draws_what_the_numpy_reference_draws",),
    ),
    Mutation(
        id="greedy-below-epsilon-ignored",
        description="a temperature below vLLM's 1e-5 samples instead of taking the argmax: logits divided by 1e-39 "
                    "overflow, their masses are NaN, and the draw fails inside the engine",
        file="vt/engine/sample/params.py",
        old="        if float(picked[\"temperature\"]) < GREEDY_BELOW:  # vLLM's rule: greedy, the filters off\n",
        new="        if float(picked[\"temperature\"]) == 0.0:\n",
        gates=tuple(f"{API}::test_a_temperature_below_vllms_epsilon_samples_greedily[{t}]" for t in ("1e-39", "1e-44")),
    ),
    Mutation(
        id="logit-bias-range-unchecked",
        description="SamplingParams takes any finite logit_bias: 1e39 is infinite in float32, the biased logit's mass "
                    "NaN, and the draw fails the engine",
        file="vt/engine/sample/params.py",
        old="                or not isinstance(v, (int, float)) or not -MAX_BIAS <= v <= MAX_BIAS for t, v in lb.items())):",
        new="                or not isinstance(v, (int, float)) or v != v for t, v in lb.items())):",
        gates=tuple(f"tests/engine/test_logit_bias.py::test_bad_bias_parameters_are_refused_by_name[{c}]"
                    for c in ("past-float32", "past-openai-range")),
    ),
    Mutation(
        id="sampler-candidates-drop-ties-at-the-bound",
        description="the candidate twin keeps a block's tokens above its bound, not at it: where the bound is the row's "
                    "k-th key, the tokens that tie it leave the support",
        file="vt/engine/sample/sampler.py",
        old="    keep = (blocks != 0) & ((blocks >> np.uint64(32)) >= bounds[:, None])\n",
        new="    keep = (blocks != 0) & ((blocks >> np.uint64(32)) > bounds[:, None])\n",
        gates=("tests/engine/test_candidate_topk.py::test_ties_at_a_blocks_bound_are_all_kept[20-in-20-threads]",
               "tests/engine/test_candidate_topk.py::test_the_candidates_are_the_whole_top_k_support_or_the_row_defers",
               "tests/engine/test_candidate_topk.py::test_a_row_of_equal_logits_takes_the_one_block_draw"),
    ),
    Mutation(
        id="chunk-span-ignores-the-quads",
        description="the twin's chunks are the even share of the row, not whole quads: a chunk the CUDA passes load "
                    "with float4 may start between two of them",
        file="vt/engine/sample/sampler.py", old="    return -(-per // QUAD) * QUAD\n", new="    return per\n",
        gates=tuple(f"tests/engine/test_candidate_topk.py::"
                    f"test_every_chunk_starts_on_a_whole_quad_and_the_chunks_cover_the_row[{b}]" for b in (2, 16, 64)),
    ),
    Mutation(
        id="cuda-candidates-drop-ties-at-the-bound",
        description="the candidate kernel keeps a block's tokens above its bound, not at it: tokens tied at the row's "
                    "k-th key are never drawn",
        file="backends/kernels/sampler.cu", old="            if (k >= bound) {", new="            if (k > bound) {",
        needs_gpu=True,
        gates=("tests/engine/test_split_sampler.py::test_the_candidate_sampler_draws_what_the_reference_draws_at_ties",
               "tests/engine/test_split_sampler.py::test_the_split_sampler_draws_what_the_numpy_reference_draws"),
        expect="rows that differ",
    ),
    Mutation(
        id="cuda-general-passes-skipped-after-a-graph",
        description="the graph driver never runs the split sampler's general passes after a replay: rows with top-p "
                    "alone or top-k above KMAX stay undrawn",
        file="vt/engine/worker/graph_driver.py", old="        if slot.general:\n", new="        if False:\n",
        needs_gpu=True,
        gates=("tests/engine/test_split_sampler.py::test_a_decode_graph_with_rows_only_the_general_passes_draw",),
        expect="never drawn",
    ),
    Mutation(
        id="llm-chat-refuses-a-tool-calling-conversation",
        description="LLM.chat reads messages as the server does, tools refused: a tool-calling conversation that "
                    "vLLM's LLM.chat renders (name, tool_calls, tool_call_id) is a RequestError",
        file="vt/engine/front/llm.py", old="parse_messages(c, TOOL_FIELDS)", new="parse_messages(c)",
        gates=("tests/engine/test_chat_messages.py::test_chat_hands_a_tool_calling_conversations_fields_to_the_template",),
    ),
    Mutation(
        id="chat-tool-fields-never-reach-the-template",
        description="the tool-calling fields LLM.chat takes are dropped before the template: accepted, then lost",
        file="vt/engine/front/chat.py", old="    out.update((k, m[k]) for k in sorted(passed & set(m)))\n", new="",
        gates=("tests/engine/test_chat_messages.py::test_chat_hands_a_tool_calling_conversations_fields_to_the_template",),
    ),
    Mutation(
        id="generate-checks-sampling-flags-after-the-load",
        description="vt generate builds the engine (the checkpoint, the KV cache) before it checks the sampling "
                    "flags: a typo is refused, but only after the load it needed none of",
        file="vt/cli.py",
        old=GENERATE_HEAD,
        new=GENERATE_HEAD.split("\n", 1)[1] + GENERATE_HEAD.split("\n", 1)[0] + "\n",
        gates=tuple(f"{CLI}::test_a_bad_sampling_flag_is_refused_before_the_model_loads[{c}]"
                    for c in ("--temperature--1-temperature=-1.0", "--n-0-n=0")),
    ),
    Mutation(
        id="seed-range-non-negative-only",
        description="a seed is refused below 0, as before: vLLM's protocol takes any int64 (torch.long), so seed=-1 "
                    "is a 400 from the API and exit 2 from vt generate",
        file="vt/engine/sample/params.py", old="SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1\n",
        new="SEED_MIN, SEED_MAX = 0, 2**63 - 1\n",
        gates=(f"{SEED}::test_every_int64_seed_is_a_sampling_seed[-1]",
               f"{CLI}::test_a_negative_seed_generates_the_same_text_twice",
               f"{SERVER}::test_a_seed_is_any_int64_reproducibly_and_nothing_past_it"),
    ),
    Mutation(
        id="sample-seed-folds-into-63-bits",
        description="sample k's seed is (seed + k) mod 2**63: seed -1 folds onto 2**63-1 and draws its tokens, and "
                    "2**63-1's second sample folds onto seed 0",
        file="vt/engine/front/llm_engine.py", old="seed=wrap_seed(seed + k),", new="seed=(seed + k) % (1 << 63),",
        gates=(f"{SEED}::test_a_negative_seed_draws_the_same_tokens_twice_and_apart_from_other_seeds",
               f"{SEED}::test_the_samples_of_the_largest_seed_wrap_within_int64"),
    ),
    Mutation(
        id="dtype-half-not-mapped",
        description="vLLM's dtype spellings half / float are refused (a ConfigError) where vLLM takes them",
        file="vt/engine/config.py", old="            self.dtype = DTYPE_ALIASES.get(self.dtype, self.dtype)\n",
        new="            pass\n",
        gates=tuple(f"{SPELL}::test_vllms_dtype_spellings_run_as_the_dtype_they_name[{c}]" for c in ("half-float16",
                                                                                                   "float-float32")),
    ),
    Mutation(
        id="dtype-torch-dtype-not-taken",
        description="a torch.dtype (vLLM's LLM(dtype=torch.float16)) is refused as a dtype vt does not know",
        file="vt/engine/config.py",
        old='            self.dtype = str(self.dtype).removeprefix("torch.")  # vLLM\'s',
        new='            pass  # vLLM\'s',
        gates=tuple(f"{SPELL}::test_vllms_dtype_spellings_run_as_the_dtype_they_name[{c}]" for c in (
            "torch.float16-float16", "torch.float32-float32")),
        expect="is vLLM's spelling of",
    ),
    Mutation(
        id="trust-remote-code-taken-in-silence",
        description="trust_remote_code=True is taken and nothing says it changes nothing: a user believes remote "
                    "code ran",
        file="vt/engine/config.py", old="        if self.trust_remote_code:\n", new="        if False:\n",
        gates=(f"{SPELL}::test_trust_remote_code_is_taken_and_said_to_change_nothing",),
    ),
    Mutation(
        id="llm-unknown-option-raw-typeerror",
        description="an engine option vt lacks reaches the EngineConfig dataclass, which raises a raw TypeError",
        file="vt/engine/front/llm.py", old="        if unknown:  # named as every bad option is, not a TypeError from "
                                           "the dataclass\n",
        new="        if False:\n",
        gates=(f"{SPELL}::test_an_option_vt_lacks_or_a_bad_value_is_one_config_error[kw1-no_such_option=1]",),
    ),
    Mutation(
        id="offline-unset-max-tokens-is-16",
        description="SamplingParams(max_tokens=None) reaches the engine as given: 16 tokens (the server's rule), not "
                    "vLLM v1's max_model_len - prompt_len",
        file="vt/engine/front/llm.py",
        old="        if sp.truncate_prompt_tokens is None and sp.max_tokens is not None:\n",
        new="        if sp.truncate_prompt_tokens is None:\n",
        gates=(f"{PARITY}::test_unset_max_tokens_runs_to_the_end_of_the_context",),
    ),
    Mutation(
        id="offline-given-params-take-checkpoint-defaults",
        description="given SamplingParams keep their None fields: the engine fills them from generation_config "
                    "(temperature 0 greedy), which vLLM's LLM does only when sampling_params is None",
        file="vt/engine/front/llm.py",
        old="        sp = self.get_default_sampling_params() if sp is None else _unset_is_neutral(sp)\n",
        new="        sp = self.get_default_sampling_params() if sp is None else sp\n",
        gates=(f"{PARITY}::test_given_sampling_params_ignore_the_checkpoints_defaults",),
    ),
    Mutation(
        id="offline-default-params-read-zero-as-unset",
        description="get_default_sampling_params reads a generation_config temperature of 0 as unset: samples at 1.0",
        file="vt/engine/front/llm.py",
        old="{k: gen[k] if gen.get(k) is not None else v for k, v in NEUTRAL.items()}",
        new="{k: gen.get(k) or v for k, v in NEUTRAL.items()}",
        gates=(f"{GUAR}::test_a_checkpoint_temperature_of_zero_is_greedy",),
    ),
    Mutation(
        id="skip-special-tokens-ignored",
        description="the detokenizer always skips special tokens: skip_special_tokens=False loses their text",
        file="vt/engine/front/detokenizer.py",
        old="        self.skip_special_tokens = skip_special_tokens  #", new="        self.skip_special_tokens = True  #",
        gates=(f"{PARITY}::test_skip_special_tokens_false_keeps_their_text",),
    ),
    Mutation(
        id="truncate-prompt-keeps-the-first-tokens",
        description="truncate_prompt_tokens keeps the prompt's first N tokens, not vLLM's last N",
        file="vt/engine/front/llm.py", old="    return ids[-keep:]\n", new="    return ids[:keep]\n",
        gates=(f"{PARITY}::test_truncate_prompt_tokens_keeps_the_last_tokens",),
    ),
    Mutation(
        id="sampling-params-clone-shallow",
        description="SamplingParams.clone() is a shallow copy: the clone's stop list is the original's",
        file="vt/engine/sample/params.py", old="        return copy.deepcopy(self)\n", new="        return copy.copy(self)\n",
        gates=(f"{PARITY}::test_clone_is_a_deep_copy",),
    ),
    Mutation(
        id="sampling-params-unknown-field-raw-typeerror",
        description="a keyword SamplingParams lacks reaches the dataclass's __init__: a raw TypeError",
        file="vt/engine/sample/params.py",
        old="SamplingParams.__init__ = _init_naming_unknown_fields  # type: ignore[method-assign]\n", new="",
        gates=(f"{PARITY}::test_a_field_vt_lacks_or_a_bad_value_is_one_config_error[unknown]",),
    ),
    Mutation(
        id="generate-lora-request-ignored",
        description="LLM.generate takes a LoRA adapter and runs without it, in silence",
        file="vt/engine/front/llm.py", old="    if lora_request is not None:\n", new="    if False:\n",
        gates=(f"{OPTIONS}::test_generate_refuses_what_it_cannot_do_by_name_and_queues_nothing[lora]",
               f"{OPTIONS}::test_chat_refuses_what_it_cannot_do_by_name[lora]"),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="generate-priority-ignored",
        description="LLM.generate takes non-zero priorities and schedules first come, first served, in silence",
        file="vt/engine/front/llm.py",
        old="    if any(priority):  # vLLM's first-come-first-served scheduler refuses these too\n",
        new="    if False:\n",
        gates=(f"{OPTIONS}::test_generate_refuses_what_it_cannot_do_by_name_and_queues_nothing[priority]",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="chat-tools-not-handed-to-the-template",
        description="LLM.chat takes tools but renders the conversation without them",
        file="vt/engine/front/llm.py",
        old="            template_kwargs = {**(chat_template_kwargs or {}), \"tools\": tools}\n",
        new="            template_kwargs = chat_template_kwargs\n",
        gates=(f"{OPTIONS}::test_chat_hands_its_tools_to_the_template",),
        expect="[tool get_weather]",
    ),
    Mutation(
        id="chat-mm-processor-kwargs-ignored",
        description="LLM.chat takes multimodal processor kwargs and ignores them, in silence",
        file="vt/engine/front/llm.py", old="        if mm_processor_kwargs:\n", new="        if False:\n",
        gates=(f"{OPTIONS}::test_chat_refuses_what_it_cannot_do_by_name[multimodal]",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="chat-openai-content-format-taken",
        description="LLM.chat takes chat_template_content_format='openai' and still hands the template strings",
        file="vt/engine/front/llm.py", old="        if chat_template_content_format not in (\"auto\", \"string\"):\n",
        new="        if chat_template_content_format not in (\"auto\", \"string\", \"openai\"):\n",
        gates=(f"{OPTIONS}::test_chat_refuses_what_it_cannot_do_by_name[content-format]",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="bad-words-blank-word-taken",
        description="a blank bad word is taken (it tokenizes to nothing, and bans nothing) instead of refused",
        file="vt/engine/sample/params.py",
        old="        if bw is not None and (not isinstance(bw, list) or not all(isinstance(w, str) and w.strip() for w in bw)):\n",
        new="        if bw is not None and (not isinstance(bw, list) or not all(isinstance(w, str) for w in bw)):\n",
        gates=(f"{PARITY}::test_a_field_vt_lacks_or_a_bad_value_is_one_config_error[bad-words]",
               f"{BAD_WORDS}::test_a_bad_words_value_that_is_not_a_list_of_words_is_refused_by_name"),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="bad-words-one-token-word-not-banned",
        description="a bad word of one token is tokenized but never banned: it is still generated",
        file="vt/engine/sample/params.py", old="                biased[word[0]] = -math.inf\n",
        new="                pass\n",
        gates=(f"{BAD_WORDS}::test_a_one_token_word_is_never_generated[cpu]",),
        expect="was generated",
    ),
    Mutation(
        id="bad-words-sequence-ban-ignores-the-prefix",
        description="a longer bad word's last token is banned at every step, not only after the rest of the word",
        file="vt/engine/sample/params.py",
        old="                if len(w) - 1 <= len(out) and out[len(out) - len(w) + 1 :] == list(w[:-1])]\n",
        new="                if True]\n",
        gates=(f"{BAD_WORDS}::test_a_longer_words_last_token_is_banned_only_after_the_rest_of_it[cpu]",),
        expect="b alone is not banned",
    ),
    Mutation(
        id="bad-words-sequence-ban-never-applied",
        description="the runner never builds a step's sequence bans: a longer bad word is still generated",
        file="vt/engine/worker/runner.py",
        old="        for i in np.flatnonzero(banning):\n",
        new="        for i in np.flatnonzero(banning & False):\n",
        gates=(f"{BAD_WORDS}::test_a_longer_words_last_token_is_banned_only_after_the_rest_of_it[cpu]",),
        expect="was generated",
    ),
    Mutation(
        id="bad-words-sequence-ban-steps-overlapped",
        description="a request with a multi-token bad word lets the engine overlap steps: its row is built before "
                    "the host holds its last token",
        file="vt/engine/front/llm_engine.py",
        old="        return not any(r.params.reads_its_output for r in self.scheduler.running)\n",
        new="        return not any(r.params.has_penalties for r in self.scheduler.running)\n",
        gates=(f"{BAD_WORDS}::test_the_multi_token_ban_steps_without_overlap_and_matches_the_synchronous_engine",),
        expect="bad_words run without a fault",
    ),
    Mutation(
        id="bad-words-spaced-variant-dropped",
        description="a bad word is banned only as it starts a text, not as vLLM also bans it after a space",
        file="vt/engine/front/llm_engine.py",
        old="        if spaced and len(spaced) == len(plain) and spaced[0] != plain[0]:\n",
        new="        if False:\n",
        gates=(f"{BAD_WORDS}::test_words_tokenize_as_vllms_do_with_and_without_a_leading_space",),
    ),
    Mutation(
        id="bad-words-multi-token-taken-under-speculation",
        description="a multi-token bad word is taken under speculative decoding (its ban would be built over "
                    "proposed tokens the host does not hold)",
        file="vt/engine/front/llm_engine.py",
        old="        if resolved.sequence_bans and self.scheduler.num_spec_tokens:\n",
        new="        if False:\n",
        gates=(f"{BAD_WORDS}::test_a_multi_token_word_is_refused_under_speculative_decoding",),
    ),
    Mutation(
        id="bad-words-banning-every-allowed-token-taken",
        description="bad words that ban every allowed token are taken: greedy draws a token outside the allowed ones",
        file="vt/engine/front/llm_engine.py",
        old="        if allowed is not None and set(allowed) <= {w[0] for w in seqs if len(w) == 1}:\n",
        new="        if False:\n",
        gates=(f"{BAD_WORDS}::test_bad_words_that_ban_every_allowed_token_are_refused_by_name",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="bad-words-lone-surrogate-taken",
        description="a bad word holding a lone surrogate is taken: the tokenizer's raw TypeError follows",
        file="vt/engine/sample/params.py", old="                word.encode(\"utf-8\")\n", new="                pass\n",
        gates=(f"{BAD_WORDS}::test_a_bad_word_that_is_not_utf8_text_is_refused_by_name",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="engine-bad-words-refusal-named-as-the-prompt",
        description="the server maps the engine's bad_words refusals to param prompt",
        file="vt/server/app.py",
        old="                  \"presence_penalty\", \"frequency_penalty\", \"bad_words\", \"cache_salt\", "
            "\"structured_outputs\")\n",
        new="                  \"presence_penalty\", \"frequency_penalty\", \"cache_salt\", \"structured_outputs\")\n",
        gates=("tests/server/test_bad_words_server.py::test_an_engine_refusal_of_bad_words_names_the_field",),
    ),
    Mutation(
        id="bad-words-outside-the-vocabulary-taken",
        description="a bad word's token ids outside the vocabulary are taken: the sampler would index past its row",
        file="vt/engine/front/llm_engine.py", old="        if outside:\n", new="        if False:\n",
        gates=(f"{BAD_WORDS}::test_bad_words_outside_the_vocabulary_or_past_a_rows_bias_slots_are_refused_by_name",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="bad-words-past-the-rows-bias-slots-taken",
        description="bans and biases past a row's bias slots are taken: the graph's staging fails the step",
        file="vt/engine/front/llm_engine.py", old="        if width > MAX_BIASED:\n", new="        if False:\n",
        gates=(f"{BAD_WORDS}::test_bad_words_outside_the_vocabulary_or_past_a_rows_bias_slots_are_refused_by_name",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="generate-priority-of-another-length-taken",
        description="LLM.generate takes a priority list shorter than its prompts",
        file="vt/engine/front/llm.py",
        old="    if not isinstance(priority, (list, tuple)) or len(priority) != num_prompts or not all(\n",
        new="    if not isinstance(priority, (list, tuple)) or not all(\n",
        gates=(f"{OPTIONS}::test_generate_refuses_what_it_cannot_do_by_name_and_queues_nothing[priority-length]",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="chat-tools-given-twice-taken",
        description="LLM.chat takes tools both as tools and in chat_template_kwargs, one silently over the other",
        file="vt/engine/front/llm.py",
        old="            if isinstance(chat_template_kwargs, dict) and \"tools\" in chat_template_kwargs:\n",
        new="            if False:\n",
        gates=(f"{OPTIONS}::test_chat_hands_its_tools_to_the_template",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="engine-cache-salt-refusal-named-as-the-prompt",
        description="the server maps the engine's cache_salt refusal to param prompt",
        file="vt/server/app.py",
        old="                  \"presence_penalty\", \"frequency_penalty\", \"bad_words\", \"cache_salt\", "
            "\"structured_outputs\")\n",
        new="                  \"presence_penalty\", \"frequency_penalty\", \"bad_words\", \"structured_outputs\")\n",
        gates=("tests/server/test_cache_salt_server.py::test_a_salt_that_is_not_a_non_empty_string_is_a_400_naming_the_field",),
    ),
    Mutation(
        id="bad-words-dropped-by-the-server",
        description="the API server takes bad_words as a known field but never reads it: the words are generated",
        file="vt/server/protocol.py",
        old="                         (\"skip_special_tokens\", (bool,)), (\"bad_words\", (list,))):\n",
        new="                         (\"skip_special_tokens\", (bool,)), (\"bad_words_unread\", (list,))):\n",
        gates=("tests/server/test_bad_words_server.py::"
               "test_the_server_bans_the_words_the_offline_api_bans_and_refuses_a_bad_value",),
        expect="completions: the offline API's tokens under the same ban",
    ),
    Mutation(
        id="prompt-multimodal-data-ignored",
        description="a prompt's multi_modal_data is dropped in silence: an image prompt runs as its text alone",
        file="vt/engine/front/llm.py", old="        _check_optional_keys(p)\n", new="",
        gates=(f"{PARITY}::test_vllms_optional_prompt_keys_are_taken_when_they_ask_for_nothing",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="prompt-optional-keys-refused",
        description="vLLM's optional prompt keys are refused even empty: 'expected exactly one of'",
        file="vt/engine/front/llm.py", old="set(p) - set(PROMPT_KEYS) - set(OPTIONAL_KEYS)", new="set(p) - set(PROMPT_KEYS)",
        gates=(f"{PARITY}::test_vllms_optional_prompt_keys_are_taken_when_they_ask_for_nothing",),
    ),
    Mutation(
        id="engine-seed-none-refused",
        description="EngineConfig(seed=None), vLLM's, is refused: LLM(model, seed=None) raises",
        file="vt/engine/config.py", old=' "block_size", "seed")', new=' "block_size")',
        gates=(f"{PARITY}::test_seed_none_is_vllms_default_seed",),
    ),
    Mutation(
        id="cli-generate-unset-flags-neutral",
        description="vt generate's sampling flags left unset are neutral (temperature 1, no top-k / top-p), not the "
                    "checkpoint's generation_config defaults its --help promises",
        file="vt/cli.py", old="    out = llm.generate([args.prompt], _unset_from_the_checkpoint(params, llm), use_tqdm=False)[0]",
        new="    out = llm.generate([args.prompt], params, use_tqdm=False)[0]",
        gates=("tests/vt/test_cli.py::test_generate_takes_the_checkpoints_defaults_for_the_sampling_flags_left_unset",),
    ),
    Mutation(
        id="generate-draws-no-bar-by-default",
        description="LLM.generate draws no progress bar unless asked (vLLM's use_tqdm defaults to True)",
        file="vt/engine/front/llm.py",
        old="                 use_tqdm: bool = True, lora_request: Any = None, priority: list[int] | None = None\n",
        new="                 use_tqdm: bool = False, lora_request: Any = None, priority: list[int] | None = None\n",
        gates=(f"{PROGRESS}::test_generate_and_chat_draw_a_bar_on_a_terminal_by_default",),
        expect="no progress bar on the terminal by default",
    ),
    Mutation(
        id="chat-draws-no-bar-by-default",
        description="LLM.chat draws no progress bar unless asked (vLLM's use_tqdm defaults to True)",
        file="vt/engine/front/llm.py", old="             use_tqdm: bool = True, add_generation_prompt: bool = True,",
        new="             use_tqdm: bool = False, add_generation_prompt: bool = True,",
        gates=(f"{PROGRESS}::test_generate_and_chat_draw_a_bar_on_a_terminal_by_default",),
        expect="chat drew no progress bar",
    ),
    Mutation(
        id="progress-bar-drawn-on-stdout",
        description="the progress bar is drawn on stdout (rich's default), not on the stderr whose terminal it checked",
        file="vt/engine/front/llm.py", old="Progress(console=Console(stderr=True), transient=True)",
        new="Progress(transient=True)",
        gates=(f"{PROGRESS}::test_generate_and_chat_draw_a_bar_on_a_terminal_by_default",),
    ),
]

SO = "tests/engine/test_structured_outputs.py"
SO_SERVER = "tests/server/test_structured_outputs_server.py"
SO_REGEX = f"{SO}::test_a_regex_holds_every_output_to_it"
ENTRIES += [
    Mutation(
        id="structured-mask-skipped-in-the-decode-graph",
        description="a masked decode slot's graph never launches the grammar's mask: after the first token, the "
                    "output leaves its language",
        file="vt/engine/worker/graph_driver.py",
        old="            self.backend.mask_tokens(slot.logits, slot.token_mask)\n", new="            pass\n",
        gates=(SO_REGEX, f"{SO}::test_a_json_schema_holds_every_output_to_it[1.0]"),
    ),
    Mutation(
        id="structured-mask-skipped-at-the-prefill",
        description="the prefill's sampler never masks: a constrained output's first token is free",
        file="vt/engine/worker/runner.py",
        old="            b.mask_tokens(logits, mask)\n", new="            pass\n",
        gates=(SO_REGEX,),
    ),
    Mutation(
        id="structured-matcher-never-fed-the-output",
        description="a resumed request's new matcher never consumes the output so far: after a preemption its masks "
                    "start the grammar again, mid-output",
        file="vt/engine/sample/structured.py",
        old="        if new and not self.matcher.consume_tokens(new):\n", new="        if False:\n",
        gates=(f"{SO}::test_a_preempted_request_resumes_where_its_grammar_was",),
    ),
    Mutation(
        id="structured-mask-twin-clears-the-allowed-tokens",
        description="the mask's twin sets the tokens the grammar allows to -1e30 and keeps the others",
        file="backends/kernels/tokens.py",
        old="    logits[~token_bits(mask, logits.shape[1])] = MASKED_LOGIT",
        new="    logits[token_bits(mask, logits.shape[1])] = MASKED_LOGIT",
        gates=(f"{SO}::test_the_mask_twin_sets_exactly_the_cleared_tokens",),
    ),
    Mutation(
        id="structured-slot-key-ignores-the-mask",
        description="the graph driver keys a step with token masks as one without: its graph masks nothing",
        file="vt/engine/worker/graph_driver.py",
        old="        masked = inp.sampling is not None and inp.sampling.token_mask is not None\n",
        new="        masked = False\n",
        gates=(SO_REGEX, f"{SO}::test_masked_decode_steps_replay_a_graph_of_their_own"),
    ),
    Mutation(
        id="structured-request-steps-overlapped",
        description="a constrained request lets the engine overlap its steps: its mask is built before the host "
                    "holds the token sampled just before",
        file="vt/engine/sample/params.py",
        old="        return self.has_penalties or bool(self.sequence_bans) or self.grammar is not None",
        new="        return self.has_penalties or bool(self.sequence_bans)",
        gates=(f"{SO}::test_a_constrained_request_steps_without_overlap",),
    ),
    Mutation(
        id="structured-refusal-under-speculation-dropped",
        description="a structured output is taken under speculative decoding, whose proposals the grammar never saw",
        file="vt/engine/front/llm_engine.py",
        old="        if self.scheduler.num_spec_tokens:\n            raise RequestError(f\"structured_outputs.{so.kind}: "
            "not supported with speculative decoding\")\n",
        new="",
        gates=(f"{SO}::test_speculative_decoding_refuses_a_structured_output_by_name",),
    ),
    Mutation(
        id="server-json-schema-response-format-ignored",
        description="the API server reads OpenAI's response_format json_schema as free text",
        file="vt/server/protocol.py",
        old="        return StructuredOutputsParams(json=schema)\n", new="        return None\n",
        gates=(f"{SO_SERVER}::test_response_format_and_structured_outputs_generate_what_the_offline_api_does",),
    ),
    Mutation(
        id="engine-wire-drops-structured-outputs",
        description="the engine process's wire drops a request's structured output: `vt serve` generates free text",
        file="vt/engine/core/proc.py",
        old='        d["structured_outputs"] = StructuredOutputsParams(**d["structured_outputs"])\n',
        new='        d["structured_outputs"] = None\n',
        gates=(f"{SO_SERVER}::test_vt_serves_engine_process_takes_the_structured_output_over_its_wire",),
    ),
]
ENTRIES += [
    Mutation(
        id="structured-refusal-under-tensor-parallelism-dropped",
        description="a structured output is taken with several ranks, whose runners but rank 0's hold no grammar",
        file="vt/engine/front/llm_engine.py",
        old="        if self.cfg.tensor_parallel_size > 1:\n            raise RequestError(f\"structured_outputs."
            "{so.kind}: not supported with tensor_parallel_size > 1\")\n",
        new="",
        gates=(f"{SO}::test_tensor_parallelism_refuses_a_structured_output_by_name",),
    ),
]
ENTRIES += [
    Mutation(
        id="structured-rejected-token-kept",
        description="a token the grammar rejects is kept, not failed alone: the next mask finds the matcher broken "
                    "and the engine dies with every request in it",
        file="vt/engine/worker/runner.py",
        old="                if rid in out.sampled and (why := matcher.accept(out.sampled[rid][0])) is not None:\n",
        new="                if rid in out.sampled and (why := matcher.accept(out.sampled[rid][0])) is not None and 0:\n",
        gates=(f"{SO}::test_a_grammar_whose_every_token_a_ban_holds_off_fails_its_request_alone",),
    ),
]
ENTRIES += [
    Mutation(
        id="cuda-mask-tokens-reads-the-bits-backwards",
        description="the CUDA mask kernel reads a word's bits from the top: token t takes the bit of token "
                    "31 - t % 32, so the grammar's allowed tokens are masked and others let through",
        file="backends/kernels/tokens.cu",
        old="if (t < V && !((m >> b) & 1u)) row[t] = MASKED_LOGIT;",
        new="if (t < V && !((m >> (31 - b)) & 1u)) row[t] = MASKED_LOGIT;",
        gates=(f"{SO}::test_cuda_mask_tokens_equals_its_twin",),
        needs_gpu=True,
    ),
]
ENTRIES += [
    Mutation(
        id="structured-matcher-failure-kills-the-engine",
        description="a matcher that meets llguidance's limits mid-output raises: the engine dies with every request",
        file="vt/engine/sample/structured.py",
        old="            self.broken = self.matcher.get_error()\n",
        new="            raise __import__(\"vt.errors\").errors.EngineInvariantError(self.matcher.get_error())\n",
        gates=(f"{SO}::test_a_grammar_that_fails_mid_output_fails_its_request_alone",),
    ),
    Mutation(
        id="server-structured-refusal-names-the-wrong-field",
        description="the engine's refusal of a schema the client sent as response_format names structured_outputs",
        file="vt/server/app.py",
        old="            raise bad(str(e), self.parsed.structured_field if param == \"structured_outputs\" else param) "
            "from None",
        new="            raise bad(str(e), param) from None",
        gates=(f"{SO_SERVER}::test_a_structured_output_vt_cannot_read_is_a_400_naming_its_field[body8-response_format-"
               "structured_outputs.json]",),
    ),
    Mutation(
        id="server-text-response-format-refused-beside-structured-outputs",
        description="response_format text (no constraint) beside structured_outputs is refused as a second one",
        file="vt/server/protocol.py",
        old="    if rf == {\"type\": \"text\"}:  # free text: no constraint, whatever structured_outputs says\n        rf = None\n",
        new="",
        gates=(f"{SO_SERVER}::test_a_text_response_format_beside_structured_outputs_leaves_the_constraint",),
    ),
]
ENTRIES += [
    Mutation(
        id="server-shows-masked-logprobs-unclamped",
        description="the server shows a masked token's logprob as it is (about -1e30), not at vLLM's floor",
        file="vt/server/app.py",
        old="    return max(logprob, LOGPROB_FLOOR)\n", new="    return logprob\n",
        gates=(f"{SO_SERVER}::test_a_masked_tokens_logprob_shows_as_vllms_floor",),
    ),
    # vLLM's --generation-config / --override-generation-config
    Mutation(
        id="generation-config-vllm-still-reads-the-checkpoint",
        description="generation_config vllm takes the checkpoint's sampling defaults all the same",
        file="vt/engine/front/llm_engine.py",
        old="        source = {}\n", new="        pass\n",
        gates=("tests/engine/test_generation_config_source.py::test_vllm_takes_no_defaults_from_the_checkpoint",),
    ),
    Mutation(
        id="generation-config-folder-ignored",
        description="a folder given as generation_config is checked and never read: the checkpoint's file is",
        file="vt/engine/front/llm_engine.py", old='    elif cfg.generation_config != "auto":\n',
        new="    elif False:\n",
        gates=("tests/engine/test_generation_config_source.py::test_a_folders_file_and_an_override_are_the_defaults_an_"
               "unset_request_runs",),
    ),
    Mutation(
        id="override-generation-config-ignored",
        description="override_generation_config is validated and never laid over the source",
        file="vt/engine/front/llm_engine.py",
        old="    source = {**source, **(cfg.override_generation_config or {})}\n", new="    source = dict(source)\n",
        gates=("tests/engine/test_generation_config_source.py::test_a_folders_file_and_an_override_are_the_defaults_an_"
               "unset_request_runs",
               "tests/engine/test_generation_config_source.py::test_the_cli_flags_reach_the_engine_and_a_bad_one_is_one_"
               "line_exit_2"),
    ),
    Mutation(
        id="override-generation-config-takes-unknown-fields",
        description="an override field vt does not read (a typo) is taken without a word",
        file="vt/engine/config.py", old="        if unknown:\n", new="        if False:\n",
        gates=("tests/engine/test_generation_config_source.py::test_a_bad_source_or_override_is_one_config_error"
               "[unknown-field]",),
    ),
]
