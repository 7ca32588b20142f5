"""The engine (issue 4): preemption, the input batch's rows, start-up capacity, sampling-parameter precedence,
per-request seeds, and the tiny models' RoPE and MoE router.
"""

from __future__ import annotations

from mutations.model import Mutation
from mutations.registry.gates import BATCH, CAP, CLI, GEN, MODELS, ORACLE, per_model

LANE_SCRIPTS = "tests/engine/test_lane_scripts.py::test_a_lane_script_refuses_bad_input_with_one_typed_line"

BAD_CONFIG = "tests/engine/test_bad_input.py::test_an_engine_config_value_of_the_wrong_type_is_one_config_error_naming_its_field"

SPEC_OPTIONS = ("tests/engine/test_spec_decode_refusals.py::"
                "test_a_speculation_option_without_its_speculation_is_refused_by_the_api_as_by_the_cli")

ENTRIES: list[Mutation] = [
    Mutation(
        id="scheduler-preempts-oldest",
        description="under KV pressure the scheduler preempts the oldest running request, not the newest",
        file="vt/engine/core/scheduler.py", old="                victim = self.running[-1]", new="                victim = self.running[0]",
        gates=(f"{CAP}::test_preemption_takes_the_newest_running_request_first",
               f"{CAP}::test_a_step_that_preempted_admits_nothing",
               "tests/engine/test_scheduler_machine.py::TestSchedulerMachine"),
    ),
    Mutation(
        id="batch-moves-rows-without-block-table",
        description="swap_states moves every per-row field except the block table",
        file="vt/engine/worker/input_batch.py", old='"num_tokens", "block_table", "num_blocks"', new='"num_tokens", "num_blocks"',
        gates=(f"{BATCH}::TestInputBatchMachine",), expect="block table moved apart",
    ),
    Mutation(
        id="batch-moves-rows-without-their-sampling-floats",
        description="a condensed batch keeps a stale row: swaps move tokens and block tables but leave the "
                    "sampler's float column behind, so a moved request samples at another's temperature",
        file="vt/engine/worker/input_batch.py", old='"feed_slot", "sampling_f",\n', new='"feed_slot",\n',
        gates=("tests/engine/test_batch_sampling_rows.py::"
               "test_every_decode_row_samples_with_its_own_requests_parameters_as_rows_move",),
        expect="the float parameters of each row",
    ),
    Mutation(
        id="decode-step-stages-its-floats-apart",
        description="a decode step copies its sampling floats to the device in a pinned copy of their own: two "
                    "uploads a step where one holds every input",
        file="vt/engine/worker/graph_driver.py", old="        self.uploads.upload(slot.inputs, slot.staged)\n",
        new="        self.uploads.upload(slot.inputs, slot.staged)\n"
            "        self.uploads.upload(slot.fparams, slot.staged_floats)\n",
        gates=("tests/engine/test_batch_sampling_rows.py::"
               "test_a_plain_decode_step_stages_its_inputs_in_one_pinned_copy",),
    ),
    Mutation(
        id="decode-row-past-its-blocks-writes-the-trash-block",
        description="a decode row whose position outran its KV blocks reads the padded table's trash block as its "
                    "slot: its KV write is lost without a word",
        file="vt/engine/worker/runner.py", old="        if short.any():  # the padded table", new="        if False:  # the padded table",
        gates=("tests/engine/test_batch_sampling_rows.py::"
               "test_a_decode_row_past_its_kv_blocks_is_refused_by_name_not_written_to_the_trash_block",),
    ),
    Mutation(
        id="batch-remove-keeps-stale-block-table",
        description="a finished request's row keeps its block table (a stale row trusted to stay hidden)",
        file="vt/engine/worker/input_batch.py", old="        self.block_table[row] = self.trash_block\n        self._trim()",
        new="        self._trim()",
        gates=(f"{BATCH}::TestInputBatchMachine",), expect="stale block table",
    ),
    Mutation(
        id="capacity-check-removed",
        description="start-up no longer refuses a max_model_len that cannot fit in the KV blocks",
        file="vt/engine/config.py", old="        if needed > self.num_blocks:", new="        if False:",
        gates=(f"{CAP}::test_startup_refuses_a_max_model_len_that_cannot_fit",
               f"{CAP}::test_startup_counts_the_drafts_kv_with_the_targets"),
    ),
    Mutation(
        id="engine-config-token-budget-takes-a-float",
        description="max_num_batched_tokens=100.5 is taken (then the first step fails the engine)",
        file="vt/engine/config.py", old="        _need(_is_int(self.max_num_batched_tokens) and self.max_num_batched_tokens >= 0,",
        new="        _need(True,",
        gates=(f"{BAD_CONFIG}[batched-float]",), expect="DID NOT RAISE",
    ),
    Mutation(
        id="engine-config-names-unchecked",
        description="speculative_model and chat_template take any value: 5 fails deep inside, '' reads as the "
                    "current directory",
        file="vt/engine/config.py", old="            _need(v is None or isinstance(v, str) and bool(v.strip()), name, v,",
        new="            _need(True, name, v,",
        gates=tuple(f"{BAD_CONFIG}[{c}]" for c in ("draft-int", "draft-empty", "template-int", "template-empty")),
    ),
    Mutation(
        id="engine-config-bool-is-an-int",
        description="a bool is taken as an int where the field's own check allows it: seed=True is seed 1, "
                    "tensor_parallel_size=True one rank",
        file="vt/engine/config.py", old="            elif isinstance(v, bool):\n", new="            elif False:\n",
        gates=tuple(f"{BAD_CONFIG}[{c}]" for c in ("seed-bool", "tp-bool")), expect="DID NOT RAISE",
    ),
    Mutation(
        id="engine-config-none-is-not-the-default",
        description="None, vLLM's 'not given', is refused for max_num_batched_tokens, max_num_seqs and block_size",
        file="vt/engine/config.py", old="            if v is None and name in NONE_IS_DEFAULT:\n",
        new="            if False:\n",
        gates=("tests/engine/test_bad_input.py::test_none_is_the_default_and_numpy_ints_are_ints_in_engine_config",),
        expect="was refused",
    ),
    Mutation(
        id="api-draft-count-without-a-draft-taken",
        description="LLM(num_speculative_tokens=4) without speculative_model builds an engine with no proposer, "
                    "where the CLI refuses the flag",
        file="vt/engine/config.py", old="        if n and self.speculative_model is None:\n", new="        if False:\n",
        gates=(f"{SPEC_OPTIONS}[draft-count-without-a-draft]",), expect="DID NOT RAISE",
    ),
    Mutation(
        id="ngram-window-without-ngram-ignored",
        description="ngram_prompt_lookup_max is taken, and ignored, without speculative_model='[ngram]'",
        file="vt/engine/config.py", old="        if lookup is not None and self.speculative_model != NGRAM:\n",
        new="        if False:\n",
        gates=tuple(f"{SPEC_OPTIONS}[{c}]" for c in ("ngram-window-without-ngram", "ngram-window-with-a-draft-model")),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="ladder-cuts-outputs-short-in-silence",
        description="vt ladder and vt bench serve run prompts and outputs that max_model_len cannot hold: the ladder "
                    "reports ok over shortened outputs, the benchmark's requests all fail (exit 1)",
        file="vt/cli.py", old="    if total > max_model_len:\n", new="    if False:\n",
        gates=(*(f"{CLI}::test_bad_input_is_one_typed_line_and_exit_2[{c}]"
                 for c in ("ladder-output-cut-short", "ladder-prompt-fills-the-context", "bench-output-cut-short")),
               f"{CLI}::test_a_ladder_past_the_length_the_kv_cache_caps_is_refused_before_any_rung"),
    ),
    Mutation(
        id="cpu-takes-a-gpu-utilization-in-silence",
        description="gpu_memory_utilization is taken on the CPU backend, where it sizes nothing (0.01 and 1.0 alike)",
        file="vt/engine/config.py", old='        if u is not None and self.backend == "cpu":\n', new="        if False:\n",
        gates=("tests/engine/test_memory_check.py::"
               "test_gpu_memory_utilization_on_the_cpu_backend_is_refused_naming_kv_cache_gib",
               f"{CLI}::test_bad_input_is_one_typed_line_and_exit_2[gpu-utilization-on-the-cpu]"),
    ),
    Mutation(
        id="auto-on-the-cpu-refuses-a-gpu-utilization",
        description="backend auto that finds no GPU refuses a gpu_memory_utilization as the CPU named does: a script "
                    "written for a GPU stops on a machine without one",
        file="vt/engine/config.py", old="            if backend_chosen:\n                raise ConfigError(why)\n",
        new="            raise ConfigError(why)\n",
        gates=("tests/engine/test_memory_check.py::"
               "test_auto_that_finds_no_gpu_warns_that_a_gpu_memory_utilization_is_unused",),
    ),
    Mutation(
        id="auto-on-the-cpu-keeps-the-unused-gpu-utilization",
        description="backend auto on the CPU keeps the utilization it warned of: the engine core's copy of the "
                    "config, its backend now named cpu, refuses it after the core started (vt serve's default)",
        file="vt/engine/config.py", old="            self.gpu_memory_utilization = None\n", new="",
        gates=("tests/engine/test_memory_check.py::"
               "test_auto_that_finds_no_gpu_warns_that_a_gpu_memory_utilization_is_unused",),
    ),
    Mutation(
        id="auto-on-the-cpu-drops-a-gpu-utilization-in-silence",
        description="backend auto that finds no GPU takes a gpu_memory_utilization and says nothing of it",
        file="vt/engine/config.py",
        old='            logging.getLogger("vt").warning("backend auto found no GPU: %s; unused", why)\n',
        new="            pass\n",
        gates=("tests/engine/test_memory_check.py::"
               "test_auto_that_finds_no_gpu_warns_that_a_gpu_memory_utilization_is_unused",),
    ),
    Mutation(
        id="generate-takes-a-chat-template-it-never-uses",
        description="vt generate takes --chat-template again and renders no chat with it",
        file="vt/cli.py", old='    g.add_argument("--prompt", required=True, help="the prompt text")\n',
        new='    g.add_argument("--prompt", required=True, help="the prompt text")\n    g.add_argument("--chat-template")\n',
        gates=(f"{CLI}::test_chat_template_is_a_flag_of_vt_serve_alone_as_in_vllm[generate]",),
    ),
    Mutation(
        id="precedence-checkpoint-beats-explicit",
        description="generation_config.json overrides what the user set explicitly",
        file="vt/engine/sample/params.py",
        old="picked[name] = explicit if explicit is not None else gen.get(name, neutral)",
        new="picked[name] = gen.get(name, explicit if explicit is not None else neutral)",
        gates=(f"{GEN}::test_explicit_beats_checkpoint", f"{GEN}::test_temperature_zero_is_greedy_and_clears_the_filters",
               *per_model(f"{GEN}::test_greedy_is_deterministic"), *per_model(f"{GEN}::test_greedy_is_batch_invariant"),
               f"{GEN}::test_max_tokens_and_eos_finish_reasons"),
    ),
    Mutation(
        id="greedy-keeps-filters",
        description="temperature 0 no longer clears top_k/top_p/min_p",
        file="vt/engine/sample/params.py", old="            picked.update(temperature=0.0, top_p=1.0, top_k=0, min_p=0.0)", new="            picked.update(temperature=0.0)",
        gates=(f"{GEN}::test_temperature_zero_is_greedy_and_clears_the_filters",),
    ),
    Mutation(
        id="sampler-seed-not-the-requests",
        description="every request samples with the engine's seed instead of its own",
        file="vt/engine/front/llm_engine.py", old="        seed = resolved.seed if resolved.seed is not None else int(self._rng.integers(1 << 62))\n",
        new="        seed = self.cfg.seed\n",
        gates=per_model(f"{GEN}::test_seeded_sampling_is_reproducible_and_batch_invariant"),
    ),
    Mutation(
        id="never-fit-request-crashes",
        description="a prompt that leaves max_model_len no room for one token is queued instead of refused up front: "
                    "the engine dies of it (in process or in the engine process)",
        file="vt/engine/front/llm_engine.py", old="        if len(ids) >= self.cfg.max_model_len:", new="        if False:",
        gates=tuple(f"{CAP}::test_a_request_that_can_never_fit_gets_an_error_and_the_rest_finish[{m}]"
                    for m in ("in-process", "engine-process")),
        expect="refused up front",
    ),
    Mutation(
        id="rope-rotates-the-wrong-way",
        description="rotate_half with the sign on the wrong half",
        file="models/rope.py", old="np.concatenate([cos, cos, -sin, sin], axis=-1)",
        new="np.concatenate([cos, cos, sin, -sin], axis=-1)",
        gates=tuple(f"{ORACLE}::test_logits_match_hf_for_prefill_and_decode[{m}-{p}]"
                    for m in MODELS for p in ("eager", "graph")),
    ),
    Mutation(
        id="moe-ignores-norm-topk-prob",
        description="the MoE router skips renormalising the top-k probabilities",
        file="backends/kernels/moe.py", old="    if norm_topk_prob:", new="    if False:",
        gates=tuple(f"{ORACLE}::test_logits_match_hf_for_prefill_and_decode[tiny-qwen3-moe-{p}]"
                    for p in ("eager", "graph")),
    ),
    Mutation(
        id="recompute-drops-generated-tokens",
        description="a preempted request is recomputed from its prompt only, losing its generated tokens' KV",
        file="vt/engine/core/scheduler.py", old="NewRequestData(req.id, req.all_ids, len(req.prompt_ids), blocks,",
        new="NewRequestData(req.id, req.prompt_ids, len(req.prompt_ids), blocks,",
        gates=per_model(f"{CAP}::test_preemption_under_a_tiny_pool_finishes_everything_with_unconstrained_tokens"),
    ),
    Mutation(
        id="tpot-split-counts-a-requests-own-prefill",
        description="scripts/tpot-split starts a request's TPOT window at its first token's step: its own prefill "
                    "step would be charged to its TPOT as if it were another prompt's",
        file="scripts/tpot-split",
        old="        window = steps[first[i] + 1 : last[i] + 1]\n",
        new="        window = steps[first[i] : last[i] + 1]\n",
        gates=("tests/engine/test_tpot_split.py::test_a_requests_window_holds_the_later_prompts_prefill_steps_and_not_"
               "its_own",),
        expect="per_request_tpot_ms",
    ),
    Mutation(
        id="tpot-split-profiles-the-step-before-the-one-asked-for",
        description="scripts/tpot-split --profile-step N starts the profiler around step N - 1: the kernels it reports "
                    "are another step's",
        file="scripts/tpot-split",
        old="        with profiled(len(steps)) if profiled else contextlib.nullcontext():\n",
        new="        with profiled(len(steps) - 1) if profiled else contextlib.nullcontext():\n",
        gates=("tests/engine/test_tpot_split.py::test_the_last_round_profiles_the_asked_step_and_no_other",),
        expect="'round 1 step 1', 'start'",
    ),
    Mutation(
        id="tpot-split-profiles-every-round",
        description="scripts/tpot-split --profile-step N profiles step N of every round: the first round's, which "
                    "meets the shapes first (compiles, GEMM tuning), joins the profile",
        file="scripts/tpot-split",
        old="        timed = timed_steps(engine, sync, reqs, profiled if rnd == rounds - 1 else None)\n",
        new="        timed = timed_steps(engine, sync, reqs, profiled)\n",
        gates=("tests/engine/test_tpot_split.py::test_the_last_round_profiles_the_asked_step_and_no_other",),
        expect="round 0 step 1",
    ),
    Mutation(
        id="replay-ab-lets-a-loader-error-escape",
        description="scripts/replay-ab lets the loader's typed error escape as a traceback (exit 1)",
        file="scripts/replay-ab",
        old="    except VtError as e:  # no such model, a checkpoint the loader refuses, no CuPy: one typed line\n",
        new="    except ImportError as e:\n",
        gates=(f"{LANE_SCRIPTS}[replay-ab-unknown-model]",),
    ),
    Mutation(
        id="prefix-ttft-lets-a-loader-error-escape",
        description="scripts/prefix-ttft lets the loader's typed error escape as a traceback (exit 1)",
        file="scripts/prefix-ttft",
        old="    except VtError as e:  # no such model, a checkpoint the loader refuses, no CuPy: one typed line\n",
        new="    except ImportError as e:\n",
        gates=(f"{LANE_SCRIPTS}[prefix-ttft-unknown-model]",),
    ),
    Mutation(
        id="largest-step-lets-a-loader-error-escape",
        description="scripts/largest-step lets the loader's typed error escape as a traceback (exit 1)",
        file="scripts/largest-step",
        old="    except VtError as e:  # no such model, a checkpoint the loader refuses, no CuPy, a size that does not fit\n",
        new="    except ImportError as e:\n",
        gates=(f"{LANE_SCRIPTS}[largest-step-unknown-model]",),
    ),
    Mutation(
        id="profile-step-lets-a-loader-error-escape",
        description="scripts/profile-step lets the loader's typed error escape as a traceback (exit 1)",
        file="scripts/profile-step",
        old="    except VtError as e:  # no such model, a checkpoint the loader refuses, no CuPy: one typed line\n",
        new="    except ImportError as e:\n",
        gates=(f"{LANE_SCRIPTS}[profile-step-unknown-model]",),
    ),
    Mutation(
        id="lane-scripts-take-any-shape-name",
        description="the lane scripts' --shape takes any name, which fails later as a KeyError traceback",
        file="benchmarks/realsize.py",
        old='    ap.add_argument("--shape", default="0.6B", choices=list(SHAPES), help="written under --dir when --model '
            'is unset")\n',
        new='    ap.add_argument("--shape", default="0.6B", help="written under --dir when --model is unset")\n',
        gates=tuple(f"{LANE_SCRIPTS}[{s}-unknown-shape]" for s in ("gpu-idle", "tpot-split", "replay-ab", "c1-anatomy",
                                                                      "prefix-ttft", "largest-step", "profile-step")),
    ),
    Mutation(
        id="gpu-idle-takes-any-mode",
        description="scripts/gpu-idle runs whatever --modes names, an unknown mode as async scheduling off",
        file="scripts/gpu-idle", old="    if not modes or not set(modes) <= {\"off\", \"on\"}:\n",
        new="    if not modes:\n",
        gates=("tests/engine/test_lane_option_refusals.py::test_gpu_idle_refuses_a_mode_it_does_not_know",),
    ),
]
# scripts/env-ab (session 26): the lane's A/B over flags in one call
ENV_AB = "tests/engine/test_lane_env_ab.py::test_env_ab_runs_each_setting_in_its_own_process_and_alternates_them"
ENTRIES += [
    Mutation(
        id="env-ab-runs-every-round-in-one-order",
        description="env-ab runs the settings in the same order every round: a drift over the call favours the first",
        file="scripts/env-ab",
        old="        for setting in every[:: 1 if r % 2 == 0 else -1]:  # A B, then B A: a drift lands on every setting alike\n",
        new="        for setting in every:\n",
        gates=(ENV_AB,),
        expect="round 1 reversed",
    ),
    Mutation(
        id="env-ab-names-its-files-with-equals",
        description="env-ab names a run's file by its setting as written (VT_X=1): the device runner returns none",
        file="scripts/env-ab",
        old='re.sub(r"[^A-Za-z0-9_.-]+"', new='re.sub(r"[^A-Za-z0-9_.=-]+"',
        gates=(ENV_AB,),
        expect="names the device runner returns",
    ),
    Mutation(
        id="env-ab-reads-json-objects-only",
        description="env-ab keeps a run's last JSON object only: `vt ladder --json`'s array of rows reads as no line",
        file="scripts/env-ab",
        old='line.startswith(("{", "["))', new='line.startswith("{")',
        gates=("tests/engine/test_lane_env_ab.py::test_env_ab_reads_a_ladders_array_of_rows_by_index",),
    ),
    Mutation(
        id="env-ab-runs-a-value-vt-refuses",
        description="env-ab takes a flag value vt/env.py refuses: every run of that setting fails, a lane call spent",
        file="scripts/env-ab",
        old="        if bad:\n", new="        if False:\n",
        gates=("tests/engine/test_lane_env_ab_refusals.py::test_env_ab_refuses_bad_input_with_one_line[a-value-vt-refuses]",),
    ),
    Mutation(
        id="env-ab-drops-the-setting",
        description="env-ab runs every process with the caller's environment: both sides of the A/B are one setting",
        file="scripts/env-ab",
        old="env=dict(os.environ) | setting,",
        new="env=dict(os.environ),",
        gates=(ENV_AB, "tests/engine/test_lane_env_ab.py::test_env_ab_reads_a_ladders_array_of_rows_by_index"),
        expect="0; 0, 0",
    ),
    Mutation(
        id="env-ab-kills-the-hung-run-alone",
        description="env-ab kills a run past its timeout but not what it started: a rank or server keeps the GPU, "
                    "and its pipes keep the call waiting",
        file="scripts/env-ab",
        old="        os.killpg(proc.pid, signal.SIGKILL)\n",
        new="        proc.kill()\n",
        gates=("tests/engine/test_lane_env_ab_timeout.py::test_env_ab_ends_a_run_past_its_timeout_with_what_it_started",),
        expect="waited out",
    ),
    Mutation(
        id="env-ab-runs-a-command-that-is-not-there",
        description="env-ab starts the rounds with a command it cannot find: a FileNotFoundError traceback, not a line",
        file="scripts/env-ab",
        old="    if shutil.which(command[0]) is None:\n",
        new="    if False:\n",
        gates=("tests/engine/test_lane_env_ab_refusals.py::test_env_ab_refuses_bad_input_with_one_line[no-such-command]",),
    ),
]

DRAFT_KV = "tests/engine/test_draft_kv_sizing.py"

ENTRIES += [
    Mutation(
        id="draft-default-length-is-the-targets",
        description="with a draft model and no max_model_len, the target's length is taken, not the shorter of the "
                    "two: a draft shorter than the target is refused at start-up",
        file="vt/engine/front/llm_engine.py", old="        return min(target, limit)\n", new="        return target\n",
        gates=(f"{DRAFT_KV}::test_a_draft_with_no_max_model_len_takes_the_shorter_of_the_two_lengths",),
    ),
    Mutation(
        id="draft-length-check-adds-k-again",
        description="the draft's limit is checked against max_model_len + k, though the scheduler never proposes "
                    "past max_model_len: a draft as long as the target is refused at start-up",
        file="vt/engine/front/llm_engine.py", old="        if self.cfg.max_model_len > limit:\n",
        new="        if (self.cfg.max_model_len or min(target, limit)) + self.cfg.num_speculative_tokens > limit:\n",
        gates=(f"{DRAFT_KV}::test_a_draft_with_no_max_model_len_takes_the_shorter_of_the_two_lengths",),
    ),
    Mutation(
        id="speculation-proposes-past-max-model-len",
        description="the scheduler lets a request speculate k tokens whatever room max_model_len leaves: near the "
                    "end of the context the draft and the target run past the last position",
        file="vt/engine/core/scheduler.py",
        old="        return k if k and req.can_speculate and req.num_tokens + k <= self.cfg.max_model_len else 0\n",
        new="        return k if k and req.can_speculate else 0\n",
        gates=(f"{DRAFT_KV}::test_speculation_to_the_end_of_the_context_stays_within_the_drafts_positions",),
    ),
    Mutation(
        id="kv-block-bytes-leave-out-the-draft",
        description="a KV block's bytes count the target's layers only: the plan, the fit check and the CUDA "
                    "budget leave out the draft's arrays of as many blocks",
        file="vt/engine/front/llm_engine.py",
        old="        return per_block + (kv_bytes_per_block(draft, cfg.block_size, itemsize) if draft is not None else 0)\n",
        new="        return per_block\n",
        gates=(f"{DRAFT_KV}::test_the_kv_plan_counts_the_drafts_arrays_and_prints_what_was_allocated",
               f"{DRAFT_KV}::test_a_given_num_blocks_is_checked_with_the_drafts_arrays"),
    ),
    Mutation(
        id="cuda-kv-block-bytes-leave-out-the-draft",
        description="on the GPU, a KV block's bytes count the target's layers only: the profiled budget and a given "
                    "num_blocks' check leave out the draft's arrays of as many blocks",
        file="vt/engine/front/llm_engine.py",
        old="        return per_block + (kv_bytes_per_block(draft, cfg.block_size, itemsize) if draft is not None else 0)\n",
        new="        return per_block\n",
        gates=(f"{DRAFT_KV}::test_on_the_gpu_the_utilization_sizes_the_drafts_kv_with_the_targets",
               f"{DRAFT_KV}::test_on_the_gpu_a_given_num_blocks_counts_the_drafts_arrays"),
        needs_gpu=True,
    ),
    Mutation(
        id="kv-plan-forgets-the-trash-block",
        description="the KV plan fills the budget with blocks and forgets the trash block make_kv_cache adds",
        file="vt/engine/memory.py", old="    blocks = max(0, budget // per_block - 1)\n",
        new="    blocks = max(0, budget // per_block)\n",
        gates=(f"{DRAFT_KV}::test_the_kv_plan_counts_the_drafts_arrays_and_prints_what_was_allocated",),
    ),
    Mutation(
        id="kv-pool-without-a-block-per-group-settles-length-0",
        description="a pool too small for one block per KV group settles max_model_len 0: an assert's traceback, "
                    "not one typed line",
        file="vt/engine/memory.py", old="    if blocks < need:\n", new="    if False:\n",
        gates=(f"{DRAFT_KV}::test_a_pool_without_one_block_per_group_is_one_typed_line[length-from-the-pool]",),
    ),
    Mutation(
        id="capacity-error-advises-a-length-of-0",
        description="a pool with no room for one request advises lowering max_model_len to 0",
        file="vt/engine/config.py",
        old='                            f"{largest} or less") if largest >= 2 else ("; no max_model_len fits", ""))\n',
        new='                            f"{largest} or less") if True else ("; no max_model_len fits", ""))\n',
        gates=(f"{DRAFT_KV}::test_a_pool_without_one_block_per_group_is_one_typed_line[length-given]",),
    ),
    Mutation(
        id="kv-plan-silent-for-a-given-num-blocks",
        description="with num_blocks given, the KV plan (blocks, bytes, tokens, concurrency) is never printed",
        file="vt/engine/front/llm_engine.py", old="        for line in plan.lines:\n",
        new="        for line in plan.lines if not cfg.num_blocks else ():\n",
        gates=(f"{DRAFT_KV}::test_the_plan_is_printed_for_a_given_num_blocks_with_a_small_size_readable",),
    ),
    Mutation(
        id="small-kv-sizes-round-to-0-mib",
        description="sizes below a MiB print as MiB with one decimal: a small pool reads as 0.0 MiB",
        file="vt/engine/memory.py",
        old='    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):\n'
            '        if n >= scale:\n            return f"{n / scale:.2f} {unit}"\n    return f"{int(n)} bytes"\n',
        new='    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"\n',
        gates=(f"{DRAFT_KV}::test_the_plan_is_printed_for_a_given_num_blocks_with_a_small_size_readable",),
    ),
]
