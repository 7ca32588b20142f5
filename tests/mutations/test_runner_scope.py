"""What a mutation run takes in: the sandbox's tree (the files on disk, ignored ones left out), with --since
the mutants a diff touches (a fresh test report as the baseline: test_runner_baseline_report.py). Apart from
test_runner.py, whose runs take seconds each: a mutant gated here runs these checks only."""

from __future__ import annotations

from pathlib import Path

import pytest

from mutations.model import Mutation
from tests.mutations.runner_rig import BREAK_SCALE, M, T


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
