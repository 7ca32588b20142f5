"""Compatibility with evaluation harnesses and OpenAI clients (issue 31): echo, the API key, logit_bias and
allowed_token_ids on the device sampler (issue 29)."""

from __future__ import annotations

from mutations.model import Mutation
from mutations.registry.gates import OAI

ECHO = "tests/server/test_echo.py"
ECHO_TEXT = "tests/server/test_echo_text.py"  # apart from test_echo.py's transformers
ROUTES = "tests/server/test_vllm_routes.py"
LM_EVAL = "tests/server/test_lm_eval.py"
BIAS = "tests/engine/test_logit_bias.py"
REFUSE = "tests/server/test_refusals.py"
NAMES = "tests/server/test_served_names.py"
RENDERING = "tests/server/test_chat_rendering_fields.py"
FIELDS = "tests/server/test_vllm_request_fields.py"
CORS = "tests/server/test_cors.py"
TOOLS = "tests/server/test_tool_calls.py"
SHAPER = "tests/server/test_tool_shaper.py"
THINK = "tests/server/test_reasoning.py"
TOKEN_IDS = "tests/server/test_return_token_ids.py"

ENTRIES: list[Mutation] = [
    Mutation(
        id="logit-bias-after-the-filters",
        description="the filters (top-k, top-p, min-p) choose their tokens from the unbiased logits: logit_bias "
                    "applied after them instead of before",
        file="vt/engine/sample/sampler.py",
        old="            idx, w = support((logits[r] / F32(temp[r])).astype(F32),",
        new="            pre = logits[r].copy()\n            pre[bias_ids[r, : num_bias[r]]] -= bias_vals[r, : num_bias[r]]\n"
            "            idx, w = support((pre / F32(temp[r])).astype(F32),",
        gates=(f"{BIAS}::test_the_bias_is_added_before_the_filters[cpu]",),
    ),
    Mutation(
        id="allowed-token-ids-ignored",
        description="allowed_token_ids is staged and never applied: every token stays drawable",
        file="vt/engine/sample/sampler.py", old="    if allowed:\n        row[:] = -np.inf\n",
        new="    if False:\n        row[:] = -np.inf\n",
        gates=(f"{BIAS}::test_allowed_token_ids_are_the_whole_support[cpu]",
               f"{BIAS}::test_allowed_token_ids_bound_every_sampled_token"),
    ),
    Mutation(
        id="logit-bias-dropped-by-the-server",
        description="the server parses and checks logit_bias, then never hands it to the engine",
        file="vt/server/protocol.py", old='        kw["logit_bias"] = logit_bias\n', new="        pass\n",
        gates=(f"{REFUSE}::test_logit_bias_reaches_the_sampler_on_both_endpoints",
               f"{REFUSE}::test_a_bad_logit_bias_is_a_400_naming_it[outside-the-vocabulary]",
               # (dropped, an id outside the vocabulary is never checked, so never named either)
               f"{REFUSE}::test_a_value_vt_would_misread_or_ignore_is_a_400_naming_its_field"
               f"[logit-bias-outside-the-vocabulary]"),
    ),
    Mutation(
        id="cuda-allowed-token-ids-ignored",
        description="the CUDA sampler never masks the tokens allowed_token_ids leaves out",
        file="backends/kernels/sampler.cu", old="        if (allowed) {", new="        if (false) {", needs_gpu=True,
        gates=(f"{BIAS}::test_allowed_token_ids_are_the_whole_support[cuda]",
               f"{BIAS}::test_allowed_token_ids_are_the_whole_support[cuda-split]",
               f"{BIAS}::test_allowed_token_ids_bound_every_sampled_token",  # the engine: on CUDA in the GPU lane
               f"{BIAS}::test_the_cuda_sampler_biases_as_the_numpy_reference_at_a_real_vocabulary"),
    ),
    Mutation(
        id="cuda-biased-token-logprob-from-the-biased-logit",
        description="the CUDA sampler reports a biased token's logprob from its biased logit, not the model's",
        file="backends/kernels/sampler.cu",
        # raw_logit serves both samplers (vt_sample's rows, the split kernels' finish_row): the H200 run of session 28
        # found the split path's own copy of this line, which the mutant did not reach ([cuda-split] stayed green)
        old="    for (int j = 0; j < num_bias; j++) if (bias_ids[j] == tok) { raw = bias_raw[j]; break; }", new="",
        needs_gpu=True,
        gates=(f"{BIAS}::test_logprobs_are_the_models_whatever_the_bias[cuda]",
               f"{BIAS}::test_logprobs_are_the_models_whatever_the_bias[cuda-split]",
               f"{BIAS}::test_the_cuda_sampler_biases_as_the_numpy_reference_at_a_real_vocabulary"),
    ),
    Mutation(
        id="echo-drops-the-prompt",
        description="echo without logprobs returns the completion alone, not the prompt before it",
        file="vt/server/app.py", old="            return prompt_text + text, None\n",
        new="            return text, None\n",
        gates=(f"{ECHO_TEXT}::test_echo_puts_the_prompt_before_the_completion",),
    ),
    Mutation(
        id="api-key-not-checked",
        description="the /v1 routes serve whoever asks, whatever key they send",
        file="vt/server/app.py", old='        if request.headers.get("authorization") != want:\n', new="        if False:\n",
        gates=(f"{ROUTES}::test_the_v1_routes_want_the_key_and_the_others_do_not",),
    ),
    Mutation(
        id="echo-drops-the-prompt-logprobs",
        description="echo with logprobs returns the prompt's text but not its tokens' logprobs: lm-eval's "
                    "loglikelihoods all read 0",
        file="vt/server/protocol.py", old="    if echo and logprobs is not None:", new="    if False:",
        gates=(f"{ECHO}::test_the_prompt_tokens_logprobs_equal_transformers",
               f"{ECHO}::test_echo_with_max_tokens_0_answers_the_prompt_alone_scored",
               f"{LM_EVAL}::test_lm_eval_through_vt_serve_equals_its_hf_model"),
    ),
    Mutation(
        id="chat-template-flag-ignored",
        description="--chat-template is read and checked, then the checkpoint's template is used anyway",
        file="vt/engine/front/llm_engine.py", old="    if cfg.chat_template is not None:\n", new="    if False:\n",
        gates=("tests/server/test_chat_template.py::test_the_server_renders_chat_with_the_given_template",
               "tests/server/test_chat_template.py::test_a_template_that_fails_on_a_conversation_is_a_400_on_every_"
               "route"),
    ),
    Mutation(
        id="logprob-ranks-off-by-one",
        description="the offline API's Logprob objects rank the likeliest token 0, not 1 as vLLM's do",
        file="vt/engine/core/request.py", old="Logprob(v, r + 1 if r < n else None, decode(t))",
        new="Logprob(v, r if r < n else None, decode(t))",
        gates=("tests/engine/test_tokenizer_api.py::test_offline_logprobs_are_vllms_logprob_objects",),
    ),
]
# Review of the server (fix-server): each defect's gate goes red with it back.
ENTRIES += [
    Mutation(
        id="logit-bias-key-past-the-digit-limit-is-a-500",
        description="a logit_bias key of 4,300+ digits reaches int(), whose ValueError is a 500 with a traceback",
        file="vt/server/protocol.py",
        old="    except ValueError:  # 4,300+ digits: past Python's limit on str -> int (and far past any vocabulary)\n",
        new="    except ZeroDivisionError:\n",
        gates=(f"{REFUSE}::test_a_logit_bias_key_past_pythons_digit_limit_is_a_400_naming_it",),
        expect="assert 500 == 400",
    ),
]
ENTRIES += [
    Mutation(
        id="server-reads-any-content-type-as-json",
        description="the JSON routes read a body as JSON whatever its Content-Type says (vLLM refuses it: "
                    "validate_json_request)",
        file="vt/server/app.py", old="    if media_type != \"application/json\":\n", new="    if False:\n",
        gates=(*(f"{REFUSE}::test_a_body_not_sent_as_json_is_a_400_on_the_openai_routes[{r}]"
                 for r in ("completions", "chat")),
               *(f"{REFUSE}::test_a_body_not_sent_as_json_is_a_400_on_the_tokenizer_routes[{r}-body{i}]"
                 for i, r in enumerate(("/tokenize", "/detokenize")))),
        expect="assert (200 == 400)",
    ),
]
ENTRIES += [
    Mutation(
        id="chat-stream-drops-prompt-logprobs",
        description="a chat stream takes prompt_logprobs and never sends them (vLLM refuses them with stream=True)",
        file="vt/server/protocol.py", old="    if chat and stream and prompt_logprobs is not None:",
        new="    if False:",
        gates=tuple(f"{REFUSE}::test_chat_prompt_logprobs_on_a_stream_is_a_400_never_dropped[{n}]" for n in (0, 2)),
        expect="assert (200 == 400)",
    ),
]
ENTRIES += [
    Mutation(
        id="completions-top-logprobs-leave-out-the-token",
        description="completions' top_logprobs hold the top n alone: the sampled (or echoed prompt) token is left "
                    "out where it is not among them (OpenAI and vLLM give up to logprobs + 1, the token always)",
        file="vt/server/app.py",
        old='                "top_logprobs": [{s(k): shown(v) for k, v in [(t, lp[t]), *top(lp)]} for t, lp in zip(ids, lps)],\n',
        new='                "top_logprobs": [{s(k): shown(v) for k, v in top(lp)} for t, lp in zip(ids, lps)],\n',
        gates=(f"{OAI}::test_completions_top_logprobs_hold_the_sampled_token_beside_the_top_n",),
        expect="where False = all(",
    ),
]
BOS = "tests/server/test_chat_special_tokens.py"
ENTRIES += [
    Mutation(
        id="llm-chat-adds-a-second-bos",
        description="LLM.chat encodes the rendered chat with the tokenizer's special tokens: a BOS post-processor "
                    "adds a second BOS before the template's",
        file="vt/engine/front/llm.py",
        old="        ids = [self.engine.tokenize(t, add_special_tokens=False) for t in texts]\n",
        new="        ids = [self.engine.tokenize(t, add_special_tokens=True) for t in texts]\n",
        gates=(f"{BOS}::test_llm_chat_opens_with_one_bos",),
        expect="one BOS, then <|im_start|>",
    ),
    Mutation(
        id="server-chat-adds-a-second-bos",
        description="/v1/chat/completions encodes the rendered chat with the tokenizer's special tokens: a BOS "
                    "post-processor adds a second BOS, and prompt_tokens disagree with /tokenize's",
        file="vt/server/app.py",
        old="            ids = e.tokenize(prompt, add_special_tokens=not parsed.is_chat)\n",
        new="            ids = e.tokenize(prompt)\n",
        gates=(f"{BOS}::test_the_server_tokenizes_a_chat_as_its_template_wrote_it",),
        expect="chat's prompt is /tokenize's",
    ),
    Mutation(
        id="tokenize-messages-ignore-add-special-tokens",
        description="/tokenize with messages takes add_special_tokens and never adds them",
        file="vt/server/app.py",
        old='        return self._rendered_chat(body, checked), flag(body, "add_special_tokens", False)\n',
        new='        return self._rendered_chat(body, checked), False\n',
        gates=(f"{BOS}::test_the_server_tokenizes_a_chat_as_its_template_wrote_it",),
        expect="add_special_tokens with messages is honoured",
    ),
]
STREAM = "tests/server/test_streamed_choices.py"
ABORTS = "tests/server/test_abort_metrics.py"


def streamed(test: str, *cases: str) -> tuple[str, ...]:
    """A test of test_streamed_choices.py in each case, against both of its servers (engine thread and process)."""
    return tuple(f"{STREAM}::{test}[{mode}-{case}]" for mode in ("engine-thread", "engine-process") for case in cases)
ENTRIES += [
    Mutation(
        id="stream-resends-a-finished-choice",
        description="with n > 1, a streamed choice that finished is sent again (its finish_reason, no text) on every "
                    "step of a sibling that still generates",
        file="vt/server/app.py",
        old="        if key in self.ended:  # its final frame went out: a sibling's step says nothing of it (OpenAI's, "
            "vLLM's)\n",
        new="        if False:\n",
        gates=streamed("test_a_finished_choice_is_said_once_and_then_nothing_while_its_siblings_run",
                       "completions", "chat"),
        expect="finish frames per index",
    ),
    Mutation(
        id="streamed-text-offset-restarts-each-frame",
        description="a streamed completion's text_offset restarts at each frame (never counted on past the tokens "
                    "sent before): offsets no longer the non-streamed answer's",
        file="vt/server/app.py",
        old='            self.offsets[key] = base + sum(len(t) for t in lp["tokens"])\n',
        new="            self.offsets[key] = base\n",
        gates=streamed("test_streamed_text_offsets_are_the_whole_answers", "plain", "stop-string-held-back", "echo",
                       "echo-and-stop"),
        expect="streamed [",
    ),
    Mutation(
        id="echo-text-offset-misses-the-prompt",
        description="with echo, the completion's text_offset starts at 0, not after the prompt's text before it",
        file="vt/server/app.py",
        old="        base = self.offsets[key] if key in self.offsets else self._echo_shift(i)\n",
        new="        base = self.offsets.get(key, 0)\n",
        gates=streamed("test_streamed_text_offsets_are_the_whole_answers", "echo", "echo-and-stop"),
        expect="each token's offset is where the tokens before it end",
    ),
    Mutation(
        id="engine-process-counts-an-abort-once-per-prompt",
        description="through the engine process, vt_requests_aborted counts an abort once per prompt's request, "
                    "not once per sample sequence it ended (the unit of the finish counters)",
        file="vt/server/async_llm.py",
        old="        self.num_aborted += applied  # per sample sequence, as the engine thread counts them "
            "(vt_requests_aborted)\n",
        new="        self.num_aborted += min(applied, 1)\n",
        gates=(f"{ABORTS}::test_an_aborted_stream_counts_each_sample_once_in_every_abort_counter[engine-process]",),
        expect="the abort counters disagree on the unit",
    ),
    Mutation(
        id="engine-thread-counts-an-abort-once-per-prompt",
        description="on the engine thread, vt_requests_aborted counts an abort once per prompt's request, not once "
                    "per sample sequence it ended",
        file="vt/server/async_llm.py",
        old="                self.num_aborted += 1\n",
        new="                self.num_aborted += int(r is aborted[0])\n",
        gates=(f"{ABORTS}::test_an_aborted_stream_counts_each_sample_once_in_every_abort_counter[engine-thread]",),
        expect="the abort counters disagree on the unit",
    ),
    Mutation(
        id="served-names-beyond-the-first-refused",
        description="with --served-model-name a b, a request naming b is a 404: only the first name is served",
        file="vt/server/protocol.py", old="    if model is not None and model not in served:\n",
        new="    if model is not None and model != served[0]:\n",
        gates=(f"{NAMES}::test_a_request_may_name_any_served_name_and_the_response_carries_the_first[beta]",),
        expect="the served name 'beta' is answered",
    ),
    Mutation(
        id="served-names-listed-first-only",
        description="/v1/models lists the first served name alone: a client picking a model from the list never "
                    "sees the others",
        file="vt/server/app.py", old="for name in self.model_names]})", new="for name in self.model_names[:1]]})",
        gates=(f"{NAMES}::test_models_lists_every_served_name_in_order",),
    ),
    Mutation(
        id="served-names-response-echoes-the-asked-name",
        description="a response carries the name the request asked for, not the first served name (vLLM's rule)",
        file="vt/server/app.py",
        old="            check_model(body, self.model_names)\n            parsed = parse_sampling(body, chat, self.tool_options)\n",
        new="            check_model(body, self.model_names)\n            self.model_name = body.get(\"model\") or "
            "self.model_name\n            parsed = parse_sampling(body, chat, self.tool_options)\n",
        gates=(f"{NAMES}::test_a_request_may_name_any_served_name_and_the_response_carries_the_first[beta]",),
    ),
    Mutation(
        id="chat-template-kwargs-never-reach-the-template",
        description="chat_template_kwargs are checked, then dropped: the template never sees enable_thinking",
        file="vt/engine/front/chat.py", old="    return dict(kwargs)\n", new="    return {}\n",
        gates=(f"{RENDERING}::test_chat_template_kwargs_reach_the_template_on_chat_and_tokenize",
               f"{RENDERING}::test_llm_chat_takes_vllms_rendering_arguments"),
    ),
    Mutation(
        id="continue-final-message-closes-the-turn",
        description="continue_final_message is accepted and the last message rendered closed, end-of-turn and all",
        file="vt/engine/front/chat.py",
        old="    return left_open(text, messages[-1][\"content\"]) if continue_final_message else text\n",
        new="    return text\n",
        gates=(f"{RENDERING}::test_continue_final_message_leaves_the_last_message_open",
               f"{RENDERING}::test_llm_chat_takes_vllms_rendering_arguments"),
    ),
    Mutation(
        id="continue-beside-a-generation-prompt-accepted",
        description="continue_final_message with add_generation_prompt true is rendered, not refused as vLLM does",
        file="vt/engine/front/chat.py", old="    if continue_final_message and add_generation_prompt:\n",
        new="    if False:\n",
        gates=(f"{RENDERING}::test_a_rendering_field_vt_cannot_honour_is_a_400_naming_it"
               f"[continue-with-the-default-generation-prompt]",
               f"{RENDERING}::test_a_rendering_field_vt_cannot_honour_is_a_400_naming_it"
               f"[continue-with-a-generation-prompt]",
               f"{RENDERING}::test_llm_chat_takes_vllms_rendering_arguments"),
    ),
    Mutation(
        id="chat-add-generation-prompt-ignored",
        description="the server reads add_generation_prompt and renders with true whatever was given",
        file="vt/server/protocol.py",
        old='    return {"add_generation_prompt": given.get("add_generation_prompt", True),\n',
        new='    return {"add_generation_prompt": True,\n',
        # continuing the last message needs add_generation_prompt false: refused under the mutant, so every refusal
        # case's non-vacuity check (a rightly asked continuation is served) goes red too
        gates=(f"{RENDERING}::test_add_generation_prompt_false_leaves_out_the_assistant_turn",
               f"{RENDERING}::test_continue_final_message_leaves_the_last_message_open",
               *(f"{RENDERING}::test_a_rendering_field_vt_cannot_honour_is_a_400_naming_it[{case}]" for case in (
                   "continue-with-the-default-generation-prompt", "continue-with-a-generation-prompt",
                   "kwargs-replacing-the-messages", "kwargs-not-an-object", "continue-not-a-boolean"))),
    ),
    Mutation(
        id="message-name-refused-by-the-server",
        description="a chat message's name (OpenAI's schema) is refused as a field vt does not read",
        file="vt/server/protocol.py",
        old='        return conversation_tool_calls(parse_conversation(body.get("messages"), MESSAGE_TOOL_FIELDS))\n',
        new='        return conversation_tool_calls(parse_conversation(body.get("messages")))\n',
        gates=(f"{RENDERING}::test_a_messages_name_reaches_the_template",),
    ),
    Mutation(
        id="include-stop-str-dropped-by-the-server",
        description="include_stop_str_in_output is accepted and never handed to SamplingParams",
        file="vt/server/protocol.py",
        old='("include_stop_str_in_output", (bool,)),\n                         ("skip_special_tokens"',
        new='("skip_special_tokens"',
        gates=(f"{FIELDS}::test_include_stop_str_in_output_keeps_the_stop_string[chat]",
               f"{FIELDS}::test_include_stop_str_in_output_keeps_the_stop_string[completions]"),
    ),
    Mutation(
        id="skip-special-tokens-false-ignored",
        description="skip_special_tokens false is accepted and never handed to SamplingParams: the text still leaves "
                    "the special tokens out",
        file="vt/server/protocol.py",
        old='                         ("skip_special_tokens", (bool,)), ("bad_words", (list,))):\n',
        new='                         ("bad_words", (list,))):\n',
        gates=(f"{FIELDS}::test_skip_special_tokens_false_keeps_their_text[chat]",
               f"{FIELDS}::test_skip_special_tokens_false_keeps_their_text[completions]"),
    ),
    Mutation(
        id="tokenize-token-strs-never-returned",
        description="/tokenize takes return_token_strs and answers token_strs null all the same",
        file="vt/server/app.py",
        old='            strs = [e.tokenizer.id_to_token(t) for t in ids] if flag(body, "return_token_strs", False) '
            'else None\n',
        new='            strs = None\n',
        gates=(f"{FIELDS}::test_tokenize_returns_the_token_strings_when_asked[prompt]",
               f"{FIELDS}::test_tokenize_returns_the_token_strings_when_asked[messages]"),
    ),
    Mutation(
        id="chat-choice-without-stop-reason",
        description="chat choices leave out stop_reason, which completions' choices carry",
        file="vt/server/app.py",
        old='            return {"index": index, **(body or {"delta": {"content": ""}}), "logprobs": lp, "finish_reason": reason,\n'
            '                    **stop_reason, **self._ids(c_ids if whole else new_toks)}\n',
        new='            return {"index": index, **(body or {"delta": {"content": ""}}), "logprobs": lp, "finish_reason": reason,\n'
            '                    **self._ids(c_ids if whole else new_toks)}\n',
        gates=(f"{FIELDS}::test_chat_and_completion_choices_carry_the_stop_reason[chat]",),
    ),
    Mutation(
        id="max-completion-tokens-refused-as-max-tokens",
        description="a too-large max_completion_tokens is refused under the name max_tokens, which the client never "
                    "gave",
        file="vt/server/app.py", old="            field = parsed.max_tokens_field  # chat's max_completion_tokens",
        new='            field = "max_tokens"  # chat\'s max_completion_tokens',
        gates=(f"{FIELDS}::test_a_too_large_max_completion_tokens_is_refused_under_its_own_name",),
    ),
    Mutation(
        id="long-chat-prompt-refused-as-the-prompt",
        description="a chat too long for max_model_len is refused with param prompt, a field chat has not",
        file="vt/server/app.py", old='f"one generated token", "messages" if parsed.is_chat else "prompt")\n',
        new='f"one generated token", "prompt")\n',
        gates=(f"{FIELDS}::test_a_too_long_chat_prompt_names_the_messages",),
    ),
    Mutation(
        id="cors-middleware-not-installed",
        description="the app has no CORS middleware: a browser's preflight gets a 405 and no Allow-Origin",
        file="vt/server/app.py", old="                     middleware=[(cors or CorsPolicy()).middleware()], lifespan=lifespan)\n",
        new="                     middleware=[], lifespan=lifespan)\n",
        gates=(f"{CORS}::test_a_preflight_is_answered_with_any_origin_by_default",
               f"{CORS}::test_allowed_origins_bound_who_may_ask"),
    ),
    Mutation(
        id="cors-allowed-origins-ignored",
        description="--allowed-origins is parsed and never applied: every origin is let in",
        file="vt/server/cors.py", old="allow_origins=list(self.allowed_origins),", new='allow_origins=["*"],',
        gates=(f"{CORS}::test_allowed_origins_bound_who_may_ask",),
    ),
    Mutation(
        id="cors-flag-json-unchecked",
        description="a CORS flag's JSON that is not a list of strings is taken as it is, and the server starts on it",
        file="vt/server/cors.py", old="    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):\n",
        new="    if False:\n",
        gates=(f"{CORS}::test_a_bad_cors_flag_is_one_config_error_line_exit_2[not-a-list]",
               f"{CORS}::test_a_bad_cors_flag_is_one_config_error_line_exit_2[not-strings]"),
    ),
    # Tool calling (vt/server/tools.py): the tools reach the template, forced choices hold the output to the
    # schemas, auto reads hermes blocks whole and streamed alike
    Mutation(
        id="tools-never-reach-the-template",
        description="a request's tools are checked and never handed to the chat template: the model never sees them",
        file="vt/server/tools.py", old="        return [copy.deepcopy(t) for t in self.tools]\n",
        new="        return None\n",
        gates=(f"{TOOLS}::test_tool_choice_none_renders_the_tools_and_reads_no_calls",
               f"{TOOLS}::test_a_named_tool_choice_answers_with_that_call_whose_arguments_are_what_the_schema_holds_"
               f"the_model_to"),
    ),
    Mutation(
        id="named-tool-choice-holds-the-output-to-any-object",
        description="a named tool choice holds the output to any JSON object, not the function's parameters schema",
        file="vt/server/tools.py",
        old='            return copy.deepcopy(fn.get("parameters")) or {"type": "object", "properties": {}}\n',
        new='            return {"type": "object"}\n',
        gates=(f"{TOOLS}::test_a_named_tool_choice_answers_with_that_call_whose_arguments_are_what_the_schema_holds_"
               f"the_model_to",),
    ),
    Mutation(
        id="required-ignores-parallel-tool-calls-false",
        description="tool_choice required with parallel_tool_calls false still lets the model make several calls",
        file="vt/server/tools.py", old="        if not self.parallel:\n", new="        if False:\n",
        gates=(f"{TOOLS}::test_required_answers_with_calls_of_the_given_tools_and_parallel_false_with_exactly_one",
               f"{SHAPER}::test_a_required_schema_rebases_each_tools_refs_and_parallel_false_holds_one_call"),
    ),
    Mutation(
        id="hermes-keeps-the-first-call-alone",
        description="the hermes parser reads the first <tool_call> block and drops the later ones",
        file="vt/server/tools.py", old="        calls.append(self._indexed(call))\n",
        new="        if not self.calls:\n            calls.append(self._indexed(call))\n",
        gates=(f"{TOOLS}::test_auto_reads_the_models_hermes_calls_and_the_stream_adds_up_to_the_whole_answer",),
    ),
    Mutation(
        id="auto-call-finishes-as-stop",
        description="an auto answer that called a tool finishes as stop, not tool_calls (OpenAI's, vLLM's)",
        file="vt/server/app.py", old='                reason = "tool_calls"  # an auto answer that called a tool',
        new='                pass  # an auto answer that called a tool',
        gates=(f"{TOOLS}::test_auto_reads_the_models_hermes_calls_and_the_stream_adds_up_to_the_whole_answer",),
    ),
    Mutation(
        id="tag-stream-sends-a-tags-start-as-text",
        description="a stream holds back no text that could begin a tag (<tool_call>, </think>): its first characters "
                    "go out as content or reasoning before the tag is known",
        file="vt/server/tags.py", old="    for n in range(min(len(tag) - 1, len(text)), 0, -1):\n",
        new="    for n in range(0):\n",
        gates=(f"{SHAPER}::test_an_auto_answer_streamed_in_any_pieces_is_its_whole_answer",
               f"{SHAPER}::test_the_stream_holds_back_a_tags_start_and_the_whole_reads_each_block",
               f"{TOOLS}::test_auto_reads_the_models_hermes_calls_and_the_stream_adds_up_to_the_whole_answer",
               f"{THINK}::test_the_split_holds_back_a_tags_start_across_pieces",
               f"{THINK}::test_a_think_block_is_the_reasoning_and_the_stream_adds_up_to_the_whole_answer"),
    ),
    Mutation(
        id="tool-stream-sends-whitespace-after-a-call",
        description="whitespace after a call is not held until the text says what it is: dropped at once, so a "
                    "later part's leading whitespace is lost from the stream though the whole answer keeps it",
        file="vt/server/tools.py",
        old="            if self.calls and not self._part_live and not head.strip():\n",
        new="            if False:\n",
        # the property test finds it only when its draw cuts inside such whitespace: the fixed cuts always do
        gates=(f"{SHAPER}::test_the_stream_holds_back_a_tags_start_and_the_whole_reads_each_block",),
    ),
    Mutation(
        id="tool-call-arguments-reach-the-template-as-a-string",
        description="an assistant turn's tool-call arguments (a JSON string over the API) reach the template as the "
                    "string, which tojson quotes",
        file="vt/server/tools.py",
        old='                    fn["arguments"] = json.loads(args) if args.strip() else {}\n',
        new='                    json.loads(args)\n',
        gates=(f"{TOOLS}::test_a_tool_calling_conversation_renders_its_calls_arguments_and_results",),
    ),
    Mutation(
        id="auto-tool-choice-without-the-parser-flags",
        description='tool_choice "auto" is taken on a server without --enable-auto-tool-choice and a parser, and '
                    "its answer's calls are never read",
        file="vt/server/tools.py", old="        if not (options.enable_auto and options.parser):\n",
        new="        if False:\n",
        gates=(f"{TOOLS}::test_auto_without_the_servers_parser_flags_is_vllms_400_and_named_choices_need_none",),
    ),
    Mutation(
        id="exclude-tools-when-none-ignored",
        description="--exclude-tools-when-tool-choice-none is read and never applied",
        file="vt/server/tools.py",
        old='        if not self.tools or (self.choice == "none" and options.exclude_when_none):\n',
        new="        if not self.tools:\n",
        gates=(f"{SHAPER}::test_tool_choice_none_shows_the_tools_unless_the_server_excludes_them",),
    ),
    # Reasoning outputs (vt/server/reasoning.py): a think block is the reasoning, whole and streamed alike
    Mutation(
        id="reasoning-ignores-a-block-the-prompt-opened",
        description="a prompt that ends inside a think block is not noticed: the answer's reasoning reads as content",
        file="vt/server/app.py",
        old="        self.opened = chat and isinstance(prompts[0], str) and prompt_opens_a_block(prompts[0])\n",
        new="        self.opened = False\n",
        gates=(f"{THINK}::test_a_prompt_that_opens_the_block_makes_an_unclosed_answer_all_reasoning",),
    ),
    Mutation(
        id="include-reasoning-false-ignored",
        description="include_reasoning false is read and the reasoning is sent all the same",
        file="vt/server/app.py", old="            if not self.parsed.include_reasoning:\n",
        new="            if False:\n",
        gates=(f"{THINK}::test_a_think_block_is_the_reasoning_and_the_stream_adds_up_to_the_whole_answer",),
    ),
    Mutation(
        id="tool-calls-read-from-the-reasoning-too",
        description="with a reasoning parser, tool calls are read from the whole text, think block included",
        file="vt/server/app.py",
        old='            content, calls = shaper.whole(content or "") if whole else shaper.feed(content or "", done)\n',
        new='            content, calls = shaper.whole(text) if whole else shaper.feed(content or "", done)\n',
        gates=(f"{THINK}::test_with_tools_the_calls_are_read_from_the_content_after_the_block",),
    ),
    Mutation(
        id="structured-output-under-an-open-think-block-accepted",
        description="a structured output under a think block the prompt opened is served: the grammar holds the "
                    "reasoning too",
        file="vt/server/app.py",
        old="        if self.reasoning_parser is not None and parsed.params.structured_outputs is not None and \\\n",
        new="        if False and \\\n",
        gates=(f"{THINK}::test_what_a_reasoning_parser_cannot_honour_is_a_400_naming_its_field",),
    ),
    Mutation(
        id="required-call-finishes-as-stop",
        description="a required tool choice's answer finishes as stop, not tool_calls (vLLM's, OpenAI's)",
        file="vt/server/tools.py", old='        return self.req.choice in ("auto", "required") and self.calls > 0\n',
        new='        return self.req.choice == "auto" and self.calls > 0\n',
        gates=(f"{TOOLS}::test_required_answers_with_calls_of_the_given_tools_and_parallel_false_with_exactly_one",),
    ),
    Mutation(
        id="auto-parallel-false-keeps-every-call",
        description="parallel_tool_calls false under auto is taken and every call the model wrote is answered",
        file="vt/server/tools.py", old="        if self.calls and not self.req.parallel:", new="        if False:",
        gates=(f"{TOOLS}::test_parallel_tool_calls_false_under_auto_keeps_the_first_call_whole_and_streamed",),
    ),
    Mutation(
        id="required-nests-a-tools-refs-unrebased",
        description="required's array nests each tool's schema with its refs unchanged: they point from the "
                    "array's root, not the tool's",
        file="vt/server/tools.py", old='        out["$ref"] = base + ref[1:]\n', new='        out["$ref"] = ref\n',
        # (the server test's request is then refused by the engine, an exception rather than its assertion)
        gates=(f"{SHAPER}::test_a_required_schema_rebases_each_tools_refs_and_parallel_false_holds_one_call",),
    ),
    Mutation(
        id="model-call-json-depth-unguarded",
        description="a tool call the model nests past the JSON parser's depth raises out of the parser: a 500",
        file="vt/server/tools.py", old="    except (ValueError, RecursionError):\n        return None\n",
        new="    except ValueError:\n        return None\n",
        gates=(f"{SHAPER}::test_a_call_the_model_nests_too_deep_or_writes_with_a_lone_surrogate_is_text_or_escaped_"
               f"never_a_500",),
    ),
    # vLLM's return_token_ids
    Mutation(
        id="streamed-token-ids-repeat-the-answer-so-far",
        description="each streamed frame carries every id generated so far, not those new since the last frame",
        file="vt/server/app.py", old="self._ids(c_ids if whole else new_toks)", new="self._ids(c_ids)", count=2,
        gates=(f"{TOKEN_IDS}::test_a_completion_carries_the_offline_apis_ids_and_its_stream_adds_up_to_them",
               f"{TOKEN_IDS}::test_a_chat_answer_carries_its_ids_and_the_prompts_on_the_response"),
    ),
    Mutation(
        id="held-frame-drops-its-token-ids",
        description="a chat frame whose text the tool parser holds is not sent, and its tokens' ids with it",
        file="vt/server/app.py",
        old="            if body is None and lp is None and not done and not (self.parsed.return_token_ids and new_toks):\n",
        new="            if body is None and lp is None and not done:\n",
        gates=(f"{TOOLS}::test_auto_reads_the_models_hermes_calls_and_the_stream_adds_up_to_the_whole_answer",),
    ),
    Mutation(
        id="chat-stream-leaves-out-the-prompt-ids",
        description="a chat stream asked for token ids never sends the prompt's",
        file="vt/server/app.py", old='                    role["prompt_token_ids"] = list(self.token_ids[0])\n',
        new="                    pass\n",
        gates=(f"{TOKEN_IDS}::test_a_chat_answer_carries_its_ids_and_the_prompts_on_the_response",),
    ),
    Mutation(
        id="tokens-as-token-ids-ignored",
        description="return_tokens_as_token_ids is read and logprobs still name tokens by their text",
        file="vt/server/app.py",
        old='        return f"token_id:{t}" if self._tokens_as_ids() else self.tokenizer.decode([t], skip_special_tokens=False)\n',
        new="        return self.tokenizer.decode([t], skip_special_tokens=False)\n",
        gates=(f"{TOKEN_IDS}::test_return_tokens_as_token_ids_names_each_logprob_token_by_its_id_and_the_request_"
               f"overrides_the_flag",
               f"{TOKEN_IDS}::test_the_servers_flag_makes_ids_the_default_and_a_request_may_ask_for_text"),
    ),
    Mutation(
        id="request-tokens-as-ids-loses-to-the-flag",
        description="a request's return_tokens_as_token_ids is overruled by the server's flag",
        file="vt/server/app.py", old="        return self.server.tokens_as_ids if given is None else given\n",
        new="        return self.server.tokens_as_ids\n",
        gates=(f"{TOKEN_IDS}::test_the_servers_flag_makes_ids_the_default_and_a_request_may_ask_for_text",),
    ),
    Mutation(
        id="token-id-offsets-count-the-shown-ids",
        description="with tokens shown as ids, text_offset counts the ids' lengths, not the text's",
        file="vt/server/app.py", old="        texts = [text_of(t) for t in ids] if as_ids else strings", new="        texts = strings",
        gates=(f"{TOKEN_IDS}::test_return_tokens_as_token_ids_names_each_logprob_token_by_its_id_and_the_request_"
               f"overrides_the_flag",),
    ),
    # the tool request's checks: what vt would misread is a 400 naming it
    Mutation(
        id="tool-request-fields-unchecked",
        description="a tool's or tool_choice's field vt does not read is taken without a word",
        file="vt/server/tools.py", old="    if extra:\n        raise RequestError(f\"{where}.{extra[0]}: is not a field vt knows here",
        new="    if False:\n        raise RequestError(f\"{where}.{extra[0]}: is not a field vt knows here",
        gates=(f"{TOOLS}::test_a_tool_request_vt_cannot_read_is_a_400_naming_its_field[tools-4]",),
    ),
    Mutation(
        id="tool-names-may-repeat",
        description="two tools of one name are taken: a named choice or a call could mean either",
        file="vt/server/tools.py", old="        if fn[\"name\"] in seen:\n", new="        if False:\n",
        gates=(f"{TOOLS}::test_a_tool_request_vt_cannot_read_is_a_400_naming_its_field[tools-2]",),
    ),
    Mutation(
        id="tool-message-id-unchecked",
        description="a tool_call_id on a message other than a tool's is handed to the template without a word",
        file="vt/server/tools.py",
        old='        if m.get("tool_call_id") is not None and (m["role"] != "tool" or not isinstance(m["tool_call_id"], str)):\n',
        new="        if False:\n",
        gates=(f"{TOOLS}::test_a_tool_request_vt_cannot_read_is_a_400_naming_its_field[messages-14]",),
    ),
    Mutation(
        id="auto-tool-choice-flag-without-a-parser",
        description="--enable-auto-tool-choice starts without --tool-call-parser: auto answers are never read",
        file="vt/server/tools.py", old="        if self.enable_auto and self.parser is None:\n", new="        if False:\n",
        gates=(f"{TOOLS}::test_a_bad_tool_flag_is_one_config_error_line_exit_2_before_any_model_loads"
               f"[auto-without-a-parser]",),
    ),
]
