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

MAX_SPARE = 4  # pinned buffers kept per row shape for reuse (two read-backs are in flight in a step at most)


class Pending:
    def __init__(self, readback: Readback, held: list[tuple[tuple, Any]], views: list[Any], done: Any) -> None:
        self.readback, self.held, self.views, self.done = readback, held, views, done

    def wait(self) -> list[np.ndarray]:
        """The host copies (its pinned buffers go back for reuse), after the one wait on the copy's event."""
        b = self.readback.backend
        b.host_wait(self.done)  # the host waits for the copy only
        out = [np.array(b.host_view(v)) for v in self.views]
        for key, buf in self.held:
            self.readback.give_back(key, buf)
        return out


class Readback:
    def __init__(self, backend: Backend, compute: Stream, on_compute: bool = False) -> None:
        self.backend, self.compute = backend, compute
        # the copy stream; with async scheduling the compute stream itself: the next step's sampler, launched
        # before the host waits for this copy, overwrites the ids it reads, so it must run after it in stream order
        self.stream = compute if on_compute else backend.new_stream()
        self.spare: dict[tuple, list[Any]] = {}  # (row shape, dtype) -> pinned buffers no read-back holds

    def start(self, tensors: list[Tensor]) -> Pending:
        b = self.backend
        b.wait_event(self.stream, b.record_event(self.compute))  # the copy follows the step's work
        held, views = [], []
        for t in tensors:
            key, buf = self._take(t)
            view = buf.view(t.shape) if isinstance(buf, Tensor) else buf[: t.shape[0]]
            b.copy_d2h_async(t, view, self.stream)
            held.append((key, buf))
            views.append(view)
        return Pending(self, held, views, b.record_event(self.stream))

    def _take(self, t: Tensor) -> tuple[tuple, Any]:
        """A spare pinned buffer of t's row shape with room for its rows, or a new one (rows grown by
        doubling, so the buffers a stream of varied read-backs needs stay few and bounded)."""
        key = (t.shape[1:], np.dtype(t.dtype).str)
        spare = self.spare.setdefault(key, [])
        for i, buf in enumerate(spare):
            if buf.shape[0] >= t.shape[0]:
                return key, spare.pop(i)
        rows = 1 << max(0, int(t.shape[0]) - 1).bit_length()
        return key, self.backend.pinned_empty((rows, *t.shape[1:]), t.dtype)

    def give_back(self, key: tuple, buf: Any) -> None:
        spare = self.spare.setdefault(key, [])
        spare.append(buf)
        spare.sort(key=lambda x: x.shape[0])
        if len(spare) > MAX_SPARE:  # the smallest goes (CUDA: freed with the array; CPU: its buffer)
            gone = spare.pop(0)
            if isinstance(gone, Tensor):
                self.backend.free(gone.buffer)
