"""Kernel attribution for the arrays a kernel creates itself (CuPy's temporaries on CUDA, their model
on the CPU): each is a pool block, charged to the kernel this thread is running. Per thread, because
two threads may launch at once; the per-kernel byte counts are what the allocation-parity gates compare."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

OUTSIDE_A_LAUNCH = "<outside a launch>"


class KernelAttribution:
    def __init__(self, backend: Any) -> None:
        self.backend = backend  # its pool is attached after the backend is built (vt/pool.py)
        self._tls = threading.local()
        self._lock = threading.Lock()
        self.bytes: dict[str, int] = {}  # kernel -> pool bytes of the arrays it created itself

    @property
    def current(self) -> str:
        """The kernel this thread is running now."""
        return getattr(self._tls, "kernel", OUTSIDE_A_LAUNCH)

    @contextmanager
    def running(self, kernel: Any) -> Iterator[None]:
        prev = self.current
        self._tls.kernel = getattr(kernel, "__name__", repr(kernel))
        try:
            yield
        finally:
            self._tls.kernel = prev

    @contextmanager
    def collecting(self) -> Iterator[list]:
        """Every block `get` hands out on this thread inside the window (what a capture bakes in)."""
        prev = getattr(self._tls, "sink", None)
        sink: list[Any] = []
        self._tls.sink = sink
        try:
            yield sink
        finally:
            self._tls.sink = prev

    def get(self, nbytes: int) -> Any:
        """A pool block for an array the current kernel creates: visible to the demand profile, the
        pre-grow and the capture counters."""
        blk = self.backend.pool.get(max(int(nbytes), 1))
        sink = getattr(self._tls, "sink", None)
        if sink is not None:
            sink.append(blk)
        name = self.current
        with self._lock:
            self.bytes[name] = self.bytes.get(name, 0) + blk.nbytes
        return blk
