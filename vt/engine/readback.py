"""What the host reads back each step (sampled ids, requested logprobs) comes through pinned host memory
on a copy stream: the copy waits on an event of the compute stream, and the host waits only on the copy's
event, never on the compute stream. One host wait per step, however many arrays come back.

The CPU backend's stream simulator (backends/streams.py) runs the engine with this in place: a copy that
does not wait for the step, or a host view before the copy's event, is a StreamRace there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vt.backend import Backend, Stream, Tensor


class Readback:
    def __init__(self, backend: Backend, compute: Stream) -> None:
        self.backend, self.compute = backend, compute
        self.stream = backend.new_stream()  # the copy stream
        self.pinned: dict[tuple, Any] = {}  # (row shape, dtype) -> pinned rows, grown by doubling

    def fetch(self, tensors: list[Tensor]) -> list[np.ndarray]:
        """Host copies of the tensors, in one host wait (a copy each: the pinned rows are reused)."""
        b = self.backend
        b.wait_event(self.stream, b.record_event(self.compute))  # the copy follows the step's work
        views = []
        for t in tensors:
            view = self._rows(t)
            b.copy_d2h_async(t, view, self.stream)
            views.append(view)
        b.host_wait(b.record_event(self.stream))  # the host waits for the copy only
        return [np.array(b.host_view(v)) for v in views]

    def _rows(self, t: Tensor) -> Any:
        """Pinned memory shaped like t: the leading rows of a buffer kept per row shape and dtype."""
        n, key = t.shape[0], (t.shape[1:], np.dtype(t.dtype).str)
        have = self.pinned.get(key)
        if have is None or have.shape[0] < n:
            rows = max(n, 2 * have.shape[0] if have is not None else 1)
            have = self.pinned[key] = self.backend.pinned_empty((rows, *t.shape[1:]), t.dtype)
        return have.view(t.shape) if isinstance(have, Tensor) else have[:n]
