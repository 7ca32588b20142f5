"""The offline `LLM`'s engine in a process of its own (`LLM(..., engine_process=True)`, vLLM's default for its
offline LLM): the engine core runs in a spawned process (vt/engine/core/proc.py, as `vt serve` runs it), this
process keeps the checkpoint's text side (FrontEngine) and each request's output, built from the core's deltas.

`run` queues a batch of prompts and blocks until every one has finished. Every prompt is checked by the core
before any is kept: if the core refuses one (too long, a parameter the model cannot take), the others are
aborted and the first refusal is raised, as the in-process engine refuses a batch before queueing any of it. A
core that dies (killed, out of memory) fails the batch with EngineDeadError, never a hang.
"""

from __future__ import annotations

import atexit
import itertools
import threading
from typing import Any

from vt.engine.config import EngineConfig
from vt.engine.core.request import Finished, RequestOutput
from vt.engine.sample.params import SamplingParams
from vt.errors import EngineDeadError

_PENDING = object()  # an add the core has not answered yet
WAIT_S = 0.1  # the waiting thread re-checks the core's process at least this often


class ProcessEngine:
    def __init__(self, cfg: EngineConfig) -> None:
        from vt.engine.core.proc import EngineCoreClient
        from vt.engine.front.llm_engine import FrontEngine

        self.front = FrontEngine(cfg)  # tokenizer, chat template, special tokens, vocabulary
        self._cond = threading.Condition()
        self._outputs: dict[str, RequestOutput] = {}  # the newest output of each request in flight
        self._adds: dict[str, Any] = {}  # request id -> _PENDING, None (kept) or the core's refusal
        self.dead: BaseException | None = None
        self.num_steps = 0  # the reader thread sets it from each step's message
        self._ids = itertools.count()
        self.core = EngineCoreClient(cfg, self, self.front.tokenizer)
        self.cfg = self.front.cfg = self.core.cfg
        atexit.register(self.close)  # after multiprocessing's own exit hook, so it runs first: the core stops

    @property
    def tokenizer(self) -> Any:
        return self.front.tokenizer

    @property
    def chat_template(self) -> str | None:
        return self.front.chat_template

    @property
    def special_tokens(self) -> dict[str, str]:
        return self.front.special_tokens

    def tokenize(self, prompt: Any, add_special_tokens: bool = True) -> list[int]:
        return self.front.tokenize(prompt, add_special_tokens)

    def run(self, prompts: list[Any], params: list[SamplingParams | None],
            salts: list[str | None] | None = None) -> list[RequestOutput]:
        """salts: each prompt's cache salt (None: none)."""
        ids = [self.front.tokenize(p) for p in prompts]  # a RequestError before anything is queued
        salts = salts or [None] * len(prompts)
        rids = [f"offline-{next(self._ids)}" for _ in prompts]
        with self._cond:
            self._check_alive()
            for rid in rids:
                self._adds[rid] = _PENDING
        self.core.add_all([self.core.add(rid, p if isinstance(p, str) else None, toks, sp or SamplingParams(),
                                         send=False, cache_salt=salt)
                           for rid, p, toks, sp, salt in zip(rids, prompts, ids, params, salts)])
        try:
            self._wait(lambda: all(self._adds[r] is not _PENDING for r in rids))
            refused = next((self._adds[r] for r in rids if self._adds[r] is not None), None)
            if refused is not None:
                for rid in rids:
                    self.core.send(("abort", rid))
                raise refused
            self._wait(lambda: all(r in self._outputs and self._outputs[r].finished for r in rids))
            return [self._outputs[r] for r in rids]
        finally:
            with self._cond:
                for rid in rids:
                    self._adds.pop(rid, None)
                    self._outputs.pop(rid, None)

    def _wait(self, done: Any) -> None:
        with self._cond:
            while not done():
                self._check_alive()
                self._cond.wait(WAIT_S)

    def _check_alive(self) -> None:
        if self.dead is not None:
            raise EngineDeadError(f"the engine stopped: {self.dead}")
        if not self.core.proc.is_alive() and not self.core.reader.is_alive():
            raise EngineDeadError(f"the engine stopped: its process exited with code {self.core.proc.exitcode}")

    def reset_prefix_cache(self) -> bool:
        with self._cond:
            self._check_alive()
        return self.core.reset_prefix_cache()

    def close(self) -> None:
        """Stops the core process (a second call, or after it died, does nothing)."""
        if self.dead is None and self.core.proc.is_alive():
            self.core.stop()

    # ---- the core's reader thread calls these (vt/engine/core/proc.py) ---------------------------
    def deliver_outputs(self, outs: list[RequestOutput]) -> None:
        with self._cond:
            for out in outs:
                self._outputs[out.request_id] = out
            self._cond.notify_all()

    def settle_add(self, rid: str, error: BaseException | None) -> None:
        with self._cond:
            if rid in self._adds:
                self._adds[rid] = error
            self._cond.notify_all()

    def finished(self, f: Finished) -> None:
        pass  # the output marked finished carries what the offline API returns

    def abort_applied(self, rid: str, applied: int, steps: int, blocks_in_use: int) -> None:
        pass

    def die(self, e: BaseException) -> None:
        with self._cond:
            self.dead = e
            self._cond.notify_all()

    def stopped(self) -> None:
        with self._cond:
            self._cond.notify_all()
