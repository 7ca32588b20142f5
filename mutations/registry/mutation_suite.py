"""The mutation suite itself (issue 20): the HTML report embeds its data; --since runs every mutant when a
shared test helper changed.
"""

from __future__ import annotations

from mutations.model import Mutation

WHOLE = "tests/mutations/test_runner_whole_device.py"
FORK = "tests/mutations/test_runner_forkserver.py"
FORKED = f"{FORK}::test_a_gate_forked_by_the_server_runs_as_one_started_afresh"
SEEDED = f"{FORK}::test_the_sandbox_is_compiled_once_and_a_mutant_still_runs_its_own_code"
NO_SHM = f"{FORK}::test_without_room_on_dev_shm_sandboxes_take_the_temp_folder_and_verdicts_hold"
ENTRIES: list[Mutation] = [
    Mutation(
        id="mutants-run-their-gate-files-whole-by-default",
        description="a mutant runs its gate files whole unless asked not to (CI paid every gate file once per mutant)",
        file="mutations/judge.py", old="targets=None if whole_files else m.gates,", new="targets=None,",
        gates=("tests/mutations/test_runner.py::test_by_default_a_mutant_runs_its_gates_alone",),
    ),
    Mutation(
        id="gates-alone-verdicts-share-the-whole-files-cache-key",
        description="the gates-alone and whole-files modes share a cache key: one mode's verdict is served to the other",
        file="mutations/runner.py", old='(b"" if self.cfg.whole_files else b"\\0gates-alone")', new='b""',
        gates=("tests/mutations/test_runner.py::test_unchanged_mutants_come_from_the_cache",),
        expect="the files whole are another run",
    ),
    Mutation(
        id="a-crash-counts-as-a-kill",
        description="a gate that the mutant crashes (an exception escapes it; no assertion went red) counts as a kill",
        file="mutations/judge.py",
        old="    crashed = [t for t in failed_gates if not died_on_assertion(o.failed[t])]\n",
        new="    crashed: list[str] = []\n",
        gates=("tests/mutations/test_runner.py::test_a_gate_that_a_mutant_crashes_is_no_kill",),
        expect="Crashed",
    ),
    Mutation(
        id="kill-reason-is-the-caught-exception",
        description="a kill's reason is the first exception of the traceback: the one the gate caught and failed on, "
                    "not its assertion",
        file="mutations/judge.py",
        old="    for line in (*(ln for ln in informative if ASSERTION_END.match(ln)), *informative):\n",
        new="    for line in informative:\n",
        gates=("tests/mutations/test_runner.py::test_a_gate_that_a_mutant_crashes_is_no_kill",),
        expect="scale raised",
    ),
    Mutation(
        id="report-json-not-embedded",
        description="the HTML report carries the viewer but not the report: the page renders no score",
        file="mutations/reports.py",
        old="        f\"<script>document.querySelector('mutation-test-report-app').report = {data};</script>\",\n",
        new="",
        gates=("tests/mutations/test_reports.py::test_the_html_report_renders_in_a_real_browser",
               "tests/mutations/test_reports.py::test_all_four_reports_are_written_and_the_json_validates"),
        expect="the viewer shows the mutation score",
    ),
    Mutation(
        id="since-ignores-shared-helpers",
        description="--since runs only mutants whose own files changed, though a shared test helper changed",
        file="mutations/__main__.py", old="    if shared or \"mutations/registry.py\" in changed:",
        new="    if \"mutations/registry.py\" in changed:",
        gates=("tests/mutations/test_runner_scope.py::test_since_runs_only_the_mutants_a_diff_touches",),
        expect="a shared helper: all",
    ),
    Mutation(
        id="baseline-report-staleness-unchecked",
        description="a test report older than the tree is taken as the mutants' baseline",
        file="mutations/runner.py", old="        if path.stat().st_mtime < newest:\n",
        new="        if path.stat().st_mtime < newest and False:\n",
        gates=("tests/mutations/test_runner_baseline_report.py::"
               "test_a_fresh_report_of_the_suite_is_the_baseline_and_a_red_or_stale_one_is_not",),
        expect="non-vacuity: a report older than the tree is never the baseline",
    ),
    # CI's run of 2026-12-04 ended red on one server mutant's pytest INTERNALERROR (rc 3), not reproduced in 30 runs
    Mutation(
        id="internal-error-judged-without-a-rerun",
        description="a gate run that pytest itself ends in an internal error is judged as it stands: one flake of the "
                    "harness reads as a mutant not killed",
        file="mutations/runner.py",
        old="            if first_error is not None:  # pytest's own failure says nothing of the mutant: once more, said\n",
        new="            if False:\n",
        gates=("tests/mutations/test_runner.py::test_a_pytest_internal_error_is_rerun_once_and_said",),
        expect="harness-once",
    ),
    Mutation(
        id="internal-error-reason-is-the-tracebacks-head",
        description="an internal error's reason is the first lines of its traceback, which never name the exception",
        file="mutations/judge.py",
        old="        return Verdict.ERROR, f\"pytest internal error: {internal_error_line(o)}\", [], []\n",
        new="        return Verdict.ERROR, f\"pytest rc={o.rc}: {o.log.strip()[:600]}\", [], []\n",
        gates=("tests/mutations/test_runner.py::test_a_pytest_internal_error_is_rerun_once_and_said",),
        expect="harness-always",
    ),
    Mutation(
        id="baseline-internal-error-not-rerun",
        description="the unmutated gates' run is not rerun after a pytest internal error: one flake of the harness "
                    "aborts the whole mutation run",
        file="mutations/runner.py",
        old="        if is_internal_error(out):  # pytest's own failure, as a mutant's: once more, said\n",
        new="        if False:\n",
        gates=("tests/mutations/test_runner.py::test_a_baseline_that_pytest_ends_in_an_internal_error_is_rerun_once",),
        expect="aborted the run",
    ),
    Mutation(
        id="internal-error-read-from-exit-code-3-only",
        description="pytest's internal error counts only at exit 3: under xdist a worker's failing hook exits 0 (2 of 8 "
                    "runs), and a baseline it cut short is taken as it stands",
        file="mutations/judge.py",
        old="    if _junit_internal_error(o):\n        return True\n",
        new="",
        gates=("tests/mutations/test_runner.py::test_what_reads_as_pytests_own_failure",),
    ),
    # The H200 run of session 28: at --jobs 8 the memory check's 0.9 of the device left 26 baseline tests beside it
    # out of memory
    Mutation(
        id="whole-device-gates-run-beside-others",
        description="on the GPU lane a gate file that sizes the KV cache to the device runs beside the other gates",
        file="mutations/runner.py",
        old="        return any(f in self.cfg.whole_device_files for f in files)\n", new="        return False\n",
        gates=(f"{WHOLE}::test_a_whole_device_gate_file_runs_alone_in_the_baseline_and_its_mutants_after_the_others",
               f"{WHOLE}::test_a_hang_in_the_shared_gates_stops_the_baseline_before_the_whole_device_group"),
    ),
    Mutation(
        id="whole-device-baseline-under-xdist",
        description="a whole-device gate file's baseline runs alone but under xdist workers, one test per worker",
        file="mutations/runner.py",
        old="((rest, self.cfg.jobs), (alone, 1)):", new="((rest, self.cfg.jobs), (alone, self.cfg.jobs)):",
        gates=(f"{WHOLE}::test_a_whole_device_gate_file_runs_alone_in_the_baseline_and_its_mutants_after_the_others",),
    ),
    Mutation(
        id="baseline-hang-waits-out-the-next-group",
        description="after the shared gates' baseline hangs, the whole-device group runs its own limit out too, and "
                    "the hang reads as a red baseline",
        file="mutations/runner.py",
        old="                    if outs[-1].is_timeout:", new="                    if False:",
        gates=(f"{WHOLE}::test_a_hang_in_the_shared_gates_stops_the_baseline_before_the_whole_device_group",),
    ),
    Mutation(
        id="forked-gate-keeps-the-servers-main",
        description="a forked gate keeps the fork server's __main__: a process it spawns re-imports the server's file",
        file="mutations/forkserver_main.py", old='        sys.modules["__main__"] = types.ModuleType("__main__")\n',
        new="", gates=(FORKED,),
    ),
    Mutation(
        id="forked-gate-inherits-the-reaper",
        description="a forked gate keeps the server's SIGCHLD reaper: it reaps the gate's own subprocesses first",
        file="mutations/forkserver_main.py",
        old="        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the gates' own", new="        pass  # the gates' own",
        gates=(FORKED,),
    ),
    Mutation(
        id="forked-gate-runs-under-the-servers-env",
        description="a forked gate runs under the server's environment, not its own (a mutant's VT_* flags lost)",
        file="mutations/forkserver_main.py", old='        os.environ.update(req["env"])\n', new="", gates=(FORKED,),
    ),
    Mutation(
        id="forked-gate-path-leaves-out-the-sandbox",
        description="a forked gate's import path leaves out its sandbox",
        file="mutations/forkserver_main.py",
        old='        sys.path[:0] = [req["cwd"], *(p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p)]\n',
        new="", gates=(FORKED,),
    ),
    Mutation(
        id="seeded-bytecode-trusted-unchecked",
        description="the sandbox's seeded bytecode is trusted without checking its source: a mutant runs unmutated code",
        file="mutations/sandbox.py", old="PycInvalidationMode.CHECKED_HASH", new="PycInvalidationMode.UNCHECKED_HASH",
        gates=(SEEDED,), expect="ran from its seeded, unmutated bytecode",
    ),
    Mutation(
        id="seeded-bytecode-leaves-out-the-gates",
        description="the seeding compiles the modules but never collects the gates: each mutant rewrites them again",
        file="mutations/sandbox.py", old='    subprocess.run([sys.executable, "-m", "pytest", "--collect-only"',
        new='    0 and subprocess.run([sys.executable, "-m", "pytest", "--collect-only"', gates=(SEEDED,),
        expect="pytest's rewritten gate module is seeded too",
    ),
    Mutation(
        id="forked-gate-waits-on-a-dead-server",
        description="a forked gate's wait never asks whether its fork server (which reaps it) is alive: a wait forever",
        file="mutations/forkserver.py",
        old="            if self._server.poll() is not None and not self._status.exists():",
        new="            if False:", gates=(f"{FORK}::test_a_gate_whose_fork_server_dies_ends_in_its_typed_error_not_a_wait",),
    ),
    Mutation(
        id="sandbox-parent-ignores-shm-room",
        description="sandboxes go to /dev/shm whatever room it has left: a small one fills, and the gates fail there",
        file="mutations/sandbox.py",
        old="    return shm if os.access(shm, os.W_OK) and st.f_bavail * st.f_frsize >= SHM_ROOM_BYTES else None\n",
        new="    return shm if os.access(shm, os.W_OK) else None\n",
        gates=(NO_SHM,), expect="a /dev/shm without the room is not used",
    ),
    Mutation(
        id="mutant-sandbox-always-on-dev-shm",
        description="a mutant's sandbox is made on /dev/shm even where sandbox_parent says there is no room",
        file="mutations/runner.py",
        old='        with tempfile.TemporaryDirectory(prefix=f"vt-mut-{m.id}-", dir=sandbox_parent()) as d:\n',
        new='        with tempfile.TemporaryDirectory(prefix=f"vt-mut-{m.id}-", dir="/dev/shm") as d:\n',
        gates=(NO_SHM,), expect="sandboxes outside the temp folder",
    ),
]
