"""GraphCaptureScope and BreakableGraph.

Usage (the caller re-raises; a failed capture executed nothing, so its outputs are garbage):

    scope = GraphCaptureScope(backend, stream)
    with scope:
        forward()
    if scope.capture_failed:
        raise scope.error
    graph = scope.graph   # None when the scope was inert (forward ran eagerly)
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType
from typing import Any

from vt.backend import Backend, CaptureMode, Graph, Stream
from vt.errors import NestedCaptureScope

_open_scopes = threading.local()


class GraphCaptureScope:
    def __init__(self, backend: Backend, stream: Stream, mode: CaptureMode = CaptureMode.GLOBAL,
                 *, enabled: bool | None = None) -> None:
        from vt.env import flags

        self.backend = backend
        self.stream = stream
        self.mode = mode
        wanted = flags().cudagraph if enabled is None else enabled
        self.is_inert = not (wanted and backend.can_capture)
        self.graph: Graph | None = None
        self.capture_failed = False
        self.error: BaseException | None = None
        self._stream_ctx: Any = None
        self._gc_was_enabled = False

    def __enter__(self) -> GraphCaptureScope:
        if getattr(_open_scopes, "scope", None) is not None:
            raise NestedCaptureScope("a GraphCaptureScope is already open on this thread")
        _open_scopes.scope = self
        # No garbage collection while capturing: a collection may run any dead object's finalizer, and one that
        # frees device memory (an engine a test dropped, say) is an unsafe call that invalidates a global
        # capture (seen on the H200 as a random CaptureInvalidated). torch and vLLM capture with it off too.
        self._gc_was_enabled = gc.isenabled()
        gc.disable()
        self._stream_ctx = self.backend.use_stream(self.stream)
        self._stream_ctx.__enter__()
        if not self.is_inert:
            try:
                self.backend.begin_capture(self.stream, self.mode)
            except Exception:
                self._close()
                raise
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> bool:
        # Never raises: a failure is marked and kept for the caller, who must re-raise it.
        try:
            if ev is not None:
                self._mark(ev)
            if not self.is_inert:
                try:
                    graph = self.backend.end_capture(self.stream)
                    if self.capture_failed:
                        graph.destroy()
                    else:
                        self.graph = graph
                except Exception as e:  # noqa: BLE001 - kept, not swallowed: the caller re-raises
                    self._mark(e)
        finally:
            self._close()
        # Swallow ordinary errors (kept in self.error); let KeyboardInterrupt/SystemExit through.
        return ev is None or isinstance(ev, Exception)

    def _mark(self, e: BaseException) -> None:
        self.capture_failed = True
        if self.error is None:
            self.error = e

    def _close(self) -> None:
        _open_scopes.scope = None
        if self._gc_was_enabled:
            gc.enable()
        if self._stream_ctx is not None:
            self._stream_ctx.__exit__(None, None, None)
            self._stream_ctx = None


class BreakableGraph:
    """Captured segments with eager breaks between them: replay runs segment 0, break 0, segment 1, ...
    Invariant: len(segments) == len(breaks) + 1.

    A break runs on the graph's stream; one that forks work onto a side stream returns the events that
    end it, and they are joined in the legal window, after the break and before the next segment begins,
    as a stream wait (a synchronize there would stall the host, and inside an open segment CUDA refuses
    it). `before_segment` runs before each segment's capture, outside it: the graph driver's pre-grow."""

    def __init__(self, backend: Backend, stream: Stream,
                 before_segment: Callable[[int], None] | None = None,
                 recording: Callable[[], AbstractContextManager[set]] | None = None) -> None:
        self.backend = backend
        self.stream = stream
        self.before_segment = before_segment
        self.recording = recording  # the pool's recorder: collects each segment's temporaries (never a break's)
        self.used: set = set()
        self.segments: list[Graph] = []
        self.breaks: list[Callable[[], Any]] = []

    def capture(self, pieces: list[Callable[[], Any]]) -> None:
        """pieces alternate: segment, break, segment, ...; an odd count is required. Each segment is
        replayed as soon as it is captured (the capture executed nothing), so each break sees its inputs."""
        if len(pieces) % 2 != 1:
            raise ValueError(f"pieces must alternate segment/break and end on a segment, got {len(pieces)}")
        for i, fn in enumerate(pieces):
            if i % 2:
                self.breaks.append(fn)
                self._run_break(fn)
                continue
            if self.before_segment is not None:
                self.before_segment(i // 2)
            scope = GraphCaptureScope(self.backend, self.stream, enabled=True)
            with self.recording() if self.recording is not None else nullcontext(set()) as used, scope:
                fn()
            self.used |= used
            if scope.capture_failed:
                self.destroy()
                raise scope.error  # type: ignore[misc]
            assert scope.graph is not None
            self.segments.append(scope.graph)
            scope.graph.replay(self.stream)

    def replay(self) -> None:
        for i, seg in enumerate(self.segments):
            seg.replay(self.stream)
            if i < len(self.breaks):
                self._run_break(self.breaks[i])

    def destroy(self) -> None:
        for seg in self.segments:
            seg.destroy()
        self.segments, self.breaks = [], []

    def _run_break(self, fn: Callable[[], Any]) -> None:
        with self.backend.use_stream(self.stream):
            forked = fn() or ()
        for event in forked:  # the join: after the break, before the next segment begins
            self.backend.wait_event(self.stream, event)
