"""What the host stages for a decode step goes to the device through pinned host buffers, one asynchronous copy
each on the compute stream. A copy from pageable memory makes the host wait for the stream's earlier work
(CUDA syncs the stream before a pageable host-to-device copy): with async scheduling the host stages step N+1
while step N runs, and must not wait for it. A pinned buffer is written again only once the copy that read it
has run (its event done): until then the next step takes another; the buffers a pipeline of steps needs stay few.

The CPU backend's stream simulator checks it: writing a buffer a queued copy still reads is a StreamRace there.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from vt.backend import Backend, Event, Stream, Tensor


class Uploads:
    def __init__(self, backend: Backend, stream: Stream) -> None:
        self.backend, self.stream = backend, stream
        self.spare: dict[tuple, list[Any]] = {}  # (shape, dtype) -> pinned buffers no copy reads
        self.busy: deque[tuple[Event, tuple, Any]] = deque()  # copies queued, oldest first
        self.num_buffers = 0

    def upload(self, dst: Tensor, host: np.ndarray) -> None:
        """dst = host, by a copy queued on the stream; host may change as soon as this returns."""
        key = (tuple(dst.shape), np.dtype(dst.dtype).str)
        buf = self._take(key, dst)
        self.backend.host_view(buf)[...] = np.asarray(host, dtype=dst.dtype).reshape(dst.shape)
        self.backend.copy_h2d_async(dst, buf, self.stream)
        self.busy.append((self.backend.record_event(self.stream), key, buf))

    def _take(self, key: tuple, dst: Tensor) -> Any:
        while self.busy and self.backend.query_event(self.busy[0][0]):  # copies that ran give their buffers back
            _, k, done = self.busy.popleft()
            self.spare.setdefault(k, []).append(done)
        spare = self.spare.get(key)
        if spare:
            return spare.pop()
        self.num_buffers += 1
        return self.backend.pinned_empty(tuple(dst.shape), dst.dtype)
