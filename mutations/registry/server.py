"""The server rule (issue 14): no byte before the first result, errors after a 200, [DONE] after an error frame,
aborts on disconnect, usage over n samples.
"""

from __future__ import annotations

from mutations.model import Mutation
from mutations.registry.gates import OAI, PAR, RULE

LEAVING = "tests/server/test_server_leaving.py"
FAULTS = "tests/server/test_server_faults.py"
BENCH = "tests/server/test_bench.py"
BENCH_PLOT = "tests/server/test_bench_plot.py"  # apart from test_bench.py's servers
REFUSALS = "tests/server/test_refusals.py"
SHUTDOWN = "tests/server/test_shutdown.py"

ENTRIES: list[Mutation] = [
    Mutation(
        id="server-role-frame-before-the-first-result",
        description="a stream's 200 and role frame go out before the engine produced anything: errors and TTFT lie",
        file="vt/server/app.py",
        old="        task = await self._while_connected(request, self._first())\n        if task is None:\n"
            "            return Response(status_code=499)\n        firsts = task.result()\n",
        new="        firsts = None\n",
        gates=(f"{RULE}::test_no_byte_is_sent_while_the_engine_is_held_inside_sampling",
               f"{RULE}::test_an_error_before_the_first_token_is_the_whole_response[stream]"),
    ),
    Mutation(
        id="server-error-swallowed-after-a-200",
        description="a request that fails after its first token ends its stream as if it had finished",
        file="vt/server/app.py", old='            if c.finish_reason == "error":\n', new="            if False:\n",
        gates=(f"{RULE}::test_a_failure_after_the_first_token_is_one_error_frame_then_done",),
    ),
    Mutation(
        id="server-error-frame-without-done",
        description="after an engine failure mid-stream the error frame is the last thing sent: no [DONE]",
        file="vt/server/app.py", old="            yield _sse(err.body())\n", new="            yield _sse(err.body())\n            return\n",
        gates=(f"{RULE}::test_a_fatal_engine_error_mid_stream_is_an_error_frame_then_done_and_health_goes_503",),
    ),
    Mutation(
        id="server-abort-does-not-free",
        description="a client that goes away leaves its request running: its blocks stay in use until it finishes",
        file="vt/server/async_llm.py", old="                self.abort(request_id)  # queued after its add",
        new="                pass  # queued after its add",
        gates=(f"{RULE}::test_a_client_that_goes_away_frees_its_blocks_within_one_engine_step",
               f"{RULE}::test_a_non_streaming_client_that_goes_away_is_aborted_too",
               f"{RULE}::test_a_disconnect_frees_the_draft_state_too"),
    ),
    Mutation(
        id="server-usage-counts-one-sample",
        description="usage counts the first sample's tokens only, whatever n is",
        file="vt/server/app.py", old="else sum(len(c.token_ids) for out in outs for c in out.outputs)",
        new="else sum(len(out.outputs[0].token_ids) for out in outs)",
        gates=(f"{OAI}::test_n_samples_logprobs_stop_and_seed",),
    ),
    Mutation(
        id="server-stream-ignores-a-leaver-before-its-first-token",
        description="a streaming request waits for its first output without watching the client: one that left "
                    "while queued is prefilled for nobody",
        file="vt/server/app.py",
        old="        task = await self._while_connected(request, self._first())\n        if task is None:\n"
            "            return Response(status_code=499)\n        firsts = task.result()\n",
        new="        firsts = await self._first()\n",
        gates=(f"{LEAVING}::test_a_client_that_leaves_while_queued_is_aborted_and_never_prefilled[streamed]",),
        expect="the leaver was prefilled after its client had gone",
    ),
    Mutation(
        id="engine-thread-add-error-unhandled",
        description="an unexpected error while adding a request escapes the engine thread's command handling",
        file="vt/server/async_llm.py",
        old="            except Exception as e:  # noqa: BLE001 - the engine's bug, this request's alone: it fails, "
            "the rest run\n",
        new="            except ZeroDivisionError as e:\n",
        gates=(f"{FAULTS}::test_a_request_the_engine_fails_to_add_is_a_500_alone",),
        expect="assert 503 == 500",
    ),
    Mutation(
        id="internal-error-answered-before-logged",
        description="an endpoint's unexpected error goes to Starlette's handler: the 500 is answered first and "
                    "uvicorn logs the traceback after it, beside whatever the client does next",
        file="vt/server/app.py",
        old="            LOG.exception(\"internal error answering %s %s\", request.method, request.url.path)\n"
            "            return await _internal_error(request, e)\n",
        new="            raise\n",
        gates=(f"{FAULTS}::test_an_endpoints_unexpected_error_is_logged_before_its_500_is_answered",),
    ),
    Mutation(
        id="internal-error-mid-stream-cuts-the-connection",
        description="an unexpected error after a stream's 200 escapes the event generator: uvicorn cuts the "
                    "connection mid-stream, with no error frame and no [DONE]",
        file="vt/server/app.py",
        old="        except Exception as e:  # noqa: BLE001 - a bug of ours after the 200: logged, then one frame, as any "
            "error\n"
            "            LOG.exception(\"internal error streaming %s\", self.rid)\n"
            "            yield _sse(ApiError(500, f\"internal error: {type(e).__name__}: {e}\").body())\n",
        new="",
        gates=(f"{FAULTS}::test_an_unexpected_error_mid_stream_is_logged_then_one_error_frame_and_done",),
    ),
    Mutation(
        id="engine-thread-error-leaves-streams-waiting",
        description="an error in the engine thread's own handling ends the thread but fails no stream in flight",
        file="vt/server/async_llm.py",
        old="            self._die(e)  # every stream in flight ends with it, /health says so; none waits forever\n",
        new="            pass\n",
        gates=(f"{FAULTS}::test_an_error_in_the_engine_threads_handling_ends_every_stream_never_a_hang",),
        expect="the stream in flight ended: it did not wait forever",
    ),
    Mutation(
        id="abort-records-never-pruned",
        description="the table of aborts grows by one entry per disconnect, forever",
        file="vt/server/async_llm.py", old="        while len(self.aborts) > self.MAX_ABORT_RECORDS:\n",
        new="        while False:\n",
        gates=(f"{FAULTS}::test_the_record_of_aborts_keeps_the_newest_only",),
        expect="one per disconnect, never pruned",
    ),
    Mutation(
        id="abort-matches-ids-by-prefix",
        description="an abort of x takes every request whose id starts with x#, a user's own x#1 included",
        file="vt/engine/front/llm_engine.py",
        old="        samples = [r for r in self.requests.values() if (r.siblings or [r])[0].id == request_id]\n",
        new="        samples = [r for k, r in self.requests.items() if k == request_id or k.startswith(request_id + '#')]\n",
        gates=(f"{PAR}::test_an_abort_takes_the_requests_own_samples_never_an_id_that_merely_starts_like_them",),
        expect="the user's own x#1 is no sample of x",
    ),
    Mutation(
        id="bench-json-writes-infinity",
        description="--save-result writes an infinite request rate as Infinity, which no JSON parser takes",
        file="vt/server/bench.py",
        old='    rows = [asdict(r) | ({"request_rate": "inf"} if r.request_rate == float("inf") else {}) for r in results]\n'
            "    return json.dumps(rows, indent=2, allow_nan=False)\n",
        new="    return json.dumps([asdict(r) for r in results], indent=2)\n",
        gates=(f"{BENCH}::test_bench_serve_starts_its_own_server_and_reports_every_level",),
        expect="is not JSON",
    ),
    Mutation(
        id="bench-concurrency-unbounded",
        description="a level starts a worker per prompt: every request at once, whatever --max-concurrency says",
        file="vt/server/bench.py", old="    workers = max(1, min(concurrency, len(prompts)))\n",
        new="    workers = max(1, len(prompts))\n",
        gates=(f"{BENCH}::test_a_level_keeps_exactly_its_concurrency_in_flight",),
    ),
    Mutation(
        id="bench-concurrency-zero-accepted",
        description="vt bench serve takes --max-concurrency 0 and runs that level anyway, at one request in flight",
        file="vt/cli.py", old="    if min(levels) < 1:  # a level of 0 requests in flight would never send one\n",
        new="    if False:\n",
        gates=("tests/vt/test_cli.py::test_bad_input_is_one_typed_line_and_exit_2[bench-concurrency-0]",),
    ),
    Mutation(
        id="bench-keep-alive-as-long-as-the-servers",
        description="the benchmark's client keeps an idle connection as long as uvicorn does (httpx's default): a "
                    "request sent as the server closes it fails before any response",
        file="vt/server/bench.py", old="KEEPALIVE_S = 2.0\n", new="KEEPALIVE_S = 5.0\n",
        gates=(f"{BENCH}::test_the_client_drops_an_idle_connection_before_vts_server_would",),
    ),
    Mutation(
        id="bench-no-combined-table",
        description="vt bench serve prints each level's table but never all levels together",
        file="vt/cli.py", old="        print(bench.summary(results), flush=True)\n", new="",
        gates=(f"{BENCH}::test_bench_serve_starts_its_own_server_and_reports_every_level",),
        expect="every level in one combined table",
    ),
    Mutation(
        id="bench-plot-without-tpot",
        description="the benchmark's plot has throughput and TTFT panels but no TPOT",
        file="vt/server/bench.py",
        old='              ("ms", "TPOT", [("median", col("median_tpot_ms")), ("p99", col("p99_tpot_ms"))]))\n',
        new=")\n",
        gates=(f"{BENCH_PLOT}::test_the_plot_has_a_title_and_a_tpot_panel",),
    ),
    Mutation(
        id="unsupported-field-accepted",
        description="a field vt does not implement (suffix, tools on completions, chat's echo, vLLM's priority) is "
                    "accepted at any value and silently ignored",
        file="vt/server/protocol.py", old="        if name in NO_OP and value in NO_OP[name]:\n",
        new="        if name in NO_OP:\n",
        gates=(*(f"{REFUSALS}::test_a_completion_field_vt_would_ignore_is_a_400_naming_it[{f}]"
                 for f in ("suffix", "tools")),
               *(f"{REFUSALS}::test_a_chat_field_vt_would_ignore_is_a_400_naming_it[{f}]"
                 for f in ("echo", "priority"))),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="unknown-field-ignored",
        description="a field vt does not know at all (a typo such as temprature) is dropped without a word",
        file="vt/server/protocol.py",
        old='        what = "is not supported by vt" if name in NO_OP or name in KNOWN_UNSUPPORTED else "is not a field vt '
            'knows"\n',
        new="        if name not in NO_OP and name not in KNOWN_UNSUPPORTED:\n            continue\n"
            '        what = "is not supported by vt"\n',
        gates=(f"{REFUSALS}::test_a_completion_field_vt_would_ignore_is_a_400_naming_it[temprature]",
               f"{REFUSALS}::test_a_chat_field_vt_would_ignore_is_a_400_naming_it[prompt]"),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="json-depth-limit-off",
        description="a body nested past the limit goes to the JSON parser: 200 levels parse into a confusing "
                    "prompt error, 100,000 recurse past Python's limit",
        file="vt/server/app.py", old="        if depth > MAX_JSON_DEPTH:\n", new="        if False:\n",
        gates=tuple(f"{REFUSALS}::test_a_body_nested_past_the_limit_is_a_400_never_a_500[{c}]"
                    for c in ("deep", "200-kb-of-brackets")),
    ),
    Mutation(
        id="soak-arguments-unchecked",
        description="the soak runs for a negative or NaN time, or with no clients, and reports a meaningless result",
        file="vt/server/soak.py", old="    if not args.seconds >= 1 or args.clients < 1:  # nan fails the first test too\n",
        new="    if False:\n",
        gates=("tests/server/test_soak_arguments.py::test_the_soak_refuses_a_run_of_no_time_or_no_clients_in_one_line",),
        expect="DID NOT RAISE",
    ),
]
# Found by probing the server with hostile bodies (session 23): each refused with a 400, nothing left behind.
ENGINE_PROCESS = "tests/server/test_engine_process.py"
ENTRIES += [
    Mutation(
        id="server-body-misses-the-digit-limit",
        description="an integer literal of 4,300+ digits (json.loads' ValueError, not a JSONDecodeError) is a 500",
        file="vt/server/app.py",
        old="        except (ValueError, RecursionError) as e:",
        new="        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:",
        gates=tuple(f"{REFUSALS}::test_an_integer_past_pythons_digit_limit_is_a_400_never_a_500[{r}]"
                    for r in ("completions", "chat", "detokenize")),
    ),
    Mutation(
        id="server-takes-a-lone-surrogate",
        description="a lone UTF-16 surrogate in a body's string reaches the engine and the tokenizer: a 500",
        file="vt/server/app.py",
        old="        if where is not None:",
        new="        if False:",
        gates=tuple(f"{REFUSALS}::test_a_lone_surrogate_is_a_400_naming_its_field_and_leaves_nothing_behind[{c}]"
                    for c in ("stop", "prompt", "chat-content", "tokenize")),
    ),
    Mutation(
        id="async-llm-keeps-a-refused-add",
        description="a request the engine-process path refuses before queueing its add leaves its stream and "
                    "pending add in the server's tables",
        file="vt/server/async_llm.py",
        old="        except BaseException:  # refused before it was queued: nothing of it may stay behind\n"
            "            self._streams.pop(request_id, None)\n            self._adds.pop(request_id, None)\n",
        new="        except BaseException:  # refused before it was queued: nothing of it may stay behind\n",
        gates=(f"{ENGINE_PROCESS}::test_a_request_refused_before_its_add_is_queued_leaves_nothing_behind",),
    ),
]
SHAPES = f"{REFUSALS}::test_a_value_vt_would_misread_or_ignore_is_a_400_naming_its_field"
ENTRIES += [
    Mutation(
        id="stream-options-take-any-key",
        description="an unknown stream option is silently ignored",
        file="vt/server/protocol.py",
        old="        if key not in STREAM_OPTIONS:\n",
        new="        if False:\n",
        gates=(f"{SHAPES}[stream-option-unknown]",),
    ),
    Mutation(
        id="stream-options-read-any-value-as-a-flag",
        description="stream_options.include_usage \"no\" reads as true",
        file="vt/server/protocol.py",
        old="        if value is not None and not isinstance(value, bool):\n",
        new="        if False:\n",
        gates=(f"{SHAPES}[stream-option-not-bool]",),
    ),
    Mutation(
        id="chat-max-tokens-lost-beside-max-completion-tokens",
        description="a chat request's max_tokens beside max_completion_tokens is never read, ill-typed or not",
        file="vt/server/protocol.py",
        old="    if name == \"max_completion_tokens\":  # the older name beside it",
        new="    if False:  # the older name beside it",
        gates=(f"{SHAPES}[max-tokens-ill-typed]", f"{SHAPES}[max-tokens-conflict]"),
    ),
    Mutation(
        id="chat-message-fields-dropped",
        description="a message's unknown key is dropped without a word",
        file="vt/engine/front/chat.py",
        old="    if extra:  # a key not passed",
        new="    if False:  # a key not passed",
        gates=(f"{SHAPES}[message-unknown-key]",),
    ),
    Mutation(
        id="server-min-tokens-past-the-default-reaches-the-engine",
        description="a min_tokens past the default max_tokens reaches the engine, whose refusal is then a 500",
        file="vt/server/app.py",
        old="                parsed.params.resolve(self.llm.engine.generation_config)\n",
        new="                pass\n",
        gates=(f"{SHAPES}[min-tokens-past-the-default]",),
    ),
    Mutation(
        id="server-blames-the-prompt-for-token-ids",
        description="ids outside the vocabulary in logit_bias, allowed_token_ids or stop_token_ids are refused with "
                    "param prompt",
        file="vt/server/app.py",
        old="    return opening_field(message, REQUEST_FIELDS, \"prompt\")",
        new="    return \"prompt\"",
        gates=tuple(f"{SHAPES}[{c}-outside-the-vocabulary]" for c in ("logit-bias", "allowed-ids", "stop-ids")),
    ),
    Mutation(
        id="min-tokens-capped-by-the-default-max-tokens",
        description="min_tokens past the default max_tokens is silently capped (16 tokens, finish reason length)",
        file="vt/engine/sample/params.py",
        old="        if self.min_tokens > max_tokens:  # checked here too",
        new="        if False:  # checked here too",
        gates=("tests/engine/test_offline_api.py::test_min_tokens_past_the_default_max_tokens_is_a_typed_error",),
    ),
]
ENTRIES += [
    Mutation(
        id="bench-request-rate-takes-nan",
        description="`vt bench serve --request-rate nan` runs, as if the rate were infinite",
        file="vt/cli.py",
        old="    if not args.request_rate > 0:  # NaN too",
        new="    if args.request_rate <= 0:",
        gates=("tests/vt/test_cli.py::test_bad_input_is_one_typed_line_and_exit_2[bench-rate-nan]",),
    ),
    Mutation(
        id="sampling-params-read-a-string-as-a-flag",
        description="SamplingParams(ignore_eos=\"no\") is taken, and reads as True",
        file="vt/engine/sample/params.py",
        old="            if not isinstance(getattr(self, name), bool):  # \"no\" would read as True",
        new="            if False:",
        gates=tuple(f"tests/engine/test_bad_input.py::test_a_sampling_param_of_the_wrong_type_is_a_config_error_"
                    f"naming_it[{f}]" for f in ("ignore_eos", "include_stop_str_in_output")),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="sampling-params-take-n-none",
        description="SamplingParams(n=None) is taken, to fail inside generate with a TypeError",
        file="vt/engine/sample/params.py",
        old="            if (v is not None or name == \"n\") and",
        new="            if v is not None and",
        gates=("tests/engine/test_bad_input.py::test_a_sampling_param_of_the_wrong_type_is_a_config_error_naming_it[n]",),
        expect="DID NOT RAISE",
    ),
]
ENTRIES += [
    Mutation(
        id="server-tokenizes-a-long-prompt-on-the-event-loop",
        description="a prompt of megabytes is tokenized on the event loop, holding every other request for seconds",
        file="vt/server/app.py",
        old="    if sum(len(t) for t in texts if isinstance(t, str)) > OFF_LOOP_CHARS:",
        new="    if False:",
        gates=tuple(f"{REFUSALS}::test_a_long_prompt_is_tokenized_off_the_event_loop_with_the_gil_released[{r}]"
                    for r in ("completions", "chat", "tokenize", "tokenize-messages")),
        expect="was tokenized on the loop",
    ),
]
ENTRIES += [
    Mutation(
        id="tokenizer-routes-ignore-unknown-fields",
        description="/tokenize and /detokenize silently ignore a field they do not read",
        file="vt/server/app.py",
        old="    unknown = sorted(set(body) - fields)\n",
        new="    unknown: list[str] = []\n",
        gates=(f"{REFUSALS}::test_the_tokenizer_routes_refuse_what_they_do_not_read[tokenize-unknown]",
               f"{REFUSALS}::test_the_tokenizer_routes_refuse_what_they_do_not_read[detokenize-unknown]"),
    ),
]
ENTRIES += [
    Mutation(
        id="cli-blames-max-tokens-for-a-negative-length",
        description="`vt generate --max-model-len -1` is answered as a --max-tokens problem",
        file="vt/cli.py",
        old="    if args.max_model_len and args.max_model_len > 0 and args.max_tokens > args.max_model_len:",
        new="    if args.max_model_len and args.max_tokens > args.max_model_len:",
        gates=("tests/vt/test_cli.py::test_bad_input_is_one_typed_line_and_exit_2[negative-max-model-len]",),
    ),
]
ENTRIES += [
    Mutation(
        id="logit-bias-keys-collapse",
        description="logit_bias keys \"5\" and \"05\" silently collapse into one bias (the last one read)",
        file="vt/server/protocol.py",
        old="        if token in out:  # \"05\" beside \"5\": one token, two biases\n",
        new="        if False:\n",
        gates=(f"{REFUSALS}::test_a_bad_logit_bias_is_a_400_naming_it[one-token-twice]",),
    ),
]

# Session 33's bad-input probe: each fix's gate goes red without it.
PROBE = "tests/engine"
ENTRIES += [
    Mutation(
        id="engine-core-dies-on-a-group-sigterm",
        description="the engine core process keeps SIGTERM's default: a SIGTERM to the server's process group kills it "
                    "before the server has drained, which then stops as if the engine had failed (exit 1)",
        file="vt/engine/core/proc.py", old="    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n", new="",
        gates=("tests/server/test_server_load.py::test_sigterm_ends_the_stream_in_flight_properly_then_exits_cleanly[group]",),
    ),
    Mutation(
        id="repetition-penalty-floor-at-zero",
        description="SamplingParams takes a repetition_penalty anywhere in (0, 100]: 1e-38 overflows a logit and the "
                    "request fails in the engine (a 500 over HTTP) instead of being refused",
        file="vt/engine/sample/params.py", old='        for name, lo, hi in (("repetition_penalty", 0.01, 100.0), '
                                               '("presence_penalty", -2.0, 2.0),\n',
        new='        for name, lo, hi in (("repetition_penalty", 0.0, 100.0), ("presence_penalty", -2.0, 2.0),\n',
        gates=(f"{PROBE}/test_penalties.py::test_bad_penalties_are_refused_by_name",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="min-tokens-over-banned-allowed-ids-runs",
        description="a request whose allowed_token_ids are all held off by min_tokens (stop ids, EOS) is queued: its "
                    "first draw finds no token and the engine fails it (a 500 over HTTP)",
        file="vt/engine/front/llm_engine.py",
        old="        if resolved.min_tokens and allowed is not None and set(allowed) <= banned:\n",
        new="        if False:\n",
        gates=(f"{PROBE}/test_offline_api.py::test_min_tokens_over_only_banned_allowed_tokens_is_refused_before_it_"
               "runs",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="chat-template-runtime-error-escapes",
        description="render turns only jinja's TemplateError into a RequestError: a template's own 1/0 escapes bare "
                    "(LLM.chat) and /tokenize answers 500",
        file="vt/engine/front/chat.py", old="    except Exception as e:  # noqa: BLE001 - the template's own code failed "
                                            "on these messages (1/0, a bad index):\n",
        new="    except () as e:  # noqa: BLE001\n",
        gates=("tests/server/test_chat_template.py::test_a_template_that_fails_on_a_conversation_is_a_400_on_every_"
               "route",),
        expect="ZeroDivisionError",
    ),
    Mutation(
        id="server-takes-any-user",
        description="the server takes a `user` of any JSON type in silence (OpenAI's end-user id is a string)",
        file="vt/server/protocol.py",
        old="        if name == \"user\" and value is not None and not isinstance(value, str):  # OpenAI's end-user "
            "id: a string\n",
        new="        if False:\n",
        gates=tuple(f"{REFUSALS}::test_a_{w}_field_vt_would_ignore_is_a_400_naming_it[user]"
                    for w in ("completion", "chat")),
        expect="BadRequestError",
    ),
    Mutation(
        id="kv-cache-gib-unchecked-against-memory",
        description="kv_cache_gib is not checked against the memory available: 100,000 GiB on the CPU starts sizing "
                    "(the OOM killer ended the engine process)",
        file="vt/engine/front/llm_engine.py",
        old="            if cfg.kv_cache_gib is not None and avail is not None:\n",
        new="            if False:\n",
        gates=(f"{PROBE}/test_memory_check.py::test_a_kv_cache_gib_past_the_hosts_memory_is_refused_before_anything_"
               "is_allocated",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="kv-gib-check-ignores-the-weights",
        description="the kv_cache_gib check compares the KV cache alone with the memory available, not with the "
                    "weights beside it",
        file="vt/engine/memory.py", old="    if weights + need <= available:\n", new="    if need <= available:\n",
        gates=(f"{PROBE}/test_memory_check.py::test_a_kv_cache_gib_past_the_hosts_memory_is_refused_before_anything_"
               "is_allocated",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="bench-save-result-checked-after-the-run",
        description="vt bench serve checks --save-result's folder only when it writes, after every level ran: a "
                    "traceback, and the run's rows lost",
        file="vt/cli.py", old="    if args.save_result:  # checked before the run: a path found bad at the end lost every "
                              "level's rows\n",
        new="    if False:\n",
        gates=("tests/vt/test_cli.py::test_bad_input_is_one_typed_line_and_exit_2[save-result-nowhere]",),
    ),
    Mutation(
        id="bench-base-url-takes-engine-flags",
        description="vt bench serve against a running server takes engine flags (--num-blocks, --dtype) and ignores "
                    "them in silence",
        file="vt/cli.py", old="        if given:\n", new="        if False:\n",
        gates=("tests/vt/test_cli.py::test_bad_input_is_one_typed_line_and_exit_2[bench-url-with-engine-flags]",),
    ),
    Mutation(
        id="bench-base-url-takes-engine-flags-typed-at-their-defaults",
        description="vt bench serve against a running server refuses an engine flag only when its value differs: "
                    "-tp=1 or --enable-prefix-caching typed beside --base-url pass in silence",
        file="vt/cli.py", old='tok == o or tok.startswith(o + "=") for tok in args.given_argv',
        new='False for tok in args.given_argv',
        gates=("tests/vt/test_cli.py::test_bad_input_is_one_typed_line_and_exit_2"
               "[bench-url-with-engine-flags-at-their-defaults]",),
    ),
    Mutation(
        id="draft-count-without-a-draft-dropped",
        description="--num-speculative-tokens without --speculative-model is dropped in silence",
        file="vt/cli.py", old='    elif getattr(args, "num_speculative_tokens", 0):  # it means nothing without a draft: '
                              'said, not dropped\n',
        new="    elif False:\n",
        gates=tuple(f"tests/vt/test_cli.py::test_bad_input_is_one_typed_line_and_exit_2[{i}]"
                    for i in ("draft-count-without-draft", "negative-draft-count")),
    ),
    Mutation(
        id="chat-top-logprobs-refusal-names-logprobs",
        description="chat's top_logprobs refusal says \"logprobs\" in its message while its param says top_logprobs",
        file="vt/server/protocol.py", old='        raise bad(f"{name}: must be in [0, {MAX_LOGPROBS}], got {logprobs}", name)\n',
        new='        raise bad(f"logprobs: must be in [0, {MAX_LOGPROBS}], got {logprobs}", name)\n',
        gates=(f"{REFUSALS}::test_chats_top_logprobs_out_of_range_names_itself",),
        expect="startswith",
    ),
    Mutation(
        id="engine-config-takes-any-enforce-eager",
        description="EngineConfig takes enforce_eager of any type: \"no\" is truthy, so the engine runs eager",
        file="vt/engine/config.py",
        old='        _need(isinstance(self.enforce_eager, bool), "enforce_eager", self.enforce_eager, "True or False")\n',
        new="",
        gates=(f"{PROBE}/test_bad_input.py::test_bad_engine_config_names_the_field[kw7-enforce_eager]",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="engine-config-compares-a-string-count",
        description="EngineConfig compares max_num_seqs with ints before checking it is one: \"4\" raises a bare "
                    "TypeError instead of a ConfigError naming it",
        file="vt/engine/config.py",
        old="        _need(_is_int(self.max_num_seqs) and 1 <= self.max_num_seqs <= 1024, \"max_num_seqs\", "
            "self.max_num_seqs,\n",
        new="        _need(1 <= self.max_num_seqs <= 1024, \"max_num_seqs\", self.max_num_seqs,\n",
        gates=(f"{PROBE}/test_bad_input.py::test_bad_engine_config_names_the_field[kw4-max_num_seqs]",),
        expect="TypeError",
    ),
]
# Review of the server (fix-server): each defect's gate goes red with it back.
ENTRIES += [
    Mutation(
        id="server-min-tokens-past-the-room-served-short",
        description="without max_tokens, a min_tokens past what max_model_len leaves after the prompt is served: a "
                    "200 with fewer tokens than min_tokens (vLLM caps the default first, then refuses)",
        file="vt/server/app.py",
        old="        if parsed.max_tokens is None and parsed.params.min_tokens > room:\n",
        new="        if False:\n",
        gates=(f"{REFUSALS}::test_min_tokens_past_what_the_context_leaves_is_a_400_when_max_tokens_is_not_given",),
        expect="assert (200 == 400)",
    ),
]
ENTRIES += [
    Mutation(
        id="tokenize-reads-a-prompt-and-messages-at-once",
        description="/tokenize takes one field set for a prompt and for messages: a prompt beside messages is "
                    "dropped, add_generation_prompt beside a prompt means nothing",
        file="vt/server/app.py",
        old="        refuse_unknown(body, TOKENIZE_CHAT_FIELDS if chat else TOKENIZE_PROMPT_FIELDS,\n",
        new="        refuse_unknown(body, TOKENIZE_CHAT_FIELDS | TOKENIZE_PROMPT_FIELDS,\n",
        gates=tuple(f"{REFUSALS}::test_the_tokenizer_routes_refuse_what_they_do_not_read[{c}]"
                    for c in ("tokenize-a-prompt-beside-messages", "tokenize-a-chat-flag-beside-a-prompt")),
        expect="assert (200 == 400)",
    ),
]
ENTRIES += [
    Mutation(
        id="health-says-the-engine-stopped-twice",
        description="/health and a late request after the engine process died say \"the engine stopped: the engine "
                    "stopped: ...\"",
        file="vt/server/async_llm.py",
        old='        return why if why.startswith("the engine stopped") else f"the engine stopped: {why}"\n',
        new='        return f"the engine stopped: {why}"\n',
        gates=(f"{ENGINE_PROCESS}::test_a_dead_engine_process_is_said_once_by_health_and_by_a_late_request",),
        expect="assert 2 == 1",
    ),
    Mutation(
        id="spec-penalty-refusal-blames-the-prompt",
        description="a penalty refused under speculative decoding names no field first: the 400's param is prompt",
        file="vt/engine/front/llm_engine.py",
        old='            raise RequestError(f"{name}={value}: penalties are not supported with speculative decoding")\n',
        new='            raise RequestError("repetition/presence/frequency penalties are not supported with speculative "\n'
            '                               "decoding")\n',
        gates=tuple(f"{REFUSALS}::test_a_penalty_under_speculative_decoding_is_refused_naming_the_penalty[{p}]"
                    for p in ("repetition_penalty", "frequency_penalty")),
        expect="== 'repetition_penalty'",
    ),
]
ENTRIES += [
    Mutation(
        id="server-streams-a-requests-prompts-one-after-another",
        description="a streamed request of several prompts sends one prompt's frames to its end before the next's "
                    "(vLLM merges the prompts' generators)",
        file="vt/server/app.py",
        old="            async with contextlib.aclosing(merged(self.gens)) as outs:  # closed before close() closes the "
            "gens\n                async for i, out in outs:\n",
        new="            for i, g in enumerate(self.gens):\n                async for out in g:\n",
        gates=(f"{OAI}::test_a_stream_of_several_prompts_interleaves_their_choices_as_produced",),
        expect="choice 1 waited for choice 0 to end",
    ),
]
ENTRIES += [
    Mutation(
        id="chat-text-parts-joined-with-nothing",
        description="a message's text parts are joined with nothing (\"Hellothere\"), not with \"\\n\" as vLLM joins them",
        file="vt/engine/front/chat.py", old='    return "\\n".join(part["text"] for part in content)\n',
        new='    return "".join(part["text"] for part in content)\n',
        gates=(f"{REFUSALS}::test_chat_text_parts_are_joined_with_newlines_as_vllm_joins_them",
               "tests/engine/test_chat_messages.py::test_chat_renders_text_parts_as_their_text_joined_with_newlines"),
    ),
    Mutation(
        id="chat-text-part-keys-unchecked",
        description="a key of a text part other than type and text is dropped without a word",
        file="vt/engine/front/chat.py", old="        if extra:\n            raise RequestError(f\"{where}[{j}].{extra[0]}:",
        new="        if False:\n            raise RequestError(f\"{where}[{j}].{extra[0]}:",
        gates=(f"{REFUSALS}::test_a_content_part_vt_would_not_read_is_a_400_naming_where_it_sits"
               f"[unknown-key-in-a-text-part]",
               "tests/engine/test_chat_messages.py::test_chat_refuses_a_message_it_would_misrender_naming_where"
               "[unknown-part-key]"),
    ),
    Mutation(
        id="llm-chat-renders-messages-unparsed",
        description="LLM.chat hands the messages to the template as given: a content list renders as its Python repr, "
                    "content None as \"None\", extra keys pass in silence",
        file="vt/engine/front/llm.py",
        old="        texts = [render(template, parse_messages(c, TOOL_FIELDS), self.engine.special_tokens, "
            "add_generation_prompt,\n",
        new="        texts = [render(template, c, self.engine.special_tokens, add_generation_prompt,\n",
        gates=("tests/engine/test_chat_messages.py::test_chat_renders_text_parts_as_their_text_joined_with_newlines",
               *(f"tests/engine/test_chat_messages.py::test_chat_refuses_a_message_it_would_misrender_naming_where[{c}]"
                 for c in ("image-part", "content-none", "unknown-message-key", "unknown-part-key"))),
    ),
]
ENTRIES += [
    Mutation(
        id="tokenizer-holds-the-gil",
        description="prompt text is encoded with tokenizers' encode, which holds the GIL throughout: a prompt of "
                    "megabytes on a worker thread still freezes the event loop (every stream, /health) for seconds",
        file="vt/engine/front/llm_engine.py",
        old="    return tokenizer.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids\n",
        new="    return tokenizer.encode(text, add_special_tokens=add_special_tokens).ids\n",
        gates=tuple(f"{REFUSALS}::test_a_long_prompt_is_tokenized_off_the_event_loop_with_the_gil_released[{r}]"
                    for r in ("completions", "chat", "tokenize", "tokenize-messages")),
        expect="holding the GIL",
    ),
    Mutation(
        id="chat-template-file-not-utf8-raw",
        description="a --chat-template file that is not UTF-8 escapes as a raw UnicodeDecodeError (exit 1, a "
                    "traceback), not one typed line",
        file="vt/engine/front/chat.py", old="        except UnicodeDecodeError as e:\n",
        new="        except ZeroDivisionError as e:\n",
        gates=("tests/server/test_chat_template.py::test_a_template_file_that_is_not_utf8_is_one_line_at_start_up",),
    ),
    Mutation(
        id="shutdown-signal-leaves-the-streams-running",
        description="with --shutdown-timeout 0 (the default), a SIGTERM leaves the requests in flight running: uvicorn "
                    "waits on them and vt serve answers the signal only when they end",
        file="vt/server/app.py", old="            self.loop.call_soon(self.llm.shutdown, why)\n",
        new="            pass\n",
        gates=tuple(f"{SHUTDOWN}::test_by_default_a_signal_fails_the_stream_in_flight_at_once_then_the_server_exits"
                    f"[{m}]" for m in ("engine-process", "engine-thread")),
    ),
    Mutation(
        id="shutdown-second-signal-waits-out-the-drain",
        description="a second SIGINT during a drain is taken as the first again: Ctrl-C twice waits out "
                    "--shutdown-timeout",
        file="vt/server/serve.py", old="                on_signal(sig, self.signals > 1)\n",
        new="                on_signal(sig, False)\n",
        gates=tuple(f"{SHUTDOWN}::test_a_second_signal_ends_a_drain_at_once_with_no_engine_left[{m}]"
                    for m in ("engine-process", "engine-thread")),
        expect="the second signal failed the stream at once",
    ),
    Mutation(
        id="shutdown-drain-ignores-its-timeout",
        description="--shutdown-timeout is ignored: a SIGTERM fails the requests in flight at once, never a drain",
        file="vt/server/app.py", old="        if now or timeout_s <= 0:\n", new="        if True:\n",
        gates=(f"{SHUTDOWN}::test_a_drain_lets_the_stream_in_flight_finish",),
    ),
    Mutation(
        id="shutdown-drain-serves-new-requests",
        description="while the server drains, a new completion is served, not refused with a 503",
        file="vt/server/app.py",
        old="        if (refused := self._refusal_while_draining()) is not None:\n            return refused\n"
            "        try:\n",
        new="        try:\n",
        gates=(f"{SHUTDOWN}::test_while_draining_new_requests_and_health_are_503s_and_the_stream_in_flight_runs_on",),
    ),
    Mutation(
        id="request-priority-taken-at-any-value",
        description="a request's priority is taken at any value and served first come, first served, in silence",
        file="vt/server/protocol.py", old='         "priority": (0,)}', new='         "priority": (0, 1, -1)}',
        gates=("tests/server/test_refusals.py::test_a_completion_field_vt_would_ignore_is_a_400_naming_it[priority]",
               "tests/server/test_refusals.py::test_a_chat_field_vt_would_ignore_is_a_400_naming_it[priority]"),
        expect="DID NOT RAISE",
    ),
]
