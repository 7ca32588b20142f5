"""The mutation runner's test rig: a small fixture project (not vt itself) and a run over it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mutations.model import Mutation
from mutations.runner import RunConfig, Runner

FIXTURE = Path(__file__).parent / "fixture_project"
T = "tests/test_calc.py"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    dest = tmp_path / "proj"
    shutil.copytree(FIXTURE, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def run(project: Path, *entries: Mutation, cache: Path | None = None, floor: float = 30.0,
        baseline_timeout: float = 600.0, baseline_junit: Path | None = None, factor: float = 3.0, jobs: int = 2,
        whole_device: frozenset[str] = frozenset(), whole_files: bool = False):
    """factor x a gate's baseline is its mutant's time limit, never less than floor. The baseline counts the
    runner's STARTUP_S (5 s) beside the fixture's milliseconds of tests, so factor 3 makes a limit of ~15 s
    whatever the floor: a test that waits a hanging mutant out passes factor=0, and its floor is the limit."""
    cfg = RunConfig(root=project, jobs=jobs, timeout_factor=factor, timeout_floor=floor, cache_dir=cache,
                    baseline_timeout=baseline_timeout, baseline_junit=baseline_junit, whole_device_files=whole_device,
                    whole_files=whole_files)
    return {r.mutation.id: r for r in Runner(cfg).run(list(entries))}


def M(id: str, old: str, new: str, gates: tuple[str, ...], **kw) -> Mutation:
    return Mutation(id=id, description=id, file="calc.py", old=old, new=new, gates=gates, **kw)


BREAK_SCALE = dict(old="    return x * k", new="    return x + k")
BREAK_ADD = dict(old="    return a + b", new="    return a - b")
