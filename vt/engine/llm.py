"""LLMEngine (add_request / step) and the offline API `vt.LLM(model=...).generate(prompts, params)`."""

from __future__ import annotations

import itertools
import sys
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np

from vt.engine.config import EngineConfig
from vt.engine.request import Request, RequestOutput
from vt.engine.sampling import SamplingParams
from vt.errors import ConfigError, RequestError

Prompt = str | list[int]


class LLMEngine:
    def __init__(self, cfg: EngineConfig) -> None:
        from models.loader import load_checkpoint, resolve_model
        from models.qwen3 import Qwen3ForCausalLM
        from vt.engine.kv_cache import BlockPool
        from vt.engine.runner import ModelRunner
        from vt.engine.scheduler import Scheduler
        from vt.registry import make_backend

        self.cfg = cfg
        ckpt = load_checkpoint(resolve_model(cfg.model))
        if cfg.max_model_len > ckpt.config.max_position_embeddings:
            raise ConfigError(f"max_model_len={cfg.max_model_len}: must be <= the model's "
                              f"max_position_embeddings ({ckpt.config.max_position_embeddings})")
        self.tokenizer = ckpt.tokenizer
        self.generation_config = ckpt.generation_config
        self.eos_ids = set(ckpt.config.eos_token_ids) | set(_as_list(ckpt.generation_config.get("eos_token_id")))
        self.vocab_size = ckpt.config.vocab_size
        self.backend = make_backend(cfg.backend)
        self.model = Qwen3ForCausalLM(ckpt, self.backend)
        self.blocks = BlockPool(cfg.num_blocks, cfg.block_size, cfg.max_blocks_per_seq)
        self.scheduler = Scheduler(cfg, self.blocks, lookahead=self._lookahead)
        self.runner = ModelRunner(self.model, cfg)
        if cfg.speculative_model:
            from vt.engine.spec_decode import SpecDecoder

            draft = load_checkpoint(resolve_model(cfg.speculative_model))
            if draft.config.vocab_size != ckpt.config.vocab_size:
                raise ConfigError(f"speculative_model={cfg.speculative_model!r}: vocab_size "
                                  f"{draft.config.vocab_size} != the target's {ckpt.config.vocab_size}")
            if cfg.max_model_len + cfg.num_speculative_tokens > draft.config.max_position_embeddings:
                raise ConfigError(f"max_model_len={cfg.max_model_len} + num_speculative_tokens: must be <= the "
                                  f"draft's max_position_embeddings ({draft.config.max_position_embeddings})")
            self.runner.spec = SpecDecoder(self.runner, draft, cfg.num_speculative_tokens)
        self._ids = itertools.count()
        self._rng = np.random.default_rng(cfg.seed)
        self.requests: dict[str, Request] = {}

    def _lookahead(self, req: Request) -> int:
        """KV slots beyond the next token that a request's decode step writes: k when it speculates."""
        spec = self.runner.spec
        return spec.k if spec is not None and spec.has_context(req) else 0

    # ---- requests ---------------------------------------------------------------------------
    def tokenize(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, str):
            if not prompt:
                raise RequestError("prompt is empty")
            ids = self.tokenizer.encode(prompt).ids
        else:
            ids = [int(t) for t in prompt]
            bad = [t for t in ids if not 0 <= t < self.vocab_size]
            if bad:
                raise RequestError(f"prompt token ids {bad[:5]} are outside the vocabulary [0, {self.vocab_size})")
        if not ids:
            raise RequestError("prompt is empty")
        return ids

    def add_request(self, prompt: Prompt, params: SamplingParams | None = None,
                    request_id: str | None = None) -> Request:
        """Bad input raises RequestError (nothing is queued). A request that can never fit is
        returned already finished with an error; the engine carries on with the rest."""
        ids = self.tokenize(prompt)
        resolved = (params or SamplingParams()).resolve(self.generation_config)
        rid = request_id or f"req-{next(self._ids)}"
        if rid in self.requests:
            raise RequestError(f"request id {rid!r} is already in use")
        rng = None if resolved.is_greedy else np.random.default_rng(
            resolved.seed if resolved.seed is not None else self._rng.integers(1 << 62))
        req = Request(rid, ids, resolved, prompt if isinstance(prompt, str) else None, rng=rng)
        self.requests[rid] = req
        if len(ids) >= self.cfg.max_model_len:
            req.finish("error", f"prompt has {len(ids)} tokens; max_model_len={self.cfg.max_model_len} leaves "
                                f"no room for one generated token")
            del self.requests[rid]
        else:
            self.scheduler.add(req)
        return req

    def has_unfinished(self) -> bool:
        return self.scheduler.has_work()

    # ---- the step ---------------------------------------------------------------------------
    def step(self) -> list[Request]:
        """One engine step; returns the requests that got a token (or finished) in it."""
        try:
            return self._step()
        except Exception:
            in_flight = [r.id for r in self.scheduler.running] + [r.id for r in self.scheduler.waiting]
            traceback.print_exc()
            print(f"vt: fatal engine error; requests in flight: {in_flight}", file=sys.stderr)
            raise

    def _step(self) -> list[Request]:
        out = self.scheduler.schedule()
        if not out.requests:
            return []
        results = self.runner.execute(out, self.scheduler.running)
        for r in out.requests:
            res = results[r.id]
            if isinstance(res, str):  # this request fails; its neighbours carry on
                self._finish(r, "error", res)
                continue
            for token in res:  # a speculative step may bring several; stop at the first finish
                self._append(r, token)
                if r.is_finished:
                    break
        if self.runner.spec is not None:  # draft entries never outnumber live requests after a step
            self.runner.spec.prune(self.scheduler.running, unfinished=set(self.requests))
        return out.requests

    def _append(self, r: Request, token: int) -> None:
        import time

        r.output_ids.append(token)
        self.runner.batch.append_token(r.id, token)
        if r.first_token_time is None:
            r.first_token_time = time.monotonic()
        p = r.params
        if not p.ignore_eos and token in self.eos_ids:
            self._finish(r, "stop")
        elif p.stop and any(s in self._text(r) for s in p.stop):
            self._finish(r, "stop")
            r.text = self._cut_at_stop(r.text, p.stop)
        elif len(r.output_ids) >= p.max_tokens or r.num_tokens >= self.cfg.max_model_len:
            self._finish(r, "length")

    def _text(self, r: Request) -> str:
        r.text = self.tokenizer.decode(r.output_ids, skip_special_tokens=True)
        return r.text

    @staticmethod
    def _cut_at_stop(text: str, stops: list[str]) -> str:
        return text[: min(text.find(s) for s in stops if s in text)]

    def _finish(self, r: Request, reason: str, error: str | None = None) -> None:
        if reason != "stop" or not r.params.stop:
            self._text(r)
        r.finish(reason, error)
        self.scheduler.finish(r)
        self.requests.pop(r.id, None)  # ids are unique among requests in flight


def _as_list(x: Any) -> list[int]:
    return [] if x is None else (list(x) if isinstance(x, list) else [x])


class LLM:
    """Offline generation: `LLM(model="tiny-qwen3").generate(["Hello"], SamplingParams(max_tokens=8))`."""

    def __init__(self, model: str, backend: str = "cpu", **kw: Any) -> None:
        self.engine = LLMEngine(EngineConfig(model=model, backend=backend, **kw))

    def generate(self, prompts: Prompt | Sequence[Prompt],
                 params: SamplingParams | Sequence[SamplingParams] | None = None) -> list[RequestOutput]:
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]  # type: ignore[list-item]
        prompts = list(prompts)  # type: ignore[arg-type]
        plist = list(params) if isinstance(params, Sequence) else [params] * len(prompts)
        if len(plist) != len(prompts):
            raise RequestError(f"{len(prompts)} prompts but {len(plist)} SamplingParams")
        for p in prompts:  # validate everything before queueing anything: bad input loses nothing
            self.engine.tokenize(p)  # type: ignore[arg-type]
        reqs = [self.engine.add_request(p, sp) for p, sp in zip(prompts, plist)]  # type: ignore[arg-type]
        while self.engine.has_unfinished():
            self.engine.step()
        return [RequestOutput.of(r) for r in reqs]
