"""A fresh test report of the suite as the mutation run's baseline, and never a red or stale one. Apart from
test_runner_scope.py: this test runs the runner three times (~7 s), which the scope tests' mutants need not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mutations.model import Verdict
from mutations.runner import BaselineError
from tests.mutations.runner_rig import BREAK_SCALE, M, T, run


def _suite_report(project: Path, path: Path, *, break_it: bool = False) -> Path:
    """A JUnit report of the fixture's suite (its test lane), over a broken calc.py when asked, then restored."""
    import subprocess
    import sys

    calc = project / "calc.py"
    good = calc.read_text()
    if break_it:
        calc.write_text(good.replace("    return a + b", "    return a - b"))
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={path}",
                    "-o", "junit_family=xunit1", "tests"], cwd=project, capture_output=True)
    if break_it:
        calc.write_text(good)
        os.utime(path)  # the red report as if of this tree: only its red gates may make it no baseline
    return path


def test_a_fresh_report_of_the_suite_is_the_baseline_and_a_red_or_stale_one_is_not(project: Path, tmp_path: Path,
                                                                                   capfd) -> None:
    entry = M("killed", **BREAK_SCALE, gates=(f"{T}::test_scale",))
    report = _suite_report(project, tmp_path / "suite.xml")
    res = run(project, entry, baseline_junit=report)
    assert res["killed"].verdict is Verdict.KILLED
    assert f"from {report}" in capfd.readouterr().err, "the report was the baseline: no baseline run"
    red = _suite_report(project, tmp_path / "red.xml", break_it=True)
    with pytest.raises(BaselineError, match="red"):
        run(project, entry, baseline_junit=red)  # a report whose gates failed is a red baseline, as a run's is
    capfd.readouterr()
    (project / "calc.py").write_text((project / "calc.py").read_text() + "\n# edited after the report\n")
    assert run(project, entry, baseline_junit=report)["killed"].verdict is Verdict.KILLED
    err = capfd.readouterr().err
    assert "older than the tree: running the baseline" in err and f"from {report}" not in err, (
        "non-vacuity: a report older than the tree is never the baseline")
