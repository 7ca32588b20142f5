"""The kernels a backend launches, by name, while a block runs (what a test of which ops a step takes reads); and
a stand-in for a binding's compiled kernels that records what it would launch."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def launched_names(backend: Any) -> Iterator[list[str]]:
    """Every launch inside the block goes through as before; its kernel's name is appended to the list yielded."""
    names: list[str] = []
    launch = backend.launch

    def spy(kernel: Any, *args: Any, **kw: Any) -> None:
        names.append(getattr(kernel, "__name__", str(kernel)))
        launch(kernel, *args, **kw)

    backend.launch = spy
    try:
        yield names
    finally:
        backend.launch = launch


class LaunchRecorder:
    """Stands in for a kernel module's `build.function` (monkeypatch the module's `function` with `.function`):
    keeps the instance each launcher compiles and each launch's arguments, launching nothing (any machine)."""

    def __init__(self) -> None:
        self.instances: list[str] = []
        self.launches: list[tuple] = []

    def function(self, cp: Any, instance: Any) -> LaunchRecorder:
        self.instances.append(instance.expr)
        return self

    def __call__(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0) -> None:
        self.launches.append(args)
