"""The async front of the engine: `async for out in llm.generate(prompt, params, request_id)`.

The engine runs in its own process (engine_process=True, `vt serve`'s default: vt/engine/core/proc.py, the front
reading its outputs on a thread) or on a thread of this one (tests that plant faults in the engine). On a
thread: one engine thread runs the batching loop for every request; the event loop never computes. Commands
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
from vt.engine.core.request import Finished, Request, RequestOutput
from vt.engine.front.llm_engine import LLMEngine
from vt.engine.sample.params import SamplingParams
from vt.errors import EngineDeadError, RequestError

POLL_S = 0.25  # how often a request waiting to be added checks that the engine still runs


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

    def __init__(self, cfg: EngineConfig, engine_process: bool = False) -> None:
        self.cfg = cfg
        self._streams: dict[str, _Stream] = {}
        self._adds: dict[str, asyncio.Future] = {}  # engine process: adds not answered yet
        self.num_steps = 0
        self.num_aborted = 0
        # request id -> (engine steps when the abort was asked, when applied, KV blocks in use right after): the
        # newest MAX_ABORT_RECORDS only (a long-lived server sees a disconnect per impatient client)
        self.aborts: OrderedDict[str, tuple[int, int | None, int | None]] = OrderedDict()
        self.num_preempted_done = 0  # preemptions of requests that have left (running ones are counted live)
        self.on_finished: Any = _noop  # called with each request that finishes (a Finished record)
        self.on_dead: Any = _noop  # called with the fatal error, after the requests failed
        self.dead: BaseException | None = None
        self._running = True
        self._shut_down = False
        self._core: Any = None
        if engine_process:
            from vt.engine.core.proc import EngineCoreClient
            from vt.engine.front.llm_engine import FrontEngine

            self.engine: Any = FrontEngine(cfg)  # what the server reads of an engine: tokenizer, template, limits
            self._core = EngineCoreClient(cfg, self, self.engine.tokenizer)
            self.cfg = self.engine.cfg = self._core.cfg
            self._thread = self._core.reader
        else:
            self.engine = LLMEngine(cfg)
            self._commands: queue.Queue = queue.Queue()
            self._thread = threading.Thread(target=self._loop, name="vt-engine", daemon=True)
            self._thread.start()

    def stats(self) -> dict[str, int]:
        """The engine's numbers for /metrics: its own, or the last the engine process sent."""
        if self._core is not None:
            return dict(self._core.stats) or {"running": 0, "waiting": 0, "kv_used": 0, "kv_total": 1,
                                              "prefix_queries": 0, "prefix_hits": 0, "prefix_preempted_queries": 0,
                                              "prefix_preempted_hits": 0, "preemptions": 0,
                                              "graph_replays": 0, "eager_steps": 0, "pool_misses": 0}
        st = self.engine.stats()
        st["preemptions"] += self.num_preempted_done
        return st

    # ---- the event loop's side --------------------------------------------------------------
    async def generate(self, prompt: Any, params: SamplingParams, request_id: str,
                       cache_salt: str | None = None) -> AsyncGenerator[RequestOutput, None]:
        """Yields the request's output after every engine step that changed it; the last one is finished.
        Raises RequestError before the first output if the engine refuses the request. cache_salt: vLLM's (cached
        prefix blocks are shared only with requests of the same salt)."""
        if self.dead is not None:
            raise EngineDeadError(self.why_stopped)
        stream = _Stream(asyncio.get_running_loop())
        self._streams[request_id] = stream
        added: asyncio.Future = stream.loop.create_future()
        try:
            if self._core is not None:
                ids = self.engine.tokenize(prompt)  # a RequestError before anything is queued
                self._adds[request_id] = added
                self._core.add(request_id, prompt if isinstance(prompt, str) else None, ids, params,
                               cache_salt=cache_salt)
            else:
                self._commands.put(("add", request_id, (prompt, params, cache_salt, added)))
        except BaseException:  # refused before it was queued: nothing of it may stay behind
            self._streams.pop(request_id, None)
            self._adds.pop(request_id, None)
            raise
        finished = False
        try:
            while not added.done():  # the engine may die (or stop) with this add still queued: never hang
                await asyncio.wait({added}, timeout=POLL_S)
                if not added.done() and not self.is_alive:
                    raise EngineDeadError(self.why_stopped)
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
        if self._core is not None:
            with contextlib.suppress(OSError):  # a dead core aborts nothing
                self._core.send(("abort", request_id))
            return
        self._commands.put(("abort", request_id, None))

    def shutdown(self, reason: str = "the server is shutting down") -> None:
        """Fails whatever is still in flight, then stops the engine thread (or process). Once: a signal's shutdown,
        the server's lifespan end and `vt serve`'s own exit may each ask."""
        if self._shut_down:
            return
        self._shut_down = True
        if self._core is not None:
            self._core.stop()
            self._running = False
            self._fail_all(reason)
            return
        self._commands.put(("stop", reason, None))
        self._thread.join(timeout=30)
        # tensor-parallel workers, if any: stopped in order if the engine thread is done with the group,
        # else killed (two threads must never drive one gloo group)
        self.engine.close(graceful=not self._thread.is_alive())

    @property
    def why_stopped(self) -> str:
        """Why the engine stopped, said once: a dead engine process's reason already opens with it."""
        why = str(self.dead or "shut down")
        return why if why.startswith("the engine stopped") else f"the engine stopped: {why}"

    @property
    def is_alive(self) -> bool:
        return self.dead is None and self._thread.is_alive()

    # ---- the engine process's reader (vt/engine/core/proc.py calls these on its thread) ----------
    def deliver_outputs(self, outs: list[RequestOutput]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Stream, Any]]] = {}
        for out in outs:
            stream = self._streams.get(out.request_id)
            if stream is not None:
                by_loop.setdefault(stream.loop, []).append((stream, out))
        for loop, items in by_loop.items():
            loop.call_soon_threadsafe(_deliver, items)

    def settle_add(self, rid: str, error: BaseException | None) -> None:
        added, stream = self._adds.pop(rid, None), self._streams.get(rid)
        if added is not None and stream is not None:
            stream.loop.call_soon_threadsafe(_settle, added, error)

    def finished(self, f: Finished) -> None:
        self._finished(f)

    def abort_applied(self, rid: str, applied: int, steps: int, blocks_in_use: int) -> None:
        """applied: how many of the request's sample sequences the abort ended (those still running; 0: none)."""
        self.num_aborted += applied  # per sample sequence, as the engine thread counts them (vt_requests_aborted)
        if rid in self.aborts and applied:
            self.aborts[rid] = (self.aborts[rid][0], steps, blocks_in_use)
        else:
            self.aborts.pop(rid, None)

    def die(self, e: BaseException) -> None:
        self._die(e)

    def stopped(self) -> None:
        self._running = False

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
            prompt, params, salt, added = arg
            stream = self._streams.get(rid)
            if stream is None:
                return  # the consumer left before the engine saw it
            try:
                req = self.engine.add_request(prompt, params, request_id=rid, cache_salt=salt)
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
                self._finished(Finished.of(r))
            if rid in self.aborts and aborted:
                self.aborts[rid] = (self.aborts[rid][0], self.num_steps, self.engine.kv_manager.num_used)
            else:
                self.aborts.pop(rid, None)  # it had finished, or never ran
        elif kind == "stop":
            for r in list(self.engine.requests.values()):
                for a in self.engine.abort(r.id):
                    self._finished(Finished.of(a))
            self._running = False
            self._fail_all(rid)

    def _fail_all(self, why: str) -> None:
        """Every request in flight, and every add still queued, fails with why."""
        for stream in list(self._streams.values()):
            stream.put(EngineDeadError(why))
        for rid in list(self._adds):  # engine process: adds it never answered
            self.settle_add(rid, EngineDeadError(why))
        if self._core is not None:
            return
        while True:
            try:
                kind, rid, arg = self._commands.get_nowait()
            except queue.Empty:
                return
            if kind == "add" and rid in self._streams:
                self._streams[rid].loop.call_soon_threadsafe(_settle, arg[-1], EngineDeadError(why))

    def _finished(self, f: Finished) -> None:
        self.num_preempted_done += f.num_preemptions
        self.on_finished(f)

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
        self._fail_all(str(e) if isinstance(e, EngineDeadError) else
                       f"the engine stopped on a fatal error: {type(e).__name__}: {e}")
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
                self._finished(Finished.of(r))
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

