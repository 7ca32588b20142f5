"""The capture-rule table of shared/device-facts.md, as probes of vt's Backend API.

Each probe runs one operation inside a capture on a fresh backend and reports what happened:
the call's answer ("allowed" or the error's CUDA name / text) and how `end_capture` then ended
("graph", or the error). `vt conformance` prints the table; tests hold the expected answers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from vt.backend import Backend, CaptureMode, Tensor
from vt.errors import CudaError


@dataclass(frozen=True, slots=True)
class Answer:
    call: str  # "allowed", or the error the call raised
    end: str  # "graph", "-" (no capture was open), or the error end_capture raised
    replay_ok: bool | None = None  # for launches: replay equals eager, bit for bit


def _err_name(e: BaseException) -> str:
    if isinstance(e, CudaError):
        return e.cuda_name
    base = next(c for c in type(e).__mro__ if c.__module__ == "builtins" and c is not Exception)
    return f"{base.__name__}: {e}"


def _add(xp: Any, x: Any, y: Any, out: Any) -> None:
    xp.add(x, y, out=out)


def _gemm(xp: Any, a: Any, b: Any, out: Any) -> None:
    xp.matmul(a, b, out=out)


def _filled(b: Backend, shape: tuple[int, ...], seed: int) -> Tensor:
    t = b.empty(shape, np.float32)
    b.copy_h2d(t, np.random.default_rng(seed).standard_normal(shape, dtype=np.float32))
    return t


def _in_capture(b: Backend, mode: CaptureMode, op: Callable[[Any], Any]) -> Answer:
    s = b.new_stream()
    ctx: dict[str, Any] = {"stream": s}
    b.begin_capture(s, mode)
    try:
        with b.use_stream(s):
            op(ctx)
        call = "allowed"
    except Exception as e:
        call = _err_name(e)
    try:
        graph = b.end_capture(s)
        end = "graph"
    except Exception as e:
        return Answer(call, _err_name(e))
    replay_ok = None
    if "check" in ctx:
        graph.replay(s)
        b.synchronize(s)
        replay_ok = ctx["check"]()
    graph.destroy()
    return Answer(call, end, replay_ok)


def _launch_probe(kernel: Any, shapes: tuple) -> Callable[[Backend, CaptureMode], Answer]:
    def probe(b: Backend, mode: CaptureMode) -> Answer:
        ins = [_filled(b, sh, i) for i, sh in enumerate(shapes[:-1])]
        eager, out = b.empty(shapes[-1], np.float32), b.empty(shapes[-1], np.float32)
        b.launch(kernel, *ins, eager)
        b.synchronize()
        want = b.copy_d2h(eager)

        def op(ctx: dict) -> None:
            b.launch(kernel, *ins, out, stream=ctx["stream"])
            ctx["check"] = lambda: bool(np.array_equal(b.copy_d2h(out), want))

        return _in_capture(b, mode, op)

    return probe


def _probe(op: Callable[[Backend, dict], Any]) -> Callable[[Backend, CaptureMode], Answer]:
    return lambda b, mode: _in_capture(b, mode, lambda ctx: op(b, ctx))


def _pool_miss(b: Backend, ctx: dict) -> None:
    b.pool.get(12345)  # a class nothing was grown for: a miss, one driver alloc


def _sync_h2d(b: Backend, ctx: dict) -> None:
    b.copy_h2d(ctx["t"], np.ones(4, np.float32))


def _fork_unjoined(b: Backend, ctx: dict) -> None:
    side = b.new_stream()
    b.wait_event(side, b.record_event(ctx["stream"]))
    b.launch(_add, ctx["x"], ctx["x"], ctx["x"], stream=side)


def _with_setup(setup: Callable[[Backend], dict], op: Callable[[Backend, dict], Any]):
    def probe(b: Backend, mode: CaptureMode) -> Answer:
        pre = setup(b)

        def run(ctx: dict) -> None:
            ctx.update(pre)
            op(b, ctx)

        return _in_capture(b, mode, run)

    return probe


def _fork_and_join(b: Backend, ctx: dict) -> None:
    side = b.new_stream()
    b.wait_event(side, b.record_event(ctx["stream"]))
    b.launch(_add, ctx["x"], ctx["x"], ctx["x"], stream=side)
    b.wait_event(ctx["stream"], b.record_event(side))


def _side_stream_alloc(b: Backend, ctx: dict) -> None:
    """A pool miss while a side stream forked into the capture is current, then the join."""
    side = b.new_stream()
    b.wait_event(side, b.record_event(ctx["stream"]))
    with b.use_stream(side):
        b.pool.get(12345)
        b.launch(_add, ctx["x"], ctx["x"], ctx["x"], stream=side)
    b.wait_event(ctx["stream"], b.record_event(side))


def _legacy(b: Backend, mode: CaptureMode) -> Answer:
    try:
        b.begin_capture(b.default_stream, mode)
    except Exception as e:
        return Answer(_err_name(e), "-")
    return Answer("allowed", _err_name_or_graph(b))


def _err_name_or_graph(b: Backend) -> str:
    try:
        b.end_capture(b.default_stream).destroy()
        return "graph"
    except Exception as e:
        return _err_name(e)


def _wait_outside(b: Backend, ctx: dict) -> None:
    b.wait_event(ctx["stream"], ctx["ev"])


def _x(b: Backend) -> dict:
    return {"x": b.empty((4,), np.float32), "t": b.empty((4,), np.float32)}


def _outside_event(b: Backend) -> dict:
    return {"ev": b.record_event(b.new_stream())}


def _other_graph(b: Backend) -> dict:
    x, s = b.empty((4,), np.float32), b.new_stream()
    b.begin_capture(s)
    b.launch(_add, x, x, x, stream=s)
    return {"other": b.end_capture(s)}


ROWS: dict[str, Callable[[Backend, CaptureMode], Answer]] = {
    "pool miss -> driver alloc": _probe(_pool_miss),
    "raw driver alloc": _probe(lambda b, ctx: b.alloc(4096)),
    "stream-ordered alloc (alloc_async)": _probe(lambda b, ctx: b.alloc_async(4096, ctx["stream"])),
    "kernel launch on existing buffers": _launch_probe(_add, ((64,), (64,), (64,))),
    "GEMM launched through vt": _launch_probe(_gemm, ((64, 256), (256, 512), (64, 512))),
    "stream synchronize": _probe(lambda b, ctx: b.synchronize(ctx["stream"])),
    "device synchronize": _probe(lambda b, ctx: b.synchronize()),
    "synchronous H2D copy": _with_setup(_x, _sync_h2d),
    "event query": _with_setup(_outside_event, lambda b, ctx: ctx["ev"].done),
    "wait on event recorded outside": _with_setup(_outside_event, _wait_outside),
    "side stream forked, not joined": _with_setup(_x, _fork_unjoined),
    "side stream forked and joined": _with_setup(_x, _fork_and_join),
    "driver alloc on a forked side stream": _with_setup(_x, _side_stream_alloc),
    "another graph destroyed": _with_setup(_other_graph, lambda b, ctx: ctx["other"].destroy()),
    "nested begin_capture": _probe(lambda b, ctx: b.begin_capture(ctx["stream"], CaptureMode.GLOBAL)),
    "capture on the legacy default stream": _legacy,
}

# ---- the seed case: side-stream work around the segments of a BreakableGraph --------------------
def _segment_case(fork_in_break: bool, join: bool, sync_in_segment: bool, fork_in_segment: bool):
    """Segment 0 writes a = x + x; the break forks b = a + a onto a side stream (joined or not); segment 1
    writes out = b + b. A faithful capture and replay give out = 8x for a fresh x."""

    def probe(b: Backend) -> Answer:
        from vt.capture import BreakableGraph

        s, side = b.new_stream(), b.new_stream()
        x, a, bb, out = (_filled(b, (64,), i) for i in range(4))

        def segment0() -> None:
            b.launch(_add, x, x, a, stream=s)
            if fork_in_segment:  # forked inside the open segment and left there
                b.wait_event(side, b.record_event(s))
                b.launch(_add, a, a, bb, stream=side)

        def brk() -> list:
            if not fork_in_break:
                b.launch(_add, a, a, bb, stream=s)
                return []
            b.wait_event(side, b.record_event(s))
            b.launch(_add, a, a, bb, stream=side)
            done = b.record_event(side)
            return [done] if join else []

        def segment1() -> None:
            if sync_in_segment:  # the join misplaced: a (device) synchronize inside the open segment
                b.synchronize()
            b.launch(_add, bb, bb, out, stream=s)

        graph = BreakableGraph(b, s)
        try:
            graph.capture([segment0, brk, segment1])
        except Exception as e:
            return Answer(_err_name(e), "-")
        fresh = np.random.default_rng(9).standard_normal(64, dtype=np.float32)
        with b.use_stream(s):
            b.copy_h2d(x, fresh)
        graph.replay()
        b.synchronize()
        ok = bool(np.array_equal(b.copy_d2h(out), fresh * 8))
        graph.destroy()
        return Answer("allowed", "graph", ok)

    return probe


SEGMENT_ROWS: dict[str, Callable[[Backend], Answer]] = {
    "break on the graph's stream": _segment_case(False, False, False, False),
    "break forks a side stream, joined after the break (the legal window)": _segment_case(True, True, False, False),
    "join as a synchronize inside the next open segment": _segment_case(True, False, True, False),
    "side stream forked inside a segment, unjoined at its end": _segment_case(False, False, False, True),
}


def run_segment_row(backend_factory: Callable[[], Backend], row: str) -> Answer:
    return SEGMENT_ROWS[row](backend_factory())


MODES = (CaptureMode.GLOBAL, CaptureMode.THREAD_LOCAL, CaptureMode.RELAXED)


def run_row(backend_factory: Callable[[], Backend], row: str, mode: CaptureMode) -> Answer:
    return ROWS[row](backend_factory(), mode)


def table(backend_factory: Callable[[], Backend]) -> list[tuple[str, str, Answer]]:
    return [(row, m.value, run_row(backend_factory, row, m)) for row in ROWS for m in MODES]
