"""Run the gates in a sandbox and judge from per-test results (JUnit XML), not exit codes."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from mutations.forkserver import ForkedPytest, ForkServer
from mutations.model import META_TESTS, Mutation, Verdict


@dataclass(slots=True)
class Outcome:
    rc: int
    seconds: float
    is_timeout: bool = False
    passed: set[str] = field(default_factory=set)
    skipped: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)  # test id -> failure text
    errors: dict[str, str] = field(default_factory=dict)  # collection / setup errors
    log: str = ""
    file_seconds: dict[str, float] = field(default_factory=dict)  # gate file -> its tests' summed time


def _node_id(classname: str, name: str, files: set[str]) -> str:
    """JUnit's (classname, name) back to a pytest node id, using the gate files to split module/class."""
    parts = classname.split(".")
    for i in range(len(parts), 0, -1):
        mod = "/".join(parts[:i]) + ".py"
        if mod in files:
            return "::".join([mod, *parts[i:], name])
    return f"{classname}::{name}"


LANE_REASON = re.compile(r"\[bypass-lane:[^\]]*\]")


def parse_junit(path: Path, files: set[str]) -> tuple[set[str], dict[str, str], dict[str, str], set[str]]:
    """(passed, failed, errors, skipped) by node id; a lane's skip reason in an id is dropped, so a
    gate names one case whether or not this lane skips it."""
    passed: set[str] = set()
    skipped: set[str] = set()
    failed: dict[str, str] = {}
    errors: dict[str, str] = {}
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        nid = LANE_REASON.sub("", _node_id(case.get("classname", ""), case.get("name", ""), files))
        fail = case.find("failure")
        err = case.find("error")
        if fail is not None:
            failed[nid] = (fail.get("message") or "") + "\n" + (fail.text or "")
        elif err is not None:
            errors[nid] = (err.get("message") or "") + "\n" + (err.text or "")
        elif case.find("skipped") is None:
            passed.add(nid)
        else:
            skipped.add(nid)
    return passed, failed, errors, skipped


# pytest plugins no gate uses, blocked in every gate run: each one's start-up is paid once per mutant. The
# hypothesis plugin imports all of hypothesis at the session's end (its terminal summary; ~1 s of a 1.5 s pytest
# start-up) even where no test uses it; hypothesis itself works without it (the plugin adds reporting and the
# fixture health check, which the test lanes keep). anyio's and pytest-benchmark's fixtures are used nowhere.
UNUSED_PLUGINS = ("hypothesispytest", "anyio", "benchmark")
PYTEST_ARGS = ("-p", "no:cacheprovider", "-p", "no:randomly",
               *(a for name in UNUSED_PLUGINS for a in ("-p", f"no:{name}")))


def run_gates(sandbox: Path, m: Mutation, timeout: float | None, whole_files: bool = False,
              server: ForkServer | None = None) -> Outcome:
    """The mutant's gate tests alone (DESIGN.md: the runner runs only the gates), or with whole_files their files
    whole, so that an unnamed test of theirs that also fails reads as Overreach."""
    return run_files(sandbox, m.gate_files, m.env, timeout, targets=None if whole_files else m.gates, server=server)


def gate_env(sandbox: Path | None, extra_env: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
    """The environment of a gate run (without a sandbox: what every gate run shares, the fork server's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VT_"))}
    env.update(dict(extra_env))
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = "1"  # mutants run in parallel, one per core: BLAS threads would only spin against them
    if sandbox is not None:
        # the caller's other entries follow (a lane's carried wheels), made absolute (a gate runs in the sandbox);
        # the checkout itself never does
        kept = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join([str(sandbox), *(p for p in kept if p != os.getcwd())])
        # import the sandbox's code, never the checkout's (its bytecode
        # lands in the sandbox's own __pycache__; the libraries' caches stay usable)
        env["VT_MUTATION_SANDBOX"] = str(sandbox)
    return env


def run_files(sandbox: Path, files: tuple[str, ...], extra_env: tuple[tuple[str, str], ...], timeout: float | None,
              workers: int = 1, targets: tuple[str, ...] | None = None, server: ForkServer | None = None) -> Outcome:
    """pytest over these test files in the sandbox (with `workers` xdist processes when more than one), or over
    `targets` (node ids within them) where given; forked by the server where one is given (one worker only)."""
    report = sandbox / ".mutation-junit.xml"
    env = gate_env(sandbox, extra_env)
    args = ["-q", "--tb=short", *PYTEST_ARGS, f"--basetemp={sandbox / '.pytest-tmp'}", f"--junitxml={report}",
            "-o", "junit_family=xunit1",
            *(["-n", str(workers)] if workers > 1 else []), *(targets if targets is not None else files)]
    report.unlink(missing_ok=True)  # a run that writes none (a crash) must not be read as the last run's
    t0 = time.monotonic()
    log_path = sandbox / ".mutation-gates.log"
    # Output to a file, not a pipe: a process the gates leave behind (a server, a rank) cannot hold the
    # runner's read open. Its own session: a timeout kills the whole tree, not pytest alone.
    with open(log_path, "w+", errors="replace") as log:
        proc: subprocess.Popen | ForkedPytest
        if server is not None and workers == 1:
            # the server's preloaded libraries were imported before pytest could mark them for rewriting: said once
            # by pytest per library and per mutant, and nothing to do with the gates
            proc = server.start(["-W", "ignore::pytest.PytestAssertRewriteWarning", *args], sandbox, env, log_path)
        else:
            proc = subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=sandbox, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_tree(proc)
            return Outcome(rc=-1, seconds=time.monotonic() - t0, is_timeout=True, log=_tail(log_path, 4000))
        _kill_tree(proc)  # what the gates started and left running goes with them
    out = Outcome(rc=proc.returncode, seconds=time.monotonic() - t0, log=_tail(log_path, 6000))
    if report.exists():
        out.passed, out.failed, out.errors, out.skipped = parse_junit(report, set(files))
        out.file_seconds = file_seconds(report, set(files))
    return out


def file_seconds(path: Path, files: set[str]) -> dict[str, float]:
    """Each test file's summed test time, from the JUnit report."""
    out: dict[str, float] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        f = _node_id(case.get("classname", ""), case.get("name", ""), files).split("::")[0]
        out[f] = out.get(f, 0.0) + float(case.get("time") or 0.0)
    return out


def _kill_tree(proc: subprocess.Popen | ForkedPytest) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _tail(path: Path, n: int) -> str:
    """The last n characters of a log (a test may print bytes that are not UTF-8)."""
    return path.read_text(errors="replace")[-n:]


def _matches(gate: str, nid: str) -> bool:
    return nid == gate or nid.startswith(gate + "[") or nid.startswith(gate + "::")


PYTEST_INTERNAL_ERROR = 3  # pytest.ExitCode.INTERNAL_ERROR: a hook or plugin raised, not a test
ERROR_MARK = re.compile(r"^E(?=\s)")  # pytest's mark on the lines of an error it reports
EXCEPTION_LINE = re.compile(r"^\s*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Iteration|Failed)"
                            r"(?::.*)?)$")


def _junit_internal_error(o: Outcome) -> str:
    """JUnit's "internal error" case (pytest's own pytest_internalerror writes it), or ''."""
    return next((t for t in o.errors.values() if t.startswith("internal error")), "")


def _internal_error_lines(o: Outcome) -> list[str]:
    """pytest's INTERNALERROR traceback, line by line: JUnit's "internal error" case, else the log's INTERNALERROR>
    lines."""
    junit = _junit_internal_error(o)
    if junit:
        return junit.splitlines()
    return [ln.removeprefix("INTERNALERROR>").removeprefix(" ") for ln in o.log.splitlines()
            if ln.startswith("INTERNALERROR>")]


def is_internal_error(o: Outcome) -> bool:
    """Whether pytest itself failed the run: JUnit's internal-error case at any exit code (under xdist a worker's
    failing hook is reported so, and the run may still exit 0), or exit 3 with an INTERNALERROR traceback in the log
    (no report: a hook failed before it was opened). Not exit 3 alone (a process's own sys.exit(3)), nor those log
    lines alone (a gate's own output may quote another pytest's)."""
    if o.is_timeout:
        return False
    if _junit_internal_error(o):
        return True
    return o.rc == PYTEST_INTERNAL_ERROR and bool(_internal_error_lines(o))


def internal_error_line(o: Outcome) -> str:
    """The exception that ended pytest: the traceback's last line that names an exception (its type and the first line
    of its message; under xdist, the worker's, which the controller's report quotes in its `E` lines), else the
    traceback's last line."""
    lines = [ERROR_MARK.sub("", ln) for ln in _internal_error_lines(o)]
    named = [m.group(1) for m in map(EXCEPTION_LINE.match, lines) if m]
    if named:
        return named[-1][:300]
    return next((ln.strip() for ln in reversed(lines) if ln.strip()), "(no traceback)")[:300]


def judge(m: Mutation, o: Outcome) -> tuple[Verdict, str, list[str], list[str]]:
    """(verdict, reason, failed gate tests, failed unnamed tests)."""
    if o.is_timeout:
        return Verdict.TIMEOUT, f"ran past {o.seconds:.1f}s", [], []
    if is_internal_error(o):
        return Verdict.ERROR, f"pytest internal error: {internal_error_line(o)}", [], []
    if o.errors or o.rc in (2, 3, 4, 5) or not (o.passed or o.failed):  # 3 here: exited 3, no INTERNALERROR
        first = next(iter(o.errors.values()), "") or o.log
        return Verdict.ERROR, f"pytest rc={o.rc}: {first.strip()[:600]}", [], []
    failed = [t for t in o.failed if not any(_matches(meta, t) for meta in META_TESTS)]
    failed_gates = [t for t in failed if any(_matches(g, t) for g in m.gates)]
    others = [t for t in failed if t not in failed_gates]
    red = [g for g in m.gates if any(_matches(g, t) for t in failed_gates)]
    green = [g for g in m.gates if g not in red]
    if green:
        return Verdict.SURVIVED, f"gate(s) stayed green: {', '.join(green)}", failed_gates, others
    crashed = [t for t in failed_gates if not died_on_assertion(o.failed[t])]
    if crashed:
        ends = "; ".join(f"{t}: {first_line(o.failed[t])}" for t in crashed)
        return (Verdict.CRASHED, f"{len(crashed)} of {len(failed_gates)} red gate(s) ended on an exception, not on an "
                f"assertion: {ends}", failed_gates, others)
    texts = [o.failed[t] for t in failed_gates]
    if m.expect is not None and not any(m.expect in t for t in texts):
        return Verdict.SURVIVED, f"gates failed, but without {m.expect!r}: {first_line(texts[0])}", failed_gates, others
    reason = first_line(next((t for t in texts if m.expect and m.expect in t), texts[0]))
    if others:
        return Verdict.OVERREACH, f"{reason} (also failed: {', '.join(others)})", failed_gates, others
    return Verdict.KILLED, reason, failed_gates, others


# How a gate that went red ended, from JUnit's message (the exception that left the test): an assertion (`assert`,
# AssertionError, numpy.testing's) or pytest's own failures (pytest.fail, `Failed: DID NOT RAISE`). Anything else
# escaped the test: the mutant crashed it, and no assertion of the gate's guarantee was shown to go red.
ASSERTION_END = re.compile(r"(AssertionError\b|assert\b|Failed\b)")


def died_on_assertion(text: str) -> bool:
    """Whether a failed gate's text (JUnit's message, then its traceback) begins with an assertion's end."""
    return ASSERTION_END.match(text.lstrip()) is not None


def first_line(text: str) -> str:
    """The failing assertion in one line: the first informative `E` line of the traceback."""
    e_lines = [ln.strip()[1:].strip() for ln in text.splitlines() if ln.strip().startswith("E ")]
    informative = [ln for ln in e_lines if ln and not ln.endswith(":") and not ln.startswith("+")]
    # the assertion the gate ended on, before the exception it caught and turned into one (chained above it)
    for line in (*(ln for ln in informative if ASSERTION_END.match(ln)), *informative):
        if "Error" in line or "assert" in line or "Failed" in line:
            return line[:300]
    if informative:
        return informative[0][:300]
    stripped = text.strip().splitlines()
    return stripped[0][:300] if stripped else ""
