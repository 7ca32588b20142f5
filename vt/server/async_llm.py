"""The async front of the engine: `async for out in llm.generate(prompt, params, request_id)`.

One engine thread runs the batching loop for every request; the event loop never computes. Commands
(add, abort) reach the engine thread through a queue and are applied between steps, the only time the
engine is not stepping; each step's outputs go back to their requests' asyncio queues. A request's
first `__anext__` raises its RequestError (bad input, a prompt that can never fit) before anything is
produced, which is what lets the server answer with an HTTP error instead of a 200.

A fatal engine error prints its traceback and the requests in flight (LLMEngine.step), fails every
request in flight with that error and marks the front dead (/health answers 503).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import traceback
from collections import OrderedDict
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from vt.engine.config import EngineConfig
from vt.engine.core.request import Request, RequestOutput
from vt.engine.front.llm_engine import LLMEngine
from vt.engine.sample.params import SamplingParams
from vt.errors import RequestError

POLL_S = 0.25  # how often a request waiting to be added checks that the engine still runs


class EngineDeadError(RuntimeError):
    """The engine loop stopped on a fatal error: every request in flight failed with it."""


@dataclass(slots=True)
class _Stream:
    """A request's outputs on its way to the event loop. Outputs are cumulative (all text and tokens so far), so
    a newer one replaces one the consumer has not taken yet, as vLLM's output collector merges them: a consumer
    that falls behind under load reads one output for several steps instead of a backlog of one per step."""

    loop: asyncio.AbstractEventLoop
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    latest: RequestOutput | None = None
    error: BaseException | None = None
    request: Request | None = None

    def put(self, item: Any) -> None:
        self.loop.call_soon_threadsafe(_deliver, [(self, item)])

    def take(self) -> RequestOutput | BaseException | None:
        """The newest output not taken yet, else the error that ended the stream, else None."""
        item: RequestOutput | BaseException | None = self.latest
        self.latest = None
        if item is None and self.error is not None:
            item = self.error
        if self.error is None:
            self.ready.clear()
        return item


def _deliver(items: list[tuple[_Stream, Any]]) -> None:
    """On the event loop: a step's outputs, for every stream at once (one wake-up a step, not one a request)."""
    for stream, item in items:
        if isinstance(item, BaseException):
            stream.error = item
        else:
            stream.latest = item
        stream.ready.set()


IDLE_CHECK_S = 1.0


class AsyncLLM:
    MAX_ABORT_RECORDS = 1024

    def __init__(self, cfg: EngineConfig) -> None:
        self.engine = LLMEngine(cfg)
        self.cfg = cfg
        self._commands: queue.Queue = queue.Queue()
        self._streams: dict[str, _Stream] = {}
        self.num_steps = 0
        self.num_aborted = 0
        # request id -> (engine steps when the abort was asked, when applied, KV blocks in use right after): the
        # newest MAX_ABORT_RECORDS only (a long-lived server sees a disconnect per impatient client)
        self.aborts: OrderedDict[str, tuple[int, int | None, int | None]] = OrderedDict()
        self.num_preempted_done = 0  # preemptions of requests that have left (running ones are counted live)
        self.on_finished: Any = _noop  # called on the engine thread with each request that finishes
        self.on_dead: Any = _noop  # called on the engine thread with the fatal error, after the requests failed
        self.dead: BaseException | None = None
        self._running = True
        self._thread = threading.Thread(target=self._loop, name="vt-engine", daemon=True)
        self._thread.start()

    # ---- the event loop's side --------------------------------------------------------------
    async def generate(self, prompt: Any, params: SamplingParams,
                       request_id: str) -> AsyncGenerator[RequestOutput, None]:
        """Yields the request's output after every engine step that changed it; the last one is finished.
        Raises RequestError before the first output if the engine refuses the request."""
        if self.dead is not None:
            raise EngineDeadError(f"the engine stopped: {self.dead}")
        stream = _Stream(asyncio.get_running_loop())
        self._streams[request_id] = stream
        added: asyncio.Future = stream.loop.create_future()
        self._commands.put(("add", request_id, (prompt, params, added)))
        finished = False
        try:
            while not added.done():  # the engine may die (or stop) with this add still queued: never hang
                await asyncio.wait({added}, timeout=POLL_S)
                if not added.done() and not self.is_alive:
                    raise EngineDeadError(f"the engine stopped: {self.dead or 'shut down'}")
            added.result()  # raises the engine's RequestError: nothing was queued
            while True:
                await stream.ready.wait()
                item = stream.take()
                if item is None:
                    continue
                if isinstance(item, BaseException):
                    raise item
                finished = item.finished
                yield item
                if finished:
                    return
        finally:
            self._streams.pop(request_id, None)
            if not finished:  # the consumer went away (a client disconnect), maybe mid-add: free its blocks
                self.abort(request_id)  # queued after its add, so applied after it; a no-op if it never ran

    def abort(self, request_id: str) -> None:
        self.aborts[request_id] = (self.num_steps, None, None)  # steps when asked; when applied; blocks then
        while len(self.aborts) > self.MAX_ABORT_RECORDS:
            self.aborts.popitem(last=False)
        self._commands.put(("abort", request_id, None))

    def shutdown(self, reason: str = "the server is shutting down") -> None:
        """Fails whatever is still in flight, then stops the engine thread."""
        self._commands.put(("stop", reason, None))
        self._thread.join(timeout=30)
        # tensor-parallel workers, if any: stopped in order if the engine thread is done with the group,
        # else killed (two threads must never drive one gloo group)
        self.engine.close(graceful=not self._thread.is_alive())

    @property
    def is_alive(self) -> bool:
        return self.dead is None and self._thread.is_alive()

    # ---- the engine thread ------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            self._serve_commands_and_steps()
        except BaseException as e:  # noqa: BLE001 - a bug in this thread's own handling: fatal, never silent
            traceback.print_exc()
            self._die(e)  # every stream in flight ends with it, /health says so; none waits forever

    def _serve_commands_and_steps(self) -> None:
        while self._running:
            try:  # idle: wait for a command (checking on the engine's health each second); busy: take what is there
                busy = self.engine.has_unfinished()
                cmd = self._commands.get_nowait() if busy else self._commands.get(timeout=IDLE_CHECK_S)
            except queue.Empty:
                cmd = None
                if not busy and not self._healthy():
                    return
            while cmd is not None:
                self._apply(*cmd)
                try:
                    cmd = self._commands.get_nowait()
                except queue.Empty:
                    cmd = None
            if self._running and self.engine.has_unfinished():
                self._step()

    def _apply(self, kind: str, rid: str, arg: Any) -> None:
        if kind == "add":
            prompt, params, added = arg
            stream = self._streams.get(rid)
            if stream is None:
                return  # the consumer left before the engine saw it
            try:
                req = self.engine.add_request(prompt, params, request_id=rid)
                if req.is_finished:  # can never fit: refused as bad input, nothing held
                    raise RequestError(req.error or "request refused")
            except RequestError as e:
                stream.loop.call_soon_threadsafe(_settle, added, e)
                return
            except Exception as e:  # noqa: BLE001 - the engine's bug, this request's alone: it fails, the rest run
                traceback.print_exc()
                with contextlib.suppress(Exception):
                    self.engine.abort(rid)  # whatever of it was queued before the error
                stream.loop.call_soon_threadsafe(_settle, added, e)
                return
            stream.request = req
            stream.loop.call_soon_threadsafe(_settle, added, None)
        elif kind == "abort":
            aborted = self.engine.abort(rid)
            for r in aborted:
                self.num_aborted += 1
                self._finished(r)
            if rid in self.aborts and aborted:
                self.aborts[rid] = (self.aborts[rid][0], self.num_steps, self.engine.kv_manager.num_used)
            else:
                self.aborts.pop(rid, None)  # it had finished, or never ran
        elif kind == "stop":
            for r in list(self.engine.requests.values()):
                for a in self.engine.abort(r.id):
                    self._finished(a)
            self._running = False
            self._fail_all(rid)

    def _fail_all(self, why: str) -> None:
        """Every request in flight, and every add still queued, fails with why."""
        for stream in list(self._streams.values()):
            stream.put(EngineDeadError(why))
        while True:
            try:
                kind, rid, arg = self._commands.get_nowait()
            except queue.Empty:
                return
            if kind == "add" and rid in self._streams:
                self._streams[rid].loop.call_soon_threadsafe(_settle, arg[2], EngineDeadError(why))

    def _finished(self, r: Request) -> None:
        self.num_preempted_done += r.num_preemptions
        self.on_finished(r)

    def _healthy(self) -> bool:
        """An idle engine can die too (a tensor-parallel worker killed between requests): noticed here, so
        /health says so before the next request fails."""
        try:
            self.engine.check_health()
        except Exception as e:  # noqa: BLE001 - fatal, as a failed step is
            self._die(e)
            return False
        return True

    def _die(self, e: BaseException) -> None:
        """A fatal engine error: every request in flight and every queued add fails with it, then on_dead."""
        self.dead = e
        self._running = False
        self._fail_all(f"the engine stopped on a fatal error: {type(e).__name__}: {e}")
        self.on_dead(e)

    def _step(self) -> None:
        try:
            stepped = self.engine.step()
        except BaseException as e:  # noqa: BLE001 - fatal: LLMEngine.step printed the traceback
            self._die(e)
            return
        self.num_steps += 1
        seen: set[str] = set()
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Stream, Any]]] = {}
        for r in stepped:
            if r.is_finished:
                self._finished(r)
            head = (r.siblings or [r])[0]
            out = self._streams.get(head.id)
            if out is not None and head.id not in seen:
                seen.add(head.id)
                by_loop.setdefault(out.loop, []).append((out, RequestOutput.of(r)))
        for loop, items in by_loop.items():
            loop.call_soon_threadsafe(_deliver, items)


def _noop(req: Request) -> None:
    pass


def _settle(fut: asyncio.Future, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is None:
        fut.set_result(None)
    else:
        fut.set_exception(error)

