"""The capture-rule table of shared/device-facts.md, run on each backend (CUDA rows need a GPU).

EXPECTED is transcribed from device-facts.md (what a real H200 answered), not from vt's code. Where
a row describes CuPy's own refusal, vt reproduces the refusal's text; where CuPy hides CUDA's answer
(`Event.done` silently invalidating), vt raises CUDA's error instead (see the row's note).
"""

from __future__ import annotations

import pytest

from vt.backend import CaptureMode
from vt.conformance import ROWS, run_row
from vt.registry import backend_class

UNSUPPORTED = "cudaErrorStreamCaptureUnsupported"
INVALIDATED = "cudaErrorStreamCaptureInvalidated"
REFUSED = (UNSUPPORTED, INVALIDATED)
G, T, R = CaptureMode.GLOBAL, CaptureMode.THREAD_LOCAL, CaptureMode.RELAXED


def _all(call: str, end: str) -> dict:
    return {m: (call, end) for m in (G, T, R)}


EXPECTED: dict[str, dict[CaptureMode, tuple[str, str]]] = {
    # global/thread_local refuse and invalidate; relaxed silently grows
    "pool miss -> driver alloc": {G: REFUSED, T: REFUSED, R: ("allowed", "graph")},
    "raw driver alloc": {G: REFUSED, T: REFUSED, R: ("allowed", "graph")},
    "stream-ordered alloc (alloc_async)": _all("allowed", "graph"),  # a graph alloc node
    "kernel launch on existing buffers": _all("allowed", "graph"),
    "GEMM launched through vt": _all("allowed", "graph"),  # vt routes around CuPy's cuBLAS refusal
    "stream synchronize": _all(UNSUPPORTED, INVALIDATED),
    "device synchronize": _all(UNSUPPORTED, INVALIDATED),
    # CuPy refuses first, before CUDA sees it: the capture survives
    "synchronous H2D copy": _all(
        "RuntimeError: the current stream is capturing, so H2D transfers are disallowed", "graph"),
    # CUDA invalidates (CuPy answers False silently); vt names the error instead of hiding it
    "event query": _all(UNSUPPORTED, INVALIDATED),
    "wait on event recorded outside": _all("cudaErrorStreamCaptureIsolation", INVALIDATED),
    "side stream forked, not joined": _all("allowed", "cudaErrorStreamCaptureUnjoined"),
    "side stream forked and joined": _all("allowed", "graph"),
    # cudaMalloc is refused for the whole capture, not per stream: a side stream forked into it is no way
    # around global mode, and relaxed lets it through there too (the H200 confirms both in the GPU lane)
    "driver alloc on a forked side stream": {G: REFUSED, T: REFUSED, R: ("allowed", "graph")},
    # Not in device-facts.md; measured on the H200: cudaGraphExecDestroy inside a global capture fails
    # with cudaErrorStreamCaptureUnsupported and invalidates it. vt defers the destruction.
    "another graph destroyed": _all("allowed", "graph"),
    "nested begin_capture": _all("cudaErrorIllegalState", INVALIDATED),
    "capture on the legacy default stream": _all("RuntimeError: cannot capture on the default (legacy) stream", "-"),
}

BACKENDS = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]


def test_table_covers_every_probe() -> None:
    assert set(EXPECTED) == set(ROWS)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", [G, T, R], ids=lambda m: m.value)
@pytest.mark.parametrize("row", list(EXPECTED))
def test_capture_rule(row: str, mode: CaptureMode, backend: str) -> None:
    cls = backend_class(backend)
    got = run_row(lambda: cls(), row, mode)
    assert (got.call, got.end) == EXPECTED[row][mode], f"{row} [{mode.value}] on {backend}"
    if got.replay_ok is not None:
        assert got.replay_ok, f"{row}: replay differs from eager on {backend}"


def test_cli_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    from vt.cli import main

    assert main(["conformance"]) == 0
    out = capsys.readouterr().out
    assert "pool miss -> driver alloc" in out and UNSUPPORTED in out and "replay bit-exact" in out


# The seed case behind BreakableGraph (device-facts.md: synchronize and unjoined forks in a capture).
# A missing wait is no capture error on any device: the CPU's stream simulator reports it
# (tests/backends/test_stream_order.py).
SEGMENTS_EXPECTED: dict[str, tuple[str, str, bool | None]] = {
    "break on the graph's stream": ("allowed", "graph", True),
    "break forks a side stream, joined after the break (the legal window)": ("allowed", "graph", True),
    "join as a synchronize inside the next open segment": (UNSUPPORTED, "-", None),
    "side stream forked inside a segment, unjoined at its end": ("cudaErrorStreamCaptureUnjoined", "-", None),
}


def test_segment_table_covers_every_probe() -> None:
    from vt.conformance import SEGMENT_ROWS

    assert set(SEGMENTS_EXPECTED) == set(SEGMENT_ROWS)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("row", list(SEGMENTS_EXPECTED))
def test_segment_rule(row: str, backend: str) -> None:
    from vt.conformance import run_segment_row

    cls = backend_class(backend)
    got = run_segment_row(lambda: cls(), row)
    assert (got.call, got.end, got.replay_ok) == SEGMENTS_EXPECTED[row], f"{row} on {backend}"
