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


def _harness_break(marker: Path, always: bool) -> Mutation:
    """A mutant that breaks scale, and whose gate run ends in a pytest INTERNALERROR (a hook that raises
    outside any test) on its first run, or on every run."""
    hook = (f"import calc as _calc\n_calc.scale = lambda x, k: x + k\n\n\n"
            f"def pytest_runtest_logreport(report):\n"
            f"    marker = Path({str(marker)!r})\n"
            f"    if {always} or not marker.exists():\n"
            f"        marker.write_text('broke')\n"
            f"        raise RuntimeError('the harness broke')\n\n\n"
            f"def pytest_sessionstart(session):")
    return Mutation(id=f"harness-{'always' if always else 'once'}", description="a hook raises",
                    file="tests/conftest.py", old="def pytest_sessionstart(session):", new=hook,
                    gates=(f"{T}::test_scale",))


def test_a_pytest_internal_error_is_rerun_once_and_said(project: Path, tmp_path: Path) -> None:
    """pytest's own failure (rc 3) says nothing of the mutant: it is judged on a second run, and the report says
    so with the exception; one that recurs reads Error naming that exception, never a bare traceback's head."""
    from mutations.reports import summary

    res = run(project, _harness_break(tmp_path / "once", always=False),
              _harness_break(tmp_path / "always", always=True), M("plain", **BREAK_SCALE, gates=(f"{T}::test_scale",)))
    once, always, plain = res["harness-once"], res["harness-always"], res["plain"]
    assert (tmp_path / "once").exists(), "non-vacuity: the first run's hook raised"
    assert once.verdict is Verdict.KILLED and "RuntimeError: the harness broke" in once.rerun_because, once
    assert always.verdict is Verdict.ERROR and "RuntimeError: the harness broke" in always.reason, always
    assert plain.verdict is Verdict.KILLED and plain.rerun_because == "", "a clean first run is judged as it is"
    text = summary(list(res.values()))
    assert "harness-once: Killed; first run: RuntimeError: the harness broke" in text, text
