"""Self-tests of the mutation runner on a small fixture project (not vt itself)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mutations.model import Mutation, Verdict
from mutations.runner import BaselineError
from mutations.sandbox import manifest
from tests.mutations.runner_rig import BREAK_ADD, BREAK_SCALE, M, T, run


def test_killed_noop_survived_overreach_and_the_checkout_untouched(project: Path, capfd) -> None:
    before = manifest(project)
    res = run(
        project,
        M("killed", **BREAK_SCALE, gates=(f"{T}::test_scale",), expect="scale is wrong"),
        M("noop", old="no such text", new="x", gates=(f"{T}::test_scale",)),
        M("miscount", old="    return", new="    return  ", gates=(f"{T}::test_scale",)),  # 3 places, 1 declared
        M("wrong-text", **BREAK_SCALE, gates=(f"{T}::test_scale",), expect="a different message"),
        M("overreach", **BREAK_ADD, gates=(f"{T}::test_add",)),
        M("survived", old="    out = 0", new="    out = 0  # harmless", gates=(f"{T}::test_total",)),
        whole_files=True,  # the gate files whole: Overreach can be seen
    )
    assert res["killed"].verdict is Verdict.KILLED and "scale is wrong" in res["killed"].reason
    assert res["noop"].verdict is Verdict.NOT_APPLIED
    assert res["miscount"].verdict is Verdict.NOT_APPLIED and "matched 3" in res["miscount"].reason
    assert res["wrong-text"].verdict is Verdict.SURVIVED
    assert res["overreach"].verdict is Verdict.OVERREACH and f"{T}::test_total" in res["overreach"].failed_others
    assert res["survived"].verdict is Verdict.SURVIVED
    assert manifest(project) == before, "the checkout must be byte-identical after the run"
    progress = [ln for ln in capfd.readouterr().err.splitlines() if ln.startswith("[")]
    assert len(progress) == 6 and progress[-1].startswith("[6/6] "), "one progress line per mutant as it ends"


def test_by_default_a_mutant_runs_its_gates_alone(project: Path) -> None:
    """DESIGN.md's rule: only the gates run. BREAK_ADD also breaks test_total, beside its gate test_add in the same
    file: run alone, the gate's failure is the whole verdict (Killed); with the files whole, test_total fails too
    (Overreach), so the default really left it out."""
    entry = M("overreach", **BREAK_ADD, gates=(f"{T}::test_add",))
    alone = run(project, entry)["overreach"]
    assert alone.verdict is Verdict.KILLED and alone.failed_gates == [f"{T}::test_add"] and not alone.failed_others
    whole = run(project, entry, whole_files=True)["overreach"]
    assert whole.verdict is Verdict.OVERREACH and whole.failed_others == [f"{T}::test_total"], "non-vacuity"


def test_a_gate_that_a_mutant_crashes_is_no_kill(project: Path) -> None:
    """A gate must go red on its own assertion: a mutant that makes the code under test raise ends the gate on an
    exception that escapes it, and that is Crashed (not Killed), naming the exception. The same gate killed by a
    wrong value, and a test that catches the crash and fails on it, are both Killed."""
    crash = dict(old="    return x * k", new="    return x * k[0]")  # TypeError: 'int' is not subscriptable
    (project / T).write_text((project / T).read_text() + (
        "\n\ndef test_scale_caught():\n    try:\n        got = scale(2, 3)\n    except TypeError as e:\n"
        "        raise AssertionError(f'scale raised: {e}') from e\n    assert got == 6\n"))
    res = run(project, M("crash", **crash, gates=(f"{T}::test_scale",)),
              M("value", **BREAK_SCALE, gates=(f"{T}::test_scale",)),
              M("caught", **crash, gates=(f"{T}::test_scale_caught",)))
    assert res["crash"].verdict is Verdict.CRASHED, (res["crash"].verdict, res["crash"].reason)
    assert "TypeError" in res["crash"].reason and "not on an assertion" in res["crash"].reason, res["crash"].reason
    assert res["value"].verdict is Verdict.KILLED, "non-vacuity: a wrong value is a kill"
    assert res["caught"].verdict is Verdict.KILLED and "scale raised" in res["caught"].reason, res["caught"].reason


def test_a_red_baseline_aborts(project: Path) -> None:
    (project / "calc.py").write_text((project / "calc.py").read_text().replace("x * k", "x - k"))
    with pytest.raises(BaselineError, match="red"):
        run(project, M("any", **BREAK_ADD, gates=(f"{T}::test_scale",)))


def test_an_empty_gate_aborts(project: Path) -> None:
    with pytest.raises(BaselineError, match="collected nothing"):
        run(project, M("ghost", **BREAK_ADD, gates=(f"{T}::test_does_not_exist", f"{T}::test_add")))


def test_a_collection_error_reads_error(project: Path) -> None:
    res = run(project, M("syntax", old="def scale(x, k):", new="def scale(x, k)", gates=(f"{T}::test_scale",)))
    assert res["syntax"].verdict is Verdict.ERROR


def test_the_sandbox_guard_refuses_code_imported_from_elsewhere(tmp_path: Path) -> None:
    """vt's conftest refuses to run when vt is imported from outside VT_MUTATION_SANDBOX."""
    import subprocess
    import sys

    env = dict(os.environ, VT_MUTATION_SANDBOX=str(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/vt/test_env.py"],
                          cwd=Path(__file__).parents[2], env=env, capture_output=True, text=True)
    assert proc.returncode == 4 and "mutation sandbox leak" in proc.stdout + proc.stderr


def test_unchanged_mutants_come_from_the_cache(project: Path, tmp_path: Path) -> None:
    entry = M("killed", **BREAK_SCALE, gates=(f"{T}::test_scale",))
    first = run(project, entry, cache=tmp_path / "cache")["killed"]
    second = run(project, entry, cache=tmp_path / "cache")["killed"]
    assert not first.is_cached and second.is_cached and second.verdict is Verdict.KILLED
    whole = run(project, entry, cache=tmp_path / "cache", whole_files=True)["killed"]
    assert not whole.is_cached, "the files whole are another run: the gates alone's verdict is not theirs"
    (project / "tests/test_calc.py").write_text((project / "tests/test_calc.py").read_text() + "\n# edited\n")
    assert not run(project, entry, cache=tmp_path / "cache")["killed"].is_cached, "a gate edit invalidates"


def test_the_registry_self_check_never_counts_in_a_verdict() -> None:
    """An edited anchor line turns the well-formedness test red whatever the edit does: it is neither a
    gate nor an 'other' failure, so a kill is a kill of behaviour."""
    from mutations.judge import Outcome, judge
    from mutations.model import META_TESTS

    gate = "tests/x.py::test_gate"
    m = Mutation(id="m", description="d", file="f.py", old="a", new="b", gates=(gate,))
    o = Outcome(rc=1, seconds=0.1, failed={gate: "AssertionError: the gate", META_TESTS[0]: "anchor matches 0 places"})
    verdict, reason, _, others = judge(m, o)
    assert verdict is Verdict.KILLED and others == [], (verdict, reason)
    o.failed["tests/x.py::test_other"] = "AssertionError"
    assert judge(m, o)[0] is Verdict.OVERREACH, "non-vacuity: another failure still reads as overreach"
    with pytest.raises(ValueError, match="no gate of behaviour"):
        Mutation(id="m2", description="d", file="f.py", old="a", new="b", gates=(META_TESTS[0],))


def raising_hook_body(marker: Path, always: bool, message: str) -> str:
    """A conftest hook's body that raises RuntimeError(message) the first time any process of the run gets there (an
    exclusive create: xdist's workers and controller race), or every time; each process's session appends a line to
    marker + ".sessions" (appends of a line do not interleave)."""
    return (f"    import os\n"
            f"    with open({str(marker)!r} + '.sessions', 'a') as log:\n"
            f"        log.write(str(os.getpid()) + '\\n')\n"
            f"    try:\n"
            f"        os.close(os.open({str(marker)!r}, os.O_CREAT | os.O_EXCL | os.O_WRONLY))\n"
            f"        first = True\n"
            f"    except FileExistsError:\n"
            f"        first = False\n"
            f"    if {always} or first:\n"
            f"        raise RuntimeError('{message}')\n")


def _harness_break(marker: Path, always: bool, hook: str = "pytest_runtest_logreport(report)") -> Mutation:
    """A mutant that breaks scale, and whose gate run ends in a pytest INTERNALERROR (a hook that raises outside any
    test: its traceback in JUnit's "internal error" case, or, from pytest_sessionstart, in the log alone) on its first
    run, or on every run. Each run of the hook adds a line to marker."""
    body = raising_hook_body(marker, always, "the harness broke\\nin two lines")
    sessionstart = hook.startswith("pytest_sessionstart")
    new = (f"import calc as _calc\n_calc.scale = lambda x, k: x + k\n\n\n"
           f"def {hook}:\n{body}" + ("" if sessionstart else "\n\ndef pytest_sessionstart(session):"))
    name = f"harness-{'always' if always else 'once'}{'-at-start' if sessionstart else ''}"
    return Mutation(id=name, description="a hook raises", file="tests/conftest.py",
                    old="def pytest_sessionstart(session):" + ("\n" if sessionstart else ""),
                    new=new + ("    return\n\n\ndef _sandbox_guard(session):\n" if sessionstart else ""),
                    gates=(f"{T}::test_scale",))


def test_a_pytest_internal_error_is_rerun_once_and_said(project: Path, tmp_path: Path) -> None:
    """pytest's own failure (rc 3) says nothing of the mutant: it is judged on a second run, once, and the report says
    so with the exception's type and first line; one that recurs reads Error naming that exception, whether JUnit's
    report holds the traceback or only the log does."""
    from mutations.reports import summary

    res = run(project, _harness_break(tmp_path / "once", always=False),
              _harness_break(tmp_path / "always", always=True),
              _harness_break(tmp_path / "start", always=True, hook="pytest_sessionstart(session)"),
              M("plain", **BREAK_SCALE, gates=(f"{T}::test_scale",)))
    once, always, start, plain = (res[k] for k in ("harness-once", "harness-always", "harness-always-at-start",
                                                   "plain"))
    said = "RuntimeError: the harness broke"
    assert once.verdict is Verdict.KILLED and said in once.rerun_because, once
    pids = (tmp_path / "once.sessions").read_text().split()
    assert len(set(pids)) >= 2, "non-vacuity: a second pytest ran the hook after the first raised"
    assert always.verdict is Verdict.ERROR and said in always.reason and said in always.rerun_because, always
    assert always.reason.endswith(said), f"the exception's type and first line, no more: {always.reason}"
    assert start.verdict is Verdict.ERROR and said in start.reason, start
    starts = (tmp_path / "start.sessions").read_text().split()
    assert len(starts) == 2, f"a run and one rerun, never a third: {starts}"
    assert plain.verdict is Verdict.KILLED and plain.rerun_because == "", "a clean first run is judged as it is"
    text = summary(list(res.values()))
    assert f"harness-once: Killed; first run: {said}" in text, text


def test_a_baseline_that_pytest_ends_in_an_internal_error_is_rerun_once(project: Path, tmp_path: Path) -> None:
    """The unmutated gates' run gets the mutants' rerun: a flake of the harness there neither aborts the run nor is
    taken as a baseline; twice, the run stops naming the exception. One job: the baseline runs without xdist, whose
    controller may or may not turn a worker's failing hook into its own INTERNALERROR (CI's run of 5b9fb1e saw it
    not, and the mutant of this rerun survived)."""
    conftest = project / "tests/conftest.py"
    plain = conftest.read_text()

    def breaks(marker: Path, always: bool) -> None:
        conftest.write_text(plain + "\n\ndef pytest_runtest_logreport(report):\n"
                            + raising_hook_body(marker, always, "the baseline broke"))

    breaks(tmp_path / "once", always=False)
    try:
        res = run(project, M("killed", **BREAK_SCALE, gates=(f"{T}::test_scale",)), jobs=1)
    except BaselineError as e:
        pytest.fail(f"one internal error of pytest's aborted the run: {e}")
    assert (tmp_path / "once").exists(), "non-vacuity: the baseline's first run raised"
    assert res["killed"].verdict is Verdict.KILLED, res
    breaks(tmp_path / "always", always=True)
    with pytest.raises(BaselineError, match="internal error twice: RuntimeError: the baseline broke"):
        run(project, M("killed", **BREAK_SCALE, gates=(f"{T}::test_scale",)), jobs=1)


def test_what_reads_as_pytests_own_failure() -> None:
    """JUnit's internal-error case at any exit code (xdist exited 0 on a worker's failing hook in 2 of 8 runs here),
    exit 3 with an INTERNALERROR traceback in the log; never exit 3 alone, nor a gate's output quoting one."""
    from mutations.judge import Outcome, internal_error_line, is_internal_error

    junit = {"pytest::internal": ("internal error\nTraceback (most recent call last):\n  File \"x.py\", line 1\n"
                                  "RuntimeError: broke\nin two lines")}
    logged = ("....\nINTERNALERROR> Traceback (most recent call last):\nINTERNALERROR>   File \"x.py\"\n"
              "INTERNALERROR> KeyError: 'k'\n1 passed")
    assert is_internal_error(Outcome(rc=0, seconds=1, errors=dict(junit)))
    assert internal_error_line(Outcome(rc=0, seconds=1, errors=dict(junit))) == "RuntimeError: broke"
    assert is_internal_error(Outcome(rc=3, seconds=1, log=logged))
    assert internal_error_line(Outcome(rc=3, seconds=1, log=logged)) == "KeyError: 'k'"
    assert not is_internal_error(Outcome(rc=3, seconds=1, log="1 passed")), "its own exit 3"
    assert not is_internal_error(Outcome(rc=1, seconds=1, log=logged)), "a failing gate that quotes another pytest"
    assert not is_internal_error(Outcome(rc=3, seconds=1, log=logged, is_timeout=True)), "a timeout is a timeout"
