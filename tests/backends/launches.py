"""The kernels a backend launches, by name, while a block runs (what a test of which ops a step takes reads)."""

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

