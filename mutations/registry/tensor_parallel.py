"""Tensor parallelism (issue 17): collective warm-up and reduction, the scheduler-output broadcast, KV-head
placement, split checks, worker death and start-up; with the stream simulator, the mutation runner's
timeouts and the server's socket, which landed with it.
"""

from __future__ import annotations

from mutations.model import Mutation
from mutations.registry.gates import (
    CLI,
    CONF,
    MODELS,
    RULE,
    STREAM_POLICIES,
    STREAMS,
    TP4,
    TP_DEATH,
    TP_EQUALITY,
    TP_REFUSALS,
    TP_SEAMS,
    TP_SERVE,
    TP_SERVE_IDLE,
    TP_SHARDS,
)

TP_WAITS = "tests/engine/test_tp_waits.py"

ENTRIES: list[Mutation] = [
    Mutation(
        id="tp-warm-up-removed",
        description="the pre-grow no longer warms the collectives up: a capture is the first enqueue of its kind",
        file="vt/engine/worker/graph_driver.py", old="            group.warm_up()\n", new="            pass\n",
        gates=tuple(f"{TP_SEAMS}::test_a_capture_that_is_the_groups_first_collective_allocates_nothing[{m}]"
                    for m in MODELS), expect="the capture allocated",
    ),
    Mutation(
        id="tp-row-parallel-reduction-skipped",
        description="the o-projection's partial sums are never all-reduced across the ranks",
        file="models/decoder.py",
        old="            self._reduce(out)\n", new="",  # the whole line: a partial match leaves its indent behind
        # a dense and a MoE checkpoint at TP = 2, and TP = 4: the skipped sum breaks every model alike, and each
        # gate under the mutant runs ~7 s (the other three checkpoints added ~20 s to every CI run)
        gates=(TP_EQUALITY[0], TP_EQUALITY[1], TP_EQUALITY[-1]),
    ),
    Mutation(
        id="tp-stale-scheduler-output",
        description="rank 0 broadcasts the first scheduler output it ever sent, every step",
        file="vt/engine/worker/tp.py", old="        payload = pickle.dumps(so, protocol=pickle.HIGHEST_PROTOCOL)\n",
        new="        self.stale = getattr(self, 'stale', so)\n"
            "        payload = pickle.dumps(self.stale, protocol=pickle.HIGHEST_PROTOCOL)\n",
        gates=(TP_EQUALITY[-1],  # TP = 4 alone: the TP = 2 file is tp-row-parallel's gate
               f"{TP_DEATH}::test_a_killed_worker_fails_the_engine_within_bounded_time_by_name"),
        expect="stale",
    ),
    Mutation(
        id="tp-kv-heads-dealt-round-robin",
        description="with fewer KV heads than ranks, rank r keeps KV head r mod n (a split's dealing), not the one "
                    "its query heads read",
        file="vt/parallel.py", old="        return self.rank * num_kv_heads // self.size, 1\n",
        new="        return self.rank % num_kv_heads, 1\n",
        gates=(f"{TP4}::test_tp4_replicates_the_kv_heads_and_generates_the_tokens_tp1_does",
               f"{TP_SHARDS}::test_the_ranks_slices_tile_every_tensor[tiny-qwen3-4]"),
    ),
    Mutation(
        id="simulator-wait-ignored",
        description="the stream simulator drops a wait_event: work after a join no longer happens after the joined work",
        file="backends/streams.py",
        old="    def wait(self, stream: Stream, clock: Clock) -> None:\n        _merge(self._clock(stream), clock)\n",
        new="    def wait(self, stream: Stream, clock: Clock) -> None:\n        pass\n",
        gates=(f"{STREAMS}::test_with_the_wait_no_schedule_races_and_every_schedule_is_right",
               *(f"{STREAMS}::test_a_breaks_side_work_joined_in_the_legal_window_never_races[{p}]"
                 for p in STREAM_POLICIES)),
        expect="a race where none may be",
    ),
    Mutation(
        id="adversary-not-adversarial",
        description="the side-streams-late schedule runs side work as soon as it can, so a missing wait reads right",
        file="backends/streams.py", old="        return runnable[0] if forced and runnable else None\n",
        new="        return runnable[0] if runnable else None\n",
        gates=(f"{STREAMS}::test_the_adversary_shows_the_stale_value_a_missing_wait_reads",),
    ),
    Mutation(
        id="cpu-synchronize-allowed-in-capture",
        description="the CPU backend lets a synchronize through an open capture (it still invalidates it)",
        file="backends/cpu.py", old="            raise CaptureUnsupported(\"synchronize during capture\")\n",
        new="            return\n",
        gates=(*(f"{CONF}::test_capture_rule[{r}-{m}-cpu]" for r in ("stream synchronize", "device synchronize")
                 for m in ("global", "thread_local", "relaxed")),
               f"{CONF}::test_segment_rule[join as a synchronize inside the next open segment-cpu]"),
    ),
    Mutation(
        id="tp-split-unchecked",
        description="a model that cannot be split over the ranks starts anyway (its heads divided with a remainder)",
        file="vt/engine/front/llm_engine.py", old="        check_divisible(ckpt.config, n)\n", new="",
        gates=(f"{TP_REFUSALS}::test_a_model_that_cannot_be_split_is_refused_by_name",
               "tests/vt/test_cli.py::test_bad_input_is_one_typed_line_and_exit_2[tp-indivisible]"),
    ),
    Mutation(
        id="tp-backend-model-check-left-to-the-workers",
        description="rank 0 starts the workers before asking its backend whether it serves the model, so a refusal "
                    "(the CUDA backend's head dims) comes from a worker that died of it",
        file="vt/engine/front/llm_engine.py",
        old="        backend_class(self.cfg.backend).check_model(ckpt.config)  # here, not from a worker that died of it\n",
        new="",
        gates=(f"{TP_REFUSALS}::test_a_model_the_backend_refuses_is_refused_before_any_rank_starts",),
        expect="workers started before the backend's check of the model",
    ),
    Mutation(
        id="tp-size-range-unchecked",
        description="tensor_parallel_size has no upper bound in the config",
        file="vt/engine/config.py", old="1 <= self.tensor_parallel_size <= 8,", new="1 <= self.tensor_parallel_size,",
        gates=(f"{TP_REFUSALS}::test_a_model_that_cannot_be_split_is_refused_by_name",),
    ),
    Mutation(
        id="tp-death-unexplained",
        description="a step that fails because a worker died raises the raw socket error, not WorkerDied",
        file="vt/engine/front/llm_engine.py", old="            raise self.workers.explain(e) from e\n", new="            raise\n",
        gates=("tests/engine/test_tp_explain.py::test_a_failed_step_raises_the_workers_explanation_not_the_socket_error",),
    ),
    Mutation(
        id="dead-peers-group-dropped",
        description="rank 0 leaves its gloo group after a peer died by dropping it: gloo's destructor waits out the "
                    "collective the dead peer left pending (60 s), and vt serve's engine process with it",
        file="vt/parallel.py",
        old="        ctypes.pythonapi.Py_IncRef(ctypes.py_object(dist.group.WORLD))  # never returned: no destructor runs\n",
        new="        pass\n",
        gates=("tests/engine/test_tp_leave.py::test_leaving_after_a_peer_failed_mid_collective_ends_the_process_within_"
               "seconds",),
    ),
    Mutation(
        id="serve-ignores-dead-engine",
        description="vt serve keeps running after its engine died",
        file="vt/cli.py",
        old="    server.llm.on_dead = lambda e: setattr(uv, \"should_exit\", True)  # a dead engine serves nothing: exit 1\n",
        new="",
        # the mid-stream death alone: the idle one is idle-engine-never-checked's gate (each waits its 10 s bound)
        gates=(f"{TP_SERVE}::test_a_killed_worker_fails_the_stream_and_the_server_exits_1",),
    ),
    Mutation(
        id="idle-engine-never-checked",
        description="an idle engine never checks its health: a worker killed between requests goes unnoticed (the "
                    "engine core process's idle loop, which vt serve runs)",
        file="vt/engine/core/proc.py",
        old="                    self.engine.check_health()  # a tensor-parallel worker may die between requests\n",
        new="",
        gates=(f"{TP_SERVE_IDLE}::test_a_worker_killed_while_the_server_idles_stops_it_within_seconds",),
    ),
    Mutation(
        id="tp-cuda-check-raw",
        description="-tp with the CUDA backend and no CuPy lets ModuleNotFoundError escape the device check",
        file="vt/engine/worker/tp.py",
        old="    except Exception as e:  # noqa: BLE001 - no CuPy, or no driver: the CUDA backend's own refusal\n",
        new="    except ValueError as e:\n",
        gates=("tests/vt/test_cli.py::test_the_cuda_backend_without_cupy_is_one_typed_line",),
    ),
    Mutation(
        id="tp-startup-wait-unbounded",
        description="rank 0 waits for its workers' start-up with no deadline: a worker stuck loading hangs it",
        file="vt/engine/worker/tp.py", old="            if time.monotonic() > deadline:\n", new="            if False:\n",
        gates=(f"{TP_WAITS}::test_a_worker_that_never_gets_ready_ends_the_startup_wait_at_its_deadline",),
    ),
    Mutation(
        id="tp-startup-death-unnoticed",
        description="a worker that dies while loading is found only at the start-up deadline, not by its exit code",
        file="vt/engine/worker/tp.py",
        old="        while self.store.add(READY_KEY, 0) < len(self.procs):\n            self.check_alive()\n",
        new="        while self.store.add(READY_KEY, 0) < len(self.procs):\n",
        gates=(f"{TP_WAITS}::test_a_worker_that_dies_while_loading_is_named_before_the_deadline",),
    ),
    Mutation(
        id="serve-busy-port-raw",
        description="vt serve on a port in use lets the raw OSError escape instead of one typed line",
        file="vt/server/serve.py",
        old="        raise ConfigError(f\"could not listen on {host}:{port}",
        new="        raise\n        raise ConfigError(f\"could not listen on {host}:{port}",
        gates=(f"{CLI}::test_serve_on_a_port_in_use_is_one_typed_line_and_exit_2",),
    ),
    Mutation(
        id="runner-baseline-unbounded",
        description="the mutation runner waits for unmutated gates with no limit: one hang stalls CI silently",
        file="mutations/runner.py",
        old="            return run_files(sandbox, group, env, timeout=self.cfg.baseline_timeout, workers=workers)",
        new="            return run_files(sandbox, group, env, timeout=None, workers=workers)",
        gates=("tests/mutations/test_runner_timeouts.py::test_a_hanging_baseline_stops_the_run_naming_it",),
    ),
    Mutation(
        id="runner-timeout-kills-pytest-only",
        description="a mutant's timeout kills pytest but not what its gates started (servers, ranks)",
        file="mutations/judge.py", old="        os.killpg(proc.pid, signal.SIGKILL)\n", new="        proc.kill()\n",
        gates=("tests/mutations/test_runner_hangs.py::test_a_timed_out_mutant_takes_what_it_started_with_it",),
    ),
    Mutation(
        id="collective-wait-unwatched",
        description="a gloo collective's wait never asks the watch: a killed peer can hold rank 0 for gloo's timeout",
        file="vt/parallel.py", old="        if watch is not None and polls % 64 == 0:\n            watch()\n",
        new="        if watch is not None and polls % 64 == 0:\n            pass\n",
        gates=(f"{TP_WAITS}::test_a_collective_wait_ends_as_soon_as_the_watch_finds_a_dead_peer",),
    ),
    Mutation(
        id="tp-gather-into-a-pool-block-gloo-holds",
        description="gloo's all_gather receives into the pool temporary itself: its work object holds the block "
                    "past the wait, so it is free again at no predictable moment (a capture after it can allocate)",
        file="vt/parallel.py",
        old="        parts = [torch.empty((n, cols), dtype=torch.float32) for _ in range(size)]\n",
        new="        parts = list(torch.from_numpy(stacked).unbind(0))\n",
        gates=(f"{TP_WAITS}::test_a_gathers_temporaries_are_free_when_its_launch_returns_whatever_gloo_still_holds",),
        expect="pool block(s) still held after the gather returned",
    ),
    Mutation(
        id="server-nagle-on",
        description="the listening socket says protocol 0, so asyncio leaves Nagle on: each SSE frame waits ~40 ms",
        file="vt/server/serve.py", old="        sock = socket.socket(family, kind, proto)\n",
        new="        sock = socket.socket(family, kind)\n",
        gates=(f"{RULE}::test_the_servers_connections_send_each_frame_at_once",),
    ),
]

RANKS = "tests/seams/test_run_ranks.py"

ENTRIES += [
    Mutation(
        id="rank-output-through-pipes-read-at-the-end",
        description="each rank writes to a pipe that is read only once every rank has exited: a rank that writes "
                    "more than a pipe holds blocks before its collective, and the group waits for it to the deadline",
        file="seams/ranks.py",
        old="            procs = [subprocess.Popen(argv, stdout=o, stderr=e, text=True, env=env, start_new_session=True)",
        new="            procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, "
            "env=env, start_new_session=True)",
        gates=(f"{RANKS}::test_ranks_that_write_more_than_a_pipe_holds_before_their_collective_all_finish",
               f"{RANKS}::test_a_rank_that_fails_ends_the_ranks_waiting_for_it_at_once"),  # its stderr is lost
    ),
    Mutation(
        id="a-failed-rank-leaves-the-others-waiting",
        description="a rank that fails does not end the ranks waiting for it in a collective: they run to the deadline",
        file="seams/ranks.py",
        old="        failed = next((r for r, c in enumerate(codes) if c not in (None, 0)), None)",
        new="        failed = None",
        gates=(f"{RANKS}::test_a_rank_that_fails_ends_the_ranks_waiting_for_it_at_once",),
    ),
    Mutation(
        id="offline-llm-hides-the-worker-that-died",
        description="the in-process LLM wraps the typed error that killed its engine (a dead tensor-parallel "
                    "worker's WorkerDied, a broken invariant) in a generic EngineDeadError: the caller loses its type",
        file="vt/engine/front/llm.py",
        old="            if isinstance(e, VtError):  # already the typed cause by name (a dead worker, a broken invariant)\n"
            "                raise\n",
        new="",
        gates=(f"{TP_DEATH}::test_a_killed_worker_fails_the_engine_within_bounded_time_by_name",),
    ),
]
