"""No hangs, no raw tracebacks (issue 18, in part): the stall detector, the ladder's checks and progress lines,
one typed line for bad input, a missing CuPy, an unwritable cache dir or a bad flag.
"""

from __future__ import annotations

from mutations.model import Mutation
from mutations.registry.gates import CLI, CLI_CACHE_DIR, CLI_LADDERS, CLI_RUNS, GUAR

STALL = f"{GUAR}::test_a_request_that_can_never_be_admitted_fails_alone_and_the_rest_run"

ENTRIES: list[Mutation] = [
    Mutation(
        id="stall-detector-removed",
        description="an engine step that can schedule nothing with requests in flight returns quietly: the caller spins",
        file="vt/engine/front/llm_engine.py", old="                return self._check_stall()\n",
        new="                return []\n",
        gates=tuple(f"{STALL}[{c}]" for c in ("one-block-short", "far-short")),
        expect="bounded: every request ended within 100 steps",
    ),
    Mutation(
        id="stall-kills-the-engine",
        description="a waiting head that can never run raises out of the engine (every request, the server, with "
                    "it) instead of failing alone",
        file="vt/engine/front/llm_engine.py", old="        stuck = sched.unrunnable_head()\n", new="        stuck = None\n",
        gates=tuple(f"{STALL}[{c}]" for c in ("one-block-short", "far-short")),
        expect="the stall took the engine down",
    ),
    Mutation(
        id="stall-head-boundary-off-by-one",
        description="the head counts as unrunnable only when it is two blocks short: one short, the engine dies",
        file="vt/engine/core/scheduler.py", old="        return (head, need) if need > self.kv.num_free else None\n",
        new="        return (head, need) if need > self.kv.num_free + 1 else None\n",
        gates=(f"{STALL}[one-block-short]",),
        expect="the stall took the engine down",
    ),
    Mutation(
        id="ladder-level-unchecked",
        description="a concurrency level below 1 is not refused by name",
        file="vt/engine/front/ladder.py", old="    if bad or not concurrency:", new="    if not concurrency:",
        gates=tuple(f"{CLI}::test_bad_input_is_one_typed_line_and_exit_2[{c}]"
                    for c in ("concurrency-0", "concurrency-negative")),
    ),
    Mutation(
        id="ladder-ttft-median-is-the-mean",
        description="a rung's TTFT median is its mean again: one slow request (a rung's first) moves all three "
                    "figures but the max, and hides as a slow rung",
        file="vt/engine/front/ladder.py", old="round(1000 * float(np.median(seconds)), 2)",
        new="round(1000 * float(np.mean(seconds)), 2)",
        gates=("tests/engine/test_capacity.py::test_a_rungs_ttft_median_and_max_show_one_slow_request_as_itself",),
    ),
    Mutation(
        id="ladder-progress-only-on-a-terminal",
        description="the ladder shows progress only as a terminal bar: a CI log sees nothing for minutes",
        file="vt/engine/front/ladder.py", old="    if not sys.stderr.isatty():", new="    if False:",
        gates=(f"{CLI_LADDERS}::test_long_work_shows_progress_as_plain_lines_off_a_terminal",),
        expect="vt ladder: c=1 done",
    ),
    Mutation(
        id="ladder-failures-unexplained",
        description="a ladder rung reports failed requests without saying why",
        file="vt/cli.py", old="            print(f\"vt: c={r.c}: {r.errors.count(reason)} request(s) failed: {reason}\", file=sys.stderr)",
        new="            pass",
        gates=(f"{CLI_LADDERS}::test_a_ladder_with_failed_requests_says_why",),
    ),
    Mutation(
        id="ladder-json-answers-0-with-failures",
        description="vt ladder --json prints its rows and exits 0 before the failures' reasons and its exit status",
        file="vt/cli.py", old="        print(json.dumps([r.row() for r in rungs]))\n    else:\n",
        new="        print(json.dumps([r.row() for r in rungs]))\n        return 0\n    else:\n",
        gates=(f"{CLI_LADDERS}::test_a_ladder_with_failed_requests_says_why[json]",),
    ),
    Mutation(
        id="no-cupy-unexplained",
        description="--backend cuda without CuPy ends in a raw ModuleNotFoundError",
        file="backends/cuda.py", old="        try:\n            import cupy\n        except ImportError as e:",
        new="        import cupy\n\n        try:\n            pass\n        except ImportError as e:",
        gates=(f"{CLI}::test_the_cuda_backend_without_cupy_is_one_typed_line",),
        expect="raw ModuleNotFoundError escaped",
    ),
    Mutation(
        id="cache-dir-error-unexplained",
        description="an unwritable VT_CACHE_DIR ends in a raw OSError traceback",
        file="models/tiny.py", old="    except OSError as e:\n        from vt.errors import ConfigError", new="    except ZeroDivisionError as e:\n        from vt.errors import ConfigError",
        gates=(f"{CLI_CACHE_DIR}::test_an_unwritable_cache_dir_is_one_typed_line",),
    ),
    Mutation(
        id="engine-seed-unchecked",
        description="an engine seed past int64 is taken in silence (NumPy's generator takes any size): the ladder "
                    "runs where vLLM's range refuses the seed",
        file="vt/engine/config.py",
        old='        _need(is_seed(self.seed), "seed", self.seed, SEED_RANGE)\n',
        new="",
        gates=(f"{CLI}::test_bad_input_is_one_typed_line_and_exit_2[ladder-seed-past-int64]",),
    ),
    Mutation(
        id="prompt-utf8-unchecked",
        description="a prompt with undecodable bytes reaches the tokenizer, which raises a raw TypeError",
        file="vt/engine/front/llm_engine.py", old='        try:\n            prompt.encode("utf-8")\n',
        new='        try:\n            pass\n',
        gates=(f"{CLI}::test_bad_input_is_one_typed_line_and_exit_2[non-utf8-prompt]",),
        expect="raw TypeError escaped",
    ),
    Mutation(
        id="env-flags-case-sensitive",
        description="VT_* flags accept only lowercase words: VT_CUDAGRAPH=True is refused",
        file="vt/env.py", old="    if raw.strip().lower() in TRUE:", new="    if raw in TRUE:",
        gates=(f"{CLI_RUNS}::test_flag_values_are_read_in_any_case_and_bad_ones_named[True-True]",),
    ),
]
