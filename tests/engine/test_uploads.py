"""A decode step's inputs go up from pinned buffers (vt/engine/worker/uploads.py): the host never writes a buffer a
queued copy still reads, and once the copies ran their buffers are reused. Run under the stream simulator with the
copies on a stream whose work runs only when forced, so every copy is still queued when the next upload comes."""

from __future__ import annotations

import numpy as np
import pytest

from backends.streams import side_streams_late
from vt.engine.worker.uploads import Uploads
from vt.errors import StreamRace
from vt.registry import make_backend


def test_a_pinned_buffer_is_written_again_only_after_its_copy_ran() -> None:
    b = make_backend("cpu")
    host_side, copies = b.new_stream(), b.new_stream()
    b.simulate_streams(side_streams_late(host_side))
    up = Uploads(b, copies)
    dst = [b.empty((64,), np.int64) for _ in range(3)]
    try:
        for i in range(9):
            up.upload(dst[i % 3], np.full(64, i, np.int64))
        queued = up.num_buffers
        b.synchronize()
        for i in range(9, 15):
            up.upload(dst[i % 3], np.full(64, i, np.int64))
        b.synchronize()
    except StreamRace as race:
        pytest.fail(f"an upload wrote a buffer its queued copy still reads: {race}")
    assert [int(b.copy_d2h(d)[0]) for d in dst] == [12, 13, 14], "every copy landed, the last one last"
    assert queued == 9, "non-vacuity: each upload found the copies before it still queued"
    assert up.num_buffers <= queued, "once the copies ran, their buffers were reused"
