"""The engine core in its own process, as vLLM's EngineCore: the API server's front (its event loop, the
streams, the HTTP work) and the engine's loop no longer share one interpreter's GIL, so neither waits for the
other's Python. The front talks to the core over a pipe in msgpack (msgspec), one message a step.

front -> core   ("add", rid, prompt ids, params, cache salt)   ("abort", rid)   ("stop", reason)
                ("reset_prefix_cache", n)
core -> front   ("ready", settled config)   ("failed", error class, text)   ("added", rid, error class, text)
                ("out", steps, stats, items, finished)   ("aborted", rid, samples ended, steps, blocks in use)
                ("reset", n, done)   ("dead", why)   ("stopped",)

A step's items carry what changed per request: each sample's new token ids and logprobs, and its text as the
length it keeps of what was sent plus what it adds (text is cumulative but not append-only: a stop string is
cut from it at the end). The front keeps each request's output and hands its streams whole RequestOutputs,
as the in-process engine thread does. A request with stop strings is detokenized by the core (it finds them in
the text); every other request's text is made here, in the front, from the ids (the core is asked for none:
detokenize=False), so the core's steps do not wait on detokenization (vLLM's split).

The core exits when the front's end of the pipe closes (the front died) and says "dead" before it exits on a
fatal error; a core that dies without a word (killed, out of memory) is an end of file to the front's reader.
Either way the front fails every request in flight with the reason and marks itself dead (`vt serve` exits 1).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import multiprocessing
import os
import queue
import signal
import sys
import threading
import traceback
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec

from vt.engine.config import EngineConfig
from vt.engine.core.request import CompletionOutput, Finished, RequestMetrics, RequestOutput, cached_of
from vt.engine.front.detokenizer import IncrementalDetokenizer
from vt.engine.sample.params import SamplingParams
from vt.errors import EngineDeadError, VtError, WorkerDied

IDLE_CHECK_S = 1.0  # an idle core checks its health (and the front's pipe) this often
_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder()


def _send(conn: Any, msg: tuple) -> None:
    conn.send_bytes(_enc.encode(msg))


def _params_wire(p: SamplingParams) -> dict[str, Any]:
    return {k: getattr(p, k) for k in SamplingParams.__dataclass_fields__}


def _params_from_wire(d: dict[str, Any]) -> SamplingParams:
    if d.get("logit_bias") is not None:
        d["logit_bias"] = {int(k): v for k, v in d["logit_bias"].items()}
    if d.get("structured_outputs") is not None:  # msgpack carries the dataclass as a map
        from vt.engine.sample.structured import StructuredOutputsParams

        d["structured_outputs"] = StructuredOutputsParams(**d["structured_outputs"])
    return SamplingParams(**d)


def error_from_wire(name: str, text: str) -> BaseException:
    """The typed error the core raised, rebuilt in the front (a RuntimeError naming it if it is not vt's)."""
    import vt.errors

    cls = getattr(vt.errors, name, None)
    if isinstance(cls, type) and issubclass(cls, VtError):
        try:
            return cls(text)
        except TypeError:  # an error whose constructor takes more than a message
            return VtError(f"{name}: {text}")
    return RuntimeError(f"{name}: {text}")


# ---- the core's side ----------------------------------------------------------------------------------------
def run_core(cfg: EngineConfig, conn: Any) -> None:
    """The core process's main: builds the engine, says ready (or why not), then serves the pipe until told to
    stop or the front goes away."""
    logging.basicConfig(format="vt: %(message)s", level=logging.INFO, stream=sys.stderr, force=True)
    # Shutdown is the front's: it drains, then says stop (or goes away, which ends serve()). A SIGTERM or SIGINT sent
    # to the whole process group (`timeout`, systemd, Ctrl-C) reaches this process too, and it died before the front
    # had drained: the server then stopped as if the engine had failed (exit 1).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from vt.engine.front.llm_engine import LLMEngine

    try:
        engine = LLMEngine(cfg)
    except BaseException as e:  # noqa: BLE001 - every start-up failure goes to the front, typed
        if not isinstance(e, VtError):
            traceback.print_exc()
        _send(conn, ("failed", type(e).__name__, str(e)))
        return
    gc.collect()
    gc.freeze()  # start-up's objects live as long as the process: out of the collector's walks
    _send(conn, ("ready", {"max_model_len": engine.cfg.max_model_len, "num_blocks": engine.cfg.num_blocks}))
    if not _Core(engine, conn).serve():  # a fatal error, said to the front; the workers are stopped
        # Out at once, past the interpreter's teardown (and its atexit hooks): a tensor-parallel group that a
        # dead peer left mid-collective is leaked (vt.parallel.leave_group), and when that collective failed
        # during a teardown, its thread aborted the process (std::terminate; seen in test_tp_leave's making).
        with contextlib.suppress(OSError):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(1)


class _Core:
    def __init__(self, engine: Any, conn: Any) -> None:
        self.engine, self.conn = engine, conn
        self.num_steps = 0
        self.num_preempted_done = 0
        self.sent: dict[str, list[Any]] = {}  # sample id -> [tokens sent, text sent]
        self.prompt_scores_sent: set[str] = set()

    def serve(self) -> bool:
        """Steps and answers the front until told to stop or the front goes away (True), or a fatal error, which
        the front is told (False)."""
        try:
            while True:
                busy = self.engine.has_unfinished()
                if not busy and not self.conn.poll(IDLE_CHECK_S):
                    self.engine.check_health()  # a tensor-parallel worker may die between requests
                    _send(self.conn, ("out", self.num_steps, self.stats(), [], []))
                    continue
                while self.conn.poll(0):
                    if not self.apply(_dec.decode(self.conn.recv_bytes())):
                        return True
                if self.engine.has_unfinished():
                    self.step()
        except EOFError:  # the front is gone: nobody is left to serve
            return True
        except BaseException as e:  # noqa: BLE001 - fatal (LLMEngine.step printed its traceback): said, then out
            with _quiet():
                _send(self.conn, ("dead", f"the engine stopped on a fatal error: {type(e).__name__}: {e}"))
            return False
        finally:
            self.engine.close(graceful=True)

    def apply(self, msg: list) -> bool:
        kind = msg[0]
        if kind == "batch":
            return all(self.apply(m) for m in msg[1])
        if kind == "add":
            _, rid, prompt, params, salt = msg
            try:
                req = self.engine.add_request(prompt, _params_from_wire(params), request_id=rid, cache_salt=salt)
                if req.is_finished:  # can never fit: refused as bad input, nothing held
                    from vt.errors import RequestError

                    raise RequestError(req.error or "request refused")
            except Exception as e:  # noqa: BLE001 - this request's failure alone: typed back to the front
                if not isinstance(e, VtError):
                    traceback.print_exc()
                    with _quiet():
                        self.engine.abort(rid)  # whatever of it was queued before the error
                _send(self.conn, ("added", rid, type(e).__name__, str(e)))
                return True
            _send(self.conn, ("added", rid, None, None))
        elif kind == "abort":
            aborted = self.engine.abort(msg[1])
            finished = [self._finished(r) for r in aborted]
            _send(self.conn, ("out", self.num_steps, self.stats(), [], finished))
            _send(self.conn, ("aborted", msg[1], len(aborted), self.num_steps, self.engine.kv_manager.num_used))
        elif kind == "reset_prefix_cache":
            _send(self.conn, ("reset", msg[1], self.engine.reset_prefix_cache()))
        elif kind == "stop":
            finished = [self._finished(a) for r in list(self.engine.requests.values()) for a in self.engine.abort(r.id)]
            _send(self.conn, ("out", self.num_steps, self.stats(), [], finished))
            _send(self.conn, ("stopped",))
            return False
        return True

    def step(self) -> None:
        stepped = self.engine.step()
        self.num_steps += 1
        seen: set[str] = set()
        items, finished = [], []
        for r in stepped:
            if r.is_finished:
                finished.append(self._finished(r))
            head = (r.siblings or [r])[0]
            if head.id not in seen:
                seen.add(head.id)
                items.append(self._item(head))
        _send(self.conn, ("out", self.num_steps, self.stats(), items, finished))

    def stats(self) -> dict[str, int]:
        st = self.engine.stats()
        st["preemptions"] += self.num_preempted_done
        return st

    def _finished(self, r: Any) -> tuple:
        self.num_preempted_done += r.num_preemptions
        if r.finish_reason == "abort":  # no step reports it again: what was sent of it goes now
            self.sent.pop(r.id, None)
            self.prompt_scores_sent.discard(r.id)
        f = Finished.of(r)
        return (f.request_id, f.index, f.num_prompt_tokens, f.num_output_tokens, f.arrival, f.first_token_time,
                f.finish_time, f.finish_reason, f.num_preemptions, f.scheduled_time, f.last_token_time, f.n)

    def _item(self, head: Any) -> tuple:
        if head.siblings is None:  # one sample (most requests): its own fields, no merging (runs per request)
            return self._item_of_one(head)
        samples = head.siblings
        deltas = [self._delta(s) for s in samples]
        times = [s.first_token_time for s in samples if s.first_token_time is not None]
        ends = [s.finish_time for s in samples]
        done = all(s.is_finished for s in samples)
        scores = self._prompt_scores(head)
        errors = [s.error for s in samples if s.error]
        if done:  # what was sent of its samples is forgotten with it (a finished sample stays while others run)
            self._forget(head, samples)
        return (head.id, done, errors[0] if errors else None, head.arrival, min(times) if times else None,
                None if None in ends else max(e for e in ends if e is not None),
                sum(s.num_preemptions for s in samples), scores, deltas, cached_of(head))

    def _item_of_one(self, r: Any) -> tuple:
        delta = self._delta(r)
        scores = self._prompt_scores(r)
        done = r.is_finished
        if done:
            self._forget(r, [r])
        return (r.id, done, r.error or None, r.arrival, r.first_token_time, r.finish_time, r.num_preemptions, scores,
                [delta], cached_of(r))

    def _prompt_scores(self, head: Any) -> list | None:
        """The prompt's logprobs, sent once (with the request's first output that holds them)."""
        if head.prompt_logprobs is None or head.id in self.prompt_scores_sent:
            return None
        self.prompt_scores_sent.add(head.id)
        return [None if d is None else {int(k): float(v) for k, v in d.items()} for d in head.prompt_logprobs]

    def _forget(self, head: Any, samples: list) -> None:
        self.prompt_scores_sent.discard(head.id)
        for s in samples:
            self.sent.pop(s.id, None)

    def _delta(self, s: Any) -> tuple:
        sent = self.sent.setdefault(s.id, [0, ""])
        text = s.text if s.is_finished or s.detok is None else s.detok.text
        prev = sent[1]
        keep = len(prev) if text.startswith(prev) else _common_prefix(prev, text)
        ids = [int(t) for t in s.output_ids[sent[0]:]]
        lps = None if s.logprobs is None else [{int(k): float(v) for k, v in d.items()} for d in s.logprobs[sent[0]:]]
        sent[0], sent[1] = len(s.output_ids), text
        cum = None if s.cumulative_logprob is None else float(s.cumulative_logprob)
        return (s.index, ids, keep, text[keep:], lps, cum, s.finish_reason, s.stop_reason)


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class _quiet:
    """Ignores what a dying core's last words meet (a closed pipe)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return exc[0] is not None and issubclass(exc[0], Exception)


# ---- the front's side ---------------------------------------------------------------------------------------
@dataclass(slots=True)
class _Sample:
    ids: list[int] = field(default_factory=list)
    text: str = ""
    logprobs: list | None = None
    cumulative_logprob: float | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    detok: IncrementalDetokenizer | None = None  # the front's, when the core sends no text


@dataclass(slots=True)
class _Output:
    """One request's output as the front keeps it, from the core's deltas."""

    prompt: str | None
    prompt_ids: list[int]
    samples: dict[int, _Sample] = field(default_factory=dict)
    prompt_logprobs: list | None = None
    tokenizer: Any = None  # set: the core sends no text, the front detokenizes
    include_stop: bool = False  # the request's include_stop_str_in_output (the front's text keeps the stop token's)
    skip_special_tokens: bool = True  # the request's: False keeps special tokens' text in the front's


    def apply(self, item: list) -> RequestOutput:
        rid, done, error, arrival, first, end, preemptions, scores, deltas, cached = item
        if scores is not None:
            self.prompt_logprobs = scores
        for index, ids, keep, add, lps, cum, reason, stop in deltas:
            s = self.samples.setdefault(index, _Sample())
            s.ids += ids
            if self.tokenizer is None:
                s.text = s.text[:keep] + add
            else:  # no stop strings: nothing in the text ends the sample, its ids say it all
                s.detok = s.detok or IncrementalDetokenizer(self.tokenizer, [],
                                                            skip_special_tokens=self.skip_special_tokens)
                ends = reason == "stop" and not self.include_stop  # EOS or a stop id: its id, not its text
                for t in ids[:-1] if ends else ids:
                    s.detok.add(t)
                s.text = s.detok.text if reason is None or stop is not None else s.detok.flush()  # as the core's
            if lps is not None:
                s.logprobs = (s.logprobs or []) + lps
            s.cumulative_logprob, s.finish_reason, s.stop_reason = cum, reason, stop
        outs = [CompletionOutput(i, s.text, list(s.ids), s.cumulative_logprob,
                                 None if s.logprobs is None else list(s.logprobs), s.finish_reason, s.stop_reason)
                for i, s in sorted(self.samples.items())]
        return RequestOutput(rid, self.prompt, self.prompt_ids, outs, done,
                             RequestMetrics(arrival, first, end, preemptions), error, self.prompt_logprobs, cached)


class EngineCoreClient:
    """The front's end: starts the core process (spawned: CUDA and tensor-parallel workers need a fresh
    interpreter), waits for it to be ready, and reads its messages on a thread of its own, calling back into
    the AsyncLLM that owns it."""

    def __init__(self, cfg: EngineConfig, owner: Any, tokenizer: Any = None) -> None:
        self.owner = owner
        self.tokenizer = tokenizer  # None: the core detokenizes every request
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=run_core, args=(cfg, child), name="vt-engine-core")
        self.proc.start()
        child.close()
        self._send_lock = threading.Lock()
        # the core's answers to prefix-cache resets, (call number, done); None: it died. One reset at a time.
        self._resets: queue.Queue[tuple[int, bool] | None] = queue.Queue()
        self._reset_lock = threading.Lock()
        self._num_resets = 0
        self.outputs: dict[str, _Output] = {}
        self.stats: dict[str, int] = {}
        try:
            msg = _dec.decode(self.conn.recv_bytes())
        except EOFError:
            self.proc.join(10)
            raise WorkerDied(f"the engine core process exited with code {self.proc.exitcode} while starting (its "
                             f"stderr says why; it is spawned, so a script that starts it needs "
                             f"`if __name__ == \"__main__\":`)") from None
        if msg[0] == "failed":
            self.proc.join(30)
            raise error_from_wire(msg[1], msg[2])
        self.cfg = replace(cfg, **msg[1])
        self.reader = threading.Thread(target=self._read, name="vt-engine-core-reader", daemon=True)
        self.reader.start()

    def send(self, msg: tuple) -> None:
        with self._send_lock:
            _send(self.conn, msg)

    def add(self, rid: str, prompt: str | None, ids: list[int], params: SamplingParams, send: bool = True,
            cache_salt: str | None = None) -> tuple:
        """Queues a request; send=False returns its message for a batch (add_all) instead of sending it."""
        here = self.tokenizer is not None and params.detokenize and not params.stop
        self.outputs[rid] = _Output(prompt, ids, tokenizer=self.tokenizer if here else None,
                                    include_stop=params.include_stop_str_in_output,
                                    skip_special_tokens=params.skip_special_tokens)
        msg = ("add", rid, ids, _params_wire(replace(params, detokenize=False) if here else params), cache_salt)
        if send:
            self.send(msg)
        return msg

    def reset_prefix_cache(self) -> bool:
        """The core's LLMEngine.reset_prefix_cache, its answer awaited: the core answers after the step it is in,
        and a core that dies first ends the wait (EngineDeadError), as it ends a generate's. Each call is numbered
        and takes only its own answer: one left by a call that stopped waiting is never read as another's."""
        with self._reset_lock:
            self._num_resets += 1
            n = self._num_resets
            try:
                self.send(("reset_prefix_cache", n))
            except OSError:
                raise EngineDeadError("the engine core is gone: the prefix-cache reset was not sent") from None
            while True:
                answer = self._resets.get()
                if answer is None:
                    self._resets.put(None)  # a later call learns it too
                    raise EngineDeadError("the engine core died before it answered a prefix-cache reset")
                if answer[0] == n:
                    return answer[1]

    def add_all(self, msgs: list[tuple]) -> None:
        """Requests the core adds before its next step, all of them: an offline batch's steps are the same as
        in-process, so its sampled tokens are too (a step's batch sets its GEMMs' rounding)."""
        self.send(("batch", msgs))

    def stop(self, timeout_s: float = 30.0) -> None:
        try:
            self.send(("stop", "the server is shutting down"))
        except OSError:
            pass  # already gone
        self.reader.join(timeout_s)
        self.proc.join(timeout_s)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()

    def _read(self) -> None:
        o = self.owner
        try:
            while True:
                msg = _dec.decode(self.conn.recv_bytes())
                kind = msg[0]
                if kind == "out":
                    _, o.num_steps, self.stats, items, finished = msg
                    outs = []
                    for item in items:
                        out = self.outputs.get(item[0])
                        if out is not None:
                            outs.append(out.apply(item))
                            if item[1]:
                                del self.outputs[item[0]]
                    for f in finished:  # counted first: a client that scrapes /metrics after its answer sees it
                        o.finished(Finished(*f))
                    o.deliver_outputs(outs)
                elif kind == "added":
                    _, rid, name, text = msg
                    if name is not None:
                        self.outputs.pop(rid, None)
                    o.settle_add(rid, None if name is None else error_from_wire(name, text))
                elif kind == "aborted":
                    _, rid, applied, steps, used = msg
                    self.outputs.pop(rid, None)
                    o.abort_applied(rid, applied, steps, used)
                elif kind == "reset":
                    self._resets.put((int(msg[1]), bool(msg[2])))
                elif kind == "dead":
                    self._resets.put(None)
                    o.die(EngineDeadError(msg[1]))
                    return
                elif kind == "stopped":
                    o.stopped()
                    return
        except (EOFError, OSError):
            self._resets.put(None)
            self.proc.join(5)
            o.die(EngineDeadError(f"the engine stopped: its process exited with code {self.proc.exitcode}"))
        except Exception as e:  # noqa: BLE001 - this front's own failure: said, never a reader that dies quietly
            traceback.print_exc()
            self._resets.put(None)
            o.die(EngineDeadError(f"the front failed on the engine's output: {type(e).__name__}: {e}"))
