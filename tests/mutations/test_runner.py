"""Self-tests of the mutation runner on a small fixture project (not vt itself)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from mutations.model import Mutation, Verdict
from mutations.runner import BaselineError, RunConfig, Runner
from mutations.sandbox import manifest
from tests.helpers import ends_within

FIXTURE = Path(__file__).parent / "fixture_project"
T = "tests/test_calc.py"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    dest = tmp_path / "proj"
    shutil.copytree(FIXTURE, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def run(project: Path, *entries: Mutation, cache: Path | None = None, floor: float = 30.0,
        baseline_timeout: float = 600.0):
    cfg = RunConfig(root=project, jobs=2, timeout_factor=3.0, timeout_floor=floor, cache_dir=cache,
                    baseline_timeout=baseline_timeout)
    return {r.mutation.id: r for r in Runner(cfg).run(list(entries))}


def M(id: str, old: str, new: str, gates: tuple[str, ...], **kw) -> Mutation:
    return Mutation(id=id, description=id, file="calc.py", old=old, new=new, gates=gates, **kw)


BREAK_SCALE = dict(old="    return x * k", new="    return x + k")
BREAK_ADD = dict(old="    return a + b", new="    return a - b")


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


def test_a_hanging_mutant_reads_timeout(project: Path) -> None:
    res = run(project, M("hang", old="    return x * k", new="    while True:\n        pass",
                         gates=(f"{T}::test_scale",)), floor=3.0)
    assert res["hang"].verdict is Verdict.TIMEOUT


def test_a_hanging_baseline_stops_the_run_naming_it(project: Path) -> None:
    calc = project / "calc.py"
    slow = "    import time\n    time.sleep(90)\n    return x * k"
    calc.write_text(calc.read_text().replace("    return x * k", slow))
    box = ends_within(lambda: run(project, M("any", **BREAK_ADD, gates=(f"{T}::test_scale",)),
                                   baseline_timeout=3.0), 30)
    assert isinstance(box.get("error"), BaselineError) and "a hang" in str(box["error"]), box


def _alive_with(marker: str) -> list[int]:
    """Processes (not zombies) whose command line holds marker."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if d.name.isdigit() and marker in cmd and int(d.name) != os.getpid():
            found.append(int(d.name))
    return found


def test_a_timed_out_mutant_takes_what_it_started_with_it(project: Path, tmp_path: Path) -> None:
    """A gate that starts a process (a server, a rank) and hangs: the timeout ends the run and that process."""
    started = tmp_path / "leftover-started"
    leftover = (f"    import subprocess, sys\n    subprocess.Popen([sys.executable, '-c', \"import sys, time; "
                f"open(sys.argv[1], 'w').write('up'); time.sleep(60)\", {str(started)!r}])\n"
                f"    import time\n    time.sleep(60)\n")
    box = ends_within(lambda: run(project, M("leave", old="    return x * k\n", new=leftover,
                                              gates=(f"{T}::test_scale",)), floor=4.0), 50)
    assert box["value"]["leave"].verdict is Verdict.TIMEOUT, box
    deadline = time.monotonic() + 10
    while _alive_with(str(started)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert started.exists(), "non-vacuity: the gate started its process before it hung"
    assert not _alive_with(str(started)), "the process the timed-out gate started is still running"


def test_a_collection_error_reads_error(project: Path) -> None:
    res = run(project, M("syntax", old="def scale(x, k):", new="def scale(x, k)", gates=(f"{T}::test_scale",)))
    assert res["syntax"].verdict is Verdict.ERROR


def test_the_sandbox_guard_refuses_code_imported_from_elsewhere(tmp_path: Path) -> None:
    """vt's conftest refuses to run when vt is imported from outside VT_MUTATION_SANDBOX."""
    import os
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
