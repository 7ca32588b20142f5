"""What the host reads back each step (sampled ids, requested logprobs) comes through pinned host memory
on a copy stream. `start` makes the copy wait on an event of the compute stream and returns at once;
`Pending.wait` is the host's only wait, on the copy's event, never on the compute stream. The runner
starts the prefill's read-back, stages and launches the decode step, and only then waits for both: the
host's staging of the decode overlaps the device's prefill and its copy.

What is read back must not be written again before the wait: the sources are persistent buffers (a decode
slot's outputs, the runner's prefill outputs), never pool blocks a graph could reuse, and each pending
read-back holds its own pinned rows until it is waited for.

The CPU backend's stream simulator (backends/streams.py) runs the engine with this in place: a copy that
does not wait for the step, or a host view before the copy's event, is a StreamRace there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vt.backend import Backend, Stream, Tensor


class Pending:
    def __init__(self, readback: Readback, views: list[tuple[tuple, Any]], done: Any) -> None:
        self.readback, self.views, self.done = readback, views, done

    def wait(self) -> list[np.ndarray]:
        """The host copies (its pinned rows go back for reuse), after the one wait on the copy's event."""
        b = self.readback.backend
        b.host_wait(self.done)  # the host waits for the copy only
        out = [np.array(b.host_view(v)) for _, v in self.views]
        for key_view in self.views:
            self.readback.free.setdefault(key_view[0], []).append(key_view[1])
        return out


class Readback:
    def __init__(self, backend: Backend, compute: Stream) -> None:
        self.backend, self.compute = backend, compute
        self.stream = backend.new_stream()  # the copy stream
        self.free: dict[tuple, list[Any]] = {}  # (shape, dtype) -> pinned buffers no pending read-back holds

    def start(self, tensors: list[Tensor]) -> Pending:
        b = self.backend
        b.wait_event(self.stream, b.record_event(self.compute))  # the copy follows the step's work
        views = []
        for t in tensors:
            key = (t.shape, np.dtype(t.dtype).str)
            pinned = self.free.get(key, []).pop() if self.free.get(key) else b.pinned_empty(t.shape, t.dtype)
            b.copy_d2h_async(t, pinned, self.stream)
            views.append((key, pinned))
        return Pending(self, views, b.record_event(self.stream))

    def fetch(self, tensors: list[Tensor]) -> list[np.ndarray]:
        return self.start(tensors).wait()
