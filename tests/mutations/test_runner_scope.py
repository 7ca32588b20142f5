"""What a mutation run takes in: the sandbox's tree (the files on disk, ignored ones left out), with --since
the mutants a diff touches, and a fresh test report as the baseline. Apart from test_runner.py, whose runs
take seconds each: a mutant gated here runs these checks only."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mutations.model import Mutation, Verdict
from mutations.runner import BaselineError
from tests.mutations.runner_rig import BREAK_SCALE, M, T, run


def test_the_sandbox_takes_the_tree_as_it_is_on_disk_minus_ignored_files(tmp_path: Path) -> None:
    """A copied working tree can carry an older git index than its files (the GPU lane's did): files
    git does not track yet still belong in the sandbox; ignored ones never do."""
    import subprocess

    from mutations.sandbox import tracked_files

    repo = tmp_path / "repo"
    repo.mkdir()
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    (repo / ".gitignore").write_text("build/\n")
    (repo / "tracked.py").write_text("x = 1\n")
    git("add", ".gitignore", "tracked.py")
    (repo / "new_module.py").write_text("y = 2\n")
    (repo / "build").mkdir()
    (repo / "build" / "out.bin").write_text("z")
    files = tracked_files(repo)
    assert "tracked.py" in files, "non-vacuity: the tracked file is listed"
    assert "new_module.py" in files, "an untracked, not ignored file belongs in the sandbox"
    assert "build/out.bin" not in files


def test_since_runs_only_the_mutants_a_diff_touches(project: Path) -> None:
    import subprocess

    from mutations.__main__ import touched_since

    def git(*a: str) -> None:
        subprocess.run(["git", *a], cwd=project, check=True, capture_output=True)

    git("init", "-q")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "empty")
    git("add", "-A")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "base")
    on_calc = M("calc", gates=(f"{T}::test_scale",), **BREAK_SCALE)
    elsewhere = Mutation(id="other", description="d", file="other.py", old="a", new="b",
                         gates=("tests/test_other.py::t",))
    assert touched_since([on_calc, elsewhere], project, "HEAD") == [], "non-vacuity: a clean tree touches nothing"
    (project / "calc.py").write_text((project / "calc.py").read_text() + "\n# touched\n")
    assert touched_since([on_calc, elsewhere], project, "HEAD") == [on_calc]
    (project / "tests" / "helpers_new.py").write_text("X = 1\n")
    assert touched_since([on_calc, elsewhere], project, "HEAD") == [on_calc, elsewhere], "a shared helper: all"
    with pytest.raises(ValueError):
        touched_since([on_calc], project, "no-such-ref")


def test_since_runs_every_mutant_when_a_registry_module_changes(project: Path) -> None:
    import subprocess

    from mutations.__main__ import touched_since

    def git(*a: str) -> None:
        subprocess.run(["git", *a], cwd=project, check=True, capture_output=True)

    git("init", "-q")
    git("add", "-A")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "base")
    on_calc = M("calc", gates=(f"{T}::test_scale",), **BREAK_SCALE)
    elsewhere = Mutation(id="other", description="d", file="other.py", old="a", new="b",
                         gates=("tests/test_other.py::t",))
    assert touched_since([on_calc, elsewhere], project, "HEAD") == [], "non-vacuity: a clean tree touches nothing"
    (project / "mutations" / "registry").mkdir(parents=True)
    (project / "mutations" / "registry" / "gates.py").write_text("POOL = 'tests/vt/test_pool.py'\n")
    assert touched_since([on_calc, elsewhere], project, "HEAD") == [on_calc, elsewhere], "a registry module: all"


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
