"""Serving at the H200's speed (issues 26 and 28, session 5): the benchmark's server in its own process with every
engine flag, a lagging stream reading merged outputs, the eager tail of a prefill warmed at start-up, captures
closed to the garbage collector, and the profile run's eager step past the largest bucket."""

from __future__ import annotations

from mutations.model import Mutation
from mutations.registry.gates import SCOPE

BENCH = "tests/server/test_bench_server.py"
MERGE = "tests/server/test_output_merging.py"
FIRST_LAUNCH = "tests/engine/test_startup_first_launch.py"  # apart from test_startup_capture.py
PROFILE_RUN = "tests/engine/test_profile_run.py"
VLLM_METRICS = "tests/server/test_vllm_metrics.py"
HISTS = f"{VLLM_METRICS}::test_the_request_histograms_move_by_what_the_requests_did"  # apart from test_memory_check.py: 4 s its mutants need not run

ENTRIES: list[Mutation] = [
    Mutation(
        id="bench-server-drops-a-negated-flag",
        description="vt bench serve passes a --no-... engine flag to the server it starts as nothing: the server "
                    "runs with prefix caching on where the benchmark asked for it off",
        file="vt/cli.py", old='            argv.append(flag if value else "--no-" + flag[2:])\n',
        new="            argv += [flag] if value else []\n",
        gates=(f"{BENCH}::test_bench_serve_passes_every_engine_flag_to_the_server_it_starts",),
    ),
    Mutation(
        id="server-start-error-loses-the-childs-reason",
        description="a server that exits before it listens is reported without its own error line",
        file="vt/server/serve.py",
        old='                why = last[-1].removeprefix("vt: error: ") if last else "no error line"\n',
        new='                why = "no error line"\n',
        gates=(f"{BENCH}::test_a_server_that_cannot_start_is_one_typed_line_and_exit_2",),
    ),
    Mutation(
        id="stream-keeps-the-older-output",
        description="a stream whose consumer has not taken its last output keeps that one and drops the newer: "
                    "a lagging consumer reads stale outputs and can miss the finished one",
        file="vt/server/async_llm.py", old="        else:\n            stream.latest = item\n",
        new="        elif stream.latest is None:\n            stream.latest = item\n",
        gates=(f"{MERGE}::test_a_lagging_consumer_reads_merged_outputs_and_loses_nothing",
               f"{MERGE}::test_outputs_delivered_while_the_consumer_is_away_leave_only_the_newest"),
    ),
    Mutation(
        id="startup-skips-the-eager-tail-warm-up",
        description="start-up captures the graphs but never runs a prefill's eager tail: the first request "
                    "compiles the LM head's row gather (134 ms on the H200)",
        file="vt/engine/worker/runner.py", old="        if n:\n            self._warm_eager()\n", new="",
        gates=(f"{FIRST_LAUNCH}::test_the_first_request_launches_no_kernel_start_up_did_not_run",),
    ),
    Mutation(
        id="capture-lets-the-collector-run",
        description="a capture runs with the garbage collector on: a dead object's finalizer frees device "
                    "memory inside it and invalidates the capture",
        file="vt/capture.py", old="        gc.disable()\n", new="",
        gates=(f"{SCOPE}::test_no_garbage_collection_frees_device_memory_inside_a_capture",),
    ),
    Mutation(
        id="cpu-free-inside-a-capture-allowed",
        description="the CPU backend lets a driver free run inside a global capture, which CUDA refuses",
        file="backends/cpu.py",
        old='        self._refuse_if_forbidden("driver free")  # cudaFree is an unsafe call: it invalidates a global '
            'capture\n',
        new="",
        gates=(f"{SCOPE}::test_a_driver_free_inside_a_global_capture_invalidates_it",),
    ),
    Mutation(
        id="profile-run-skips-the-eager-step",
        description="the profile run behind --gpu-memory-utilization runs the largest prefill bucket only, not "
                    "the larger eager step max_num_batched_tokens allows: the KV cache is sized from too small "
                    "a peak",
        file="vt/engine/worker/profile.py",
        old="        driver.dummy_eager_prefill(max_num_batched_tokens)\n", new="        pass\n",
        gates=(f"{PROFILE_RUN}::test_the_profile_run_keeps_the_largest_steps_temporaries_and_frees_its_kv",),
    ),
]

PROC = "tests/server/test_engine_process.py"
PROC_DEATH = "tests/server/test_engine_process_death.py"
ENTRIES += [
    Mutation(
        id="engine-process-text-only-appends",
        description="the front appends each text delta to what it has, ignoring how much of it the core keeps: a "
                    "text the core cut (a stop string) comes out wrong",
        file="vt/engine/core/proc.py", old="            s.text = s.text[:keep] + add\n",
        new="            s.text = s.text + add\n",
        gates=(f"{PROC}::test_the_engine_process_answers_as_the_engine_thread_does",),
    ),
    Mutation(
        id="engine-process-resends-a-finished-samples-tokens",
        description="the core forgets what it sent of a sample once that sample finishes, while its siblings run on: "
                    "every later step sends the finished sample's tokens again",
        file="vt/engine/core/proc.py", old="        sent[0], sent[1] = len(s.output_ids), text\n",
        new="        sent[0], sent[1] = len(s.output_ids), text\n        if s.is_finished:\n"
            "            self.sent.pop(s.id, None)\n",
        gates=(f"{PROC}::test_the_engine_process_answers_as_the_engine_thread_does",),
    ),
    Mutation(
        id="engine-process-death-unnoticed",
        description="the front's reader stops quietly when the engine process's pipe closes: the requests in flight "
                    "wait forever and vt serve keeps running without an engine",
        file="vt/engine/core/proc.py",
        old='            o.die(EngineDeadError(f"the engine stopped: its process exited with code {self.proc.exitcode}"))\n',
        new="            return\n",
        gates=(f"{PROC_DEATH}::test_a_killed_engine_process_fails_the_stream_and_vt_serve_exits_1",),
    ),
    Mutation(
        id="engine-process-config-not-settled",
        description="the front keeps the configuration it was given, not the one the engine core settled: "
                    "max_model_len 0 (the checkpoint's) is what /v1/models says",
        file="vt/engine/core/proc.py", old="        self.cfg = replace(cfg, **msg[1])\n", new="        self.cfg = cfg\n",
        gates=(f"{PROC}::test_the_settled_configuration_comes_back_from_the_engine_process",),
    ),
    Mutation(
        id="failed-server-build-leaves-its-engine-running",
        description="make_server lets a failure building the app propagate with the engine's process or thread still "
                    "running: `vt serve` prints the error and never exits",
        file="vt/server/serve.py", old='        llm.shutdown("the server could not be built")\n', new="",
        # the engine thread is a daemon: only the engine process keeps the interpreter waiting
        gates=(f"{PROC}::test_a_server_that_fails_to_build_stops_its_engine_and_the_interpreter_exits[process]",),
    ),
]

OFFLINE = "tests/engine/test_offline_engine_process.py"
OFFLINE_DEATH = "tests/engine/test_offline_engine_death.py"  # apart: each mutant starts its gates' cores only
PE = "vt/engine/front/process_engine.py"

ENTRIES += [
    Mutation(
        id="offline-core-outputs-in-arrival-order",
        description="the offline LLM through the engine process returns its outputs in the order they finished, "
                    "not the prompts' order",
        file=PE, old="            return [self._outputs[r] for r in rids]",
        new="            return sorted((self._outputs[r] for r in rids), key=lambda o: o.metrics.finished_time or 0)",
        gates=(f"{OFFLINE}::test_through_the_engine_process_the_outputs_are_the_in_process_engines",),
    ),
    Mutation(
        id="offline-batch-sent-one-request-at-a-time",
        description="the offline LLM sends a batch's requests to the engine process one message each: the core may "
                    "step between them, so its first batch (and a seeded sample's rounding) differs from in-process",
        file="vt/engine/core/proc.py", old='        self.send(("batch", msgs))',
        new="        for msg in msgs:\n            self.send(msg)",
        gates=(f"{OFFLINE}::test_an_offline_batch_reaches_the_core_in_one_message",),
    ),
    Mutation(
        id="offline-core-refusal-dropped",
        description="a prompt the engine process refuses is dropped silently: the batch waits for its output forever",
        file=PE, old="            if refused is not None:", new="            if False:",
        gates=(f"{OFFLINE}::test_a_refused_prompt_refuses_its_batch_and_loses_nothing_after_it",),
    ),
    Mutation(
        id="offline-core-death-unnoticed",
        description="the offline LLM never checks that its engine process is alive: a killed core hangs generate",
        file=PE, old="    def _check_alive(self) -> None:\n", new="    def _check_alive(self) -> None:\n        return\n",
        gates=(f"{OFFLINE_DEATH}::test_a_core_that_dies_fails_the_batch_instead_of_a_hang",),
    ),
]

ENTRIES += [
    Mutation(
        id="core-start-death-untyped",
        description="an engine core process that dies while starting surfaces as a bare RuntimeError, "
                    "with no hint of the spawn's main guard (vt serve would print a traceback)",
        file="vt/engine/core/proc.py", old="            raise WorkerDied(f\"the engine core process exited with code",
        new="            raise RuntimeError(f\"the engine core process exited with code",
        gates=(f"{OFFLINE_DEATH}::test_a_core_that_dies_while_starting_is_a_typed_error_that_names_the_main_guard",),
    ),
    Mutation(
        id="metrics-queue-time-ends-at-the-first-token",
        description="vllm:request_queue_time_seconds runs from arrival to the first token (the TTFT), not to the "
                    "first schedule: a dashboard reads the prefill as queueing",
        file="vt/server/metrics.py", old='     "arrival", "scheduled_time"),\n', new='     "arrival", "first_token_time"),\n',
        gates=(HISTS,),
    ),
    Mutation(
        id="metrics-prompt-histogram-observes-the-output",
        description="vllm:request_prompt_tokens observes each request's generated tokens, not its prompt's",
        file="vt/server/metrics.py", old="        self.vllm_prompt_hist.observe(req.num_prompt_tokens)\n",
        new="        self.vllm_prompt_hist.observe(req.num_output_tokens)\n",
        gates=(HISTS,),
    ),
    Mutation(
        id="metrics-max-generation-per-sample",
        description="vllm:request_max_num_generation_tokens is observed per sample, not once per request with the "
                    "most tokens of its n samples (vLLM's ParentRequest rule)",
        file="vt/server/metrics.py", old="        if left > 1:\n", new="        if False:\n",
        gates=(HISTS,),
    ),
    Mutation(
        id="metrics-success-series-made-on-first-use",
        description="vllm:request_success has no series for a finish reason until a request ends with it: a "
                    "dashboard's rate() over it is an empty panel, not 0",
        file="vt/server/metrics.py", old="            self.vllm_success.labels(model_name, reason)\n",
        new="            pass\n",
        gates=(f"{VLLM_METRICS}::test_a_success_series_per_finish_reason_exists_before_any_request",),
    ),
    Mutation(
        id="metrics-scheduled-time-never-set",
        description="the scheduler never stamps a request's first admission: no queue, prefill or inference "
                    "interval is observed at all",
        file="vt/engine/core/scheduler.py", old="                req.scheduled_time = time.monotonic()\n",
        new="                pass\n",
        gates=(HISTS,),
    ),
    Mutation(
        id="engine-process-answers-before-counting",
        description="the engine process's reader hands a step's outputs to the streams before it handles the step's "
                    "finish records: a client that scrapes /metrics right after its answer may not see it counted",
        file="vt/engine/core/proc.py",
        old="                    for f in finished:  # counted first: a client that scrapes /metrics after its answer "
            "sees it\n                        o.finished(Finished(*f))\n                    o.deliver_outputs(outs)\n",
        new="                    o.deliver_outputs(outs)\n                    for f in finished:\n"
            "                        o.finished(Finished(*f))\n",
        gates=tuple(f"{VLLM_METRICS}::test_a_finished_request_is_counted_before_its_answer_reaches_the_client"
                    f"[{s}-engine-process]" for s in ("whole", "streamed")),
        expect="the answer came before its request was counted",
    ),
]
