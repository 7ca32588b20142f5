from __future__ import annotations

import functools
import os
from collections.abc import Iterator

import pytest

# Tests are hermetic: no GEMM tuner takes an earlier process's picks from the user's cache (a test of the tuner would
# test that process's timing, not its own), whatever the shell exports. The plan cache's own tests turn it on in a
# directory of theirs.
os.environ["VT_GEMM_PLAN_CACHE"] = "0"


@functools.cache
def has_cuda() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def _mutant_runs_do_not_shrink() -> None:
    """Under the mutation runner a gate only has to go red: hypothesis stops at the first failing example instead
    of shrinking it (which took a minute on some gates). Loaded before any test module builds its settings, so
    every settings() inherits it; the test lane and the bypass and sanitizer lanes shrink as ever."""
    from hypothesis import Phase, settings

    settings.register_profile("mutant", phases=[Phase.explicit, Phase.reuse, Phase.generate])
    settings.load_profile("mutant")


def pytest_collectstart(collector: pytest.Collector) -> None:
    """Under the mutation runner, the mutant profile is loaded just before each test module that names hypothesis
    is imported: a gate run that uses none never imports it (~1 s of every mutant's pytest start-up; the runner
    blocks hypothesis's pytest plugin, which would import it at the session's end)."""
    import os

    if not os.environ.get("VT_MUTATION_SANDBOX") or not isinstance(collector, pytest.Module):
        return
    if "hypothesis" in collector.path.read_text(errors="replace"):
        _mutant_runs_do_not_shrink()


def pytest_collection_finish(session: pytest.Session) -> None:
    """...and proof that no hypothesis test was built before it (in a module that reaches hypothesis through a
    helper without naming it): that test would shrink, silently slow."""
    import os
    import sys

    if not os.environ.get("VT_MUTATION_SANDBOX") or "hypothesis" not in sys.modules:
        return
    from hypothesis import is_hypothesis_test, settings

    if settings.get_current_profile_name() != "mutant" and any(
            is_hypothesis_test(getattr(item, "obj", None)) for item in session.items):
        raise pytest.UsageError("a hypothesis test was collected without the mutant profile: its module reaches "
                                "hypothesis without naming it (see pytest_collectstart in tests/conftest.py)")


@pytest.fixture(autouse=True)
def _root_logger_restored() -> Iterator[None]:
    """`vt.cli.main` points the root logger at the sys.stderr it finds: in a test, pytest's capture of that test,
    closed after it. Left there, every later record in that worker (httpx logs each request) reads "--- Logging
    error --- ValueError: I/O operation on closed file" in some other test's output."""
    import logging

    root = logging.getLogger()
    before, level = set(root.handlers), root.level
    yield
    for handler in root.handlers[:]:
        if type(handler) is logging.StreamHandler and handler not in before:  # pytest's own are subclasses
            root.removeHandler(handler)
    root.setLevel(level)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if has_cuda():
        return
    skip = pytest.mark.skip(reason="gpu: no CUDA GPU with CuPy on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under the mutation runner, prove the code under test is the sandbox's, not the checkout's."""
    import os
    from pathlib import Path

    sandbox = os.environ.get("VT_MUTATION_SANDBOX")
    if not sandbox:
        return
    import backends
    import models
    import seams
    import vt

    for mod in (vt, backends, models, seams):
        where = Path(mod.__file__ or "").resolve()
        if not where.is_relative_to(Path(sandbox).resolve()):
            raise pytest.UsageError(f"mutation sandbox leak: {mod.__name__} imported from {where}, not {sandbox}")
