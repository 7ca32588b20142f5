"""LLMEngine: add_request, and step (schedule, run, update). The offline API is vt/engine/front/llm.py."""

from __future__ import annotations

import itertools
import json
import logging
import sys
import time
import traceback
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from vt.engine.config import EngineConfig, resolve_dtype
from vt.engine.core.kv_manager import KVCacheManager
from vt.engine.core.outputs import RunnerOutput, SchedulerOutput
from vt.engine.core.request import Request, Status
from vt.engine.front.detokenizer import NO_TEXT, IncrementalDetokenizer
from vt.engine.sample.params import SamplingParams, rng_seed, wrap_seed
from vt.errors import ConfigError, EngineInvariantError, RequestError

SLOW_STEP_S = 1.0  # a step this long is logged with what it computed: on a GPU, steps take milliseconds

Prompt = str | list[int]


def _device_memory(backend: str) -> tuple[int, int] | None:
    """(free, total) bytes of the current GPU, or None where CuPy cannot say."""
    try:
        import cupy

        free, total = cupy.cuda.runtime.memGetInfo()
        return int(free), int(total)
    except Exception:  # noqa: BLE001 - no CuPy, no driver: the caller says what to give instead
        return None


class LLMEngine:
    """The engine core: `step()` schedules, runs the runner, and applies its output in the update step,
    the only place a request's tokens, stops and lifetime change."""

    def __init__(self, cfg: EngineConfig) -> None:
        from models.loader import load_checkpoint, resolve_model
        from models.registry import load_model
        from vt.engine.core.scheduler import Scheduler
        from vt.engine.worker.runner import ModelRunner
        from vt.registry import make_backend

        self.cfg = cfg
        ckpt = load_checkpoint(resolve_model(cfg.model))
        if cfg.max_model_len and cfg.max_model_len > ckpt.config.max_position_embeddings:
            raise ConfigError(f"max_model_len={cfg.max_model_len}: must be <= the model's "
                              f"max_position_embeddings ({ckpt.config.max_position_embeddings})")
        self.tokenizer, self.chat_template, self.special_tokens = _text_side(ckpt, cfg)
        self.generation_config = _generation_config(ckpt, cfg)
        self.eos_ids = ckpt.eos_ids
        self.vocab_size = ckpt.config.vocab_size
        self.dtype = resolve_dtype(cfg.dtype, ckpt.config.dtype, cfg.backend)
        profile = not cfg.num_blocks and cfg.backend == "cuda" and cfg.kv_cache_gib is None
        if not profile:
            self._size_kv(ckpt)  # before any weight or KV block is allocated
        self.workers: Any = None
        self._close: Any = None  # the workers' shutdown, also run at exit
        if cfg.tensor_parallel_size > 1:
            if profile:
                raise ConfigError("tensor_parallel_size > 1 on CUDA: give num_blocks or kv_cache_gib (the profile run "
                                  "that sizes the KV cache from gpu_memory_utilization runs on one GPU only, so far)")
            self.backend, self.model = self._start_ranks(ckpt)
        else:
            free_at_start = _device_memory(cfg.backend) if cfg.backend == "cuda" else None
            self.backend = make_backend(cfg.backend)
            self.model = load_model(ckpt, self.backend, self.dtype)
            if profile:
                self._size_kv(ckpt, self._profile(ckpt, free_at_start))
            elif cfg.backend == "cuda" and free_at_start is not None:  # given num_blocks: the largest step counts too
                self._check_step_peak(ckpt, free_at_start)
        stream = self.backend.new_stream()  # one compute stream for the target and the draft
        proposer = self._make_proposer(ckpt, stream)
        self.kv_manager = KVCacheManager(cfg.num_blocks, cfg.block_size, cfg.max_blocks_per_seq, cfg.num_kv_groups,
                                         enable_caching=cfg.enable_prefix_caching)
        self.scheduler = Scheduler(cfg, self.kv_manager, proposer.k if proposer is not None else 0)
        self._tokenizer_json: str | None = None  # the tokenizer as llguidance reads it: serialized on first need
        self.runner = ModelRunner(self.model, cfg, proposer, stream, eos_ids=tuple(sorted(self.eos_ids)),
                                  grammars=self.grammars)
        self._ids = itertools.count()
        self._rng = np.random.default_rng(rng_seed(cfg.seed))
        self.requests: dict[str, Request] = {}
        self.num_steps = 0
        # the step launched and not yet applied: (its schedule, the wait for its results, the requests it samples)
        self._inflight: tuple[SchedulerOutput, Any, list[Request]] | None = None
        self._left_inflight: set[str] = set()  # finished while a step that samples for them was in flight
        self.num_overlapped = 0  # steps launched while the one before was still in flight
        if self.workers is not None:
            try:
                self.workers.wait_ready()
            except Exception:
                self.close(graceful=False)
                raise
            self.backend.watchdog = self.workers.check_alive  # host waits poll it: a dead peer never hangs one

    def _start_ranks(self, ckpt: Any) -> tuple[Any, Any]:
        """Rank 0 of a tensor-parallel group: the workers start, every rank joins the group, then each
        loads its slice (a model that cannot be split is refused before any process starts). If rank 0
        fails while starting, the workers are stopped and their words, if any, explain why."""
        from models.registry import load_model
        from models.shard import check_divisible
        from vt.engine.worker.tp import TIMEOUT_S, Workers, check_devices
        from vt.parallel import host_store, init_group
        from vt.registry import backend_class, make_backend

        n = self.cfg.tensor_parallel_size
        check_divisible(ckpt.config, n)
        backend_class(self.cfg.backend).check_model(ckpt.config)  # here, not from a worker that died of it
        check_devices(self.cfg.backend, n)
        self.workers = Workers(self.cfg, host_store(n, TIMEOUT_S))
        self._close = weakref.finalize(self, self.workers.shutdown)  # at exit too: no orphaned ranks
        try:
            backend = make_backend(self.cfg.backend)
            group = init_group(backend, 0, n, self.workers.store, TIMEOUT_S)
            return backend, load_model(ckpt, backend, self.dtype, group)
        except Exception as e:
            err = self.workers.explain(e, grace_s=1.0)
            self.close(graceful=False)
            raise err from e

    def check_health(self) -> None:
        """Raises WorkerDied if a tensor-parallel worker is gone (nothing to check on one device)."""
        if self.workers is not None:
            self.workers.check_alive()

    def close(self, graceful: bool = True) -> None:
        """Stops the tensor-parallel workers: in order (graceful), or killed."""
        if self.workers is not None:
            if not graceful:
                self.workers.kill()
            self._close()
            self.workers = None

    def _size_kv(self, ckpt: Any, gpu_budget: int | None = None) -> None:
        """Settles max_model_len and num_blocks. Given num_blocks: checked against the backend's free memory
        with the weights (one rank's share under tensor parallelism), before anything is allocated. Else sized:
        from the profiled GPU budget, from kv_cache_gib, or on the CPU from its default budget. A block's bytes
        count every group that allocates it (a draft model's too). max_model_len, when not given, is the
        checkpoint's (the shorter of the target's and a draft's), capped by what the blocks hold. The plan is
        logged in every mode: blocks, bytes, the longest context, the concurrency that fits."""
        from vt.dtypes import STORAGE
        from vt.engine.memory import (
            available_bytes,
            check_fits,
            check_kv_gib,
            cpu_kv_budget,
            plan_blocks,
            plan_kv,
            weight_bytes,
        )

        cfg, itemsize = self.cfg, STORAGE[self.dtype].itemsize
        tp = cfg.tensor_parallel_size
        per_block = self._kv_block_bytes(ckpt)
        model_max_len = self._model_max_len(ckpt)
        if cfg.num_blocks:
            free = available_bytes(cfg.backend)
            if free is not None:
                check_fits(cfg.num_blocks, per_block, weight_bytes(ckpt.weights.infos, itemsize, tp), *free)
            plan = plan_blocks(cfg.num_blocks, per_block, cfg.block_size, cfg.num_kv_groups, model_max_len,
                               cfg.max_model_len or None, f"num_blocks={cfg.num_blocks}", "raise num_blocks")
        else:
            if gpu_budget is None:
                avail = available_bytes(cfg.backend)
                if cfg.kv_cache_gib is not None and avail is not None:
                    check_kv_gib(cfg.kv_cache_gib, weight_bytes(ckpt.weights.infos, itemsize, tp), *avail)
                gpu_budget = cpu_kv_budget(cfg.kv_cache_gib, avail[0] if avail else 0)
            plan = plan_kv(gpu_budget, per_block, cfg.block_size, cfg.num_kv_groups, model_max_len,
                           cfg.max_model_len or None, cfg.max_num_seqs,
                           cap_to_concurrency=cfg.backend == "cpu" and cfg.kv_cache_gib is None)
        for line in plan.lines:
            logging.getLogger("vt").info(line)
        cfg.settle(plan.max_model_len, plan.num_blocks)

    def _draft_config(self) -> Any:
        """The draft model's config (None without one): its KV group and positions bound the sizing."""
        from models.loader import load_checkpoint, resolve_model

        if not self.cfg.has_draft_model:
            return None
        return load_checkpoint(resolve_model(str(self.cfg.speculative_model))).config

    def _kv_block_bytes(self, ckpt: Any) -> int:
        """One block's bytes on this rank, in every group that allocates it: the target's layers (its share of
        the KV heads), and a draft model's, whose arrays hold as many blocks (proposers.py) on rank 0."""
        from vt.dtypes import STORAGE
        from vt.engine.memory import kv_bytes_per_block

        cfg, itemsize = self.cfg, STORAGE[self.dtype].itemsize
        per_block = kv_bytes_per_block(ckpt.config, cfg.block_size, itemsize, cfg.tensor_parallel_size)
        draft = self._draft_config()
        return per_block + (kv_bytes_per_block(draft, cfg.block_size, itemsize) if draft is not None else 0)

    def _model_max_len(self, ckpt: Any) -> int:
        """The default max_model_len: the checkpoint's, no longer than a draft model's positions (as vLLM sets the
        draft's length to the shorter of the two); a given one past the draft's is refused by name."""
        target, draft = ckpt.config.max_position_embeddings, self._draft_config()
        if draft is None:
            return target
        limit = draft.max_position_embeddings
        # no more than the draft's: the scheduler proposes only while num_tokens + k <= max_model_len, so no draft
        # position reaches max_model_len
        if self.cfg.max_model_len > limit:
            raise ConfigError(f"max_model_len={self.cfg.max_model_len}: must be <= the draft model's "
                              f"max_position_embeddings ({limit}, speculative_model={self.cfg.speculative_model!r})")
        if limit < target and not self.cfg.max_model_len:
            logging.getLogger("vt").info("max_model_len at most %d: the draft model's max_position_embeddings, below "
                                         "the target's %d", limit, target)
        return min(target, limit)

    def _profile(self, ckpt: Any, free_at_start: tuple[int, int] | None) -> int:
        """The KV budget on one GPU: gpu_memory_utilization of it, less what the weights and the largest step
        hold (vt/engine/worker/profile.py)."""
        from vt.engine.memory import gpu_kv_budget

        if free_at_start is None:
            raise ConfigError("num_blocks: CUDA's free memory cannot be read; give num_blocks or kv_cache_gib")
        if self.cfg.gpu_memory_utilization is None:
            raise EngineInvariantError("gpu_memory_utilization is None on CUDA (EngineConfig sets 0.9 there)")
        own = self._non_kv_bytes(ckpt, free_at_start)
        return gpu_kv_budget(free_at_start[1], free_at_start[0], self.cfg.gpu_memory_utilization, own)

    def _check_step_peak(self, ckpt: Any, free_at_start: tuple[int, int]) -> None:
        """A given num_blocks against what the GPU had free, counting the weights and the real peak of the largest
        step (profiled), not the weights alone: refused with both figures before the KV cache is allocated."""
        from vt.engine.memory import check_fits

        non_kv = self._non_kv_bytes(ckpt, free_at_start)
        check_fits(self.cfg.num_blocks, self._kv_block_bytes(ckpt), non_kv, free_at_start[0], "the GPU",
                   what="the weights and the largest step (profiled)")

    def _non_kv_bytes(self, ckpt: Any, free_at_start: tuple[int, int]) -> int:
        """What this engine holds on the GPU besides the KV cache: the weights, the largest step's peak (its pool
        blocks), a draft model's weights."""
        from vt.engine.worker.profile import profile_non_kv_bytes

        cfg = self.cfg
        free0, total = free_at_start
        max_len = cfg.max_model_len or ckpt.config.max_position_embeddings
        batched = cfg.max_num_batched_tokens or max(8192, max_len)
        non_kv = profile_non_kv_bytes(self.model, cfg.block_size, cfg.max_num_seqs, batched, max_len,
                                      lambda: total - _device_memory("cuda")[0])  # type: ignore[index]
        if cfg.has_draft_model:  # loaded after the sizing: its weights are counted here, its KV in the plan
            from models.loader import load_checkpoint, resolve_model
            from vt.dtypes import STORAGE
            from vt.engine.memory import weight_bytes

            draft = load_checkpoint(resolve_model(str(cfg.speculative_model)))
            non_kv += weight_bytes(draft.weights.infos, STORAGE[self.dtype].itemsize)
        return non_kv - (total - free0)  # less what others held before this engine started

    def _make_proposer(self, ckpt: Any, stream: Any) -> Any:
        from models.loader import load_checkpoint, resolve_model
        from models.registry import load_model
        from vt.engine.config import NGRAM, NGRAM_LOOKUP_MAX
        from vt.engine.spec_decode.proposers import DraftModelProposer, NgramProposer

        cfg = self.cfg
        if cfg.speculative_model is None:
            return None
        if cfg.speculative_model == NGRAM:
            return NgramProposer(cfg.num_speculative_tokens, cfg.ngram_prompt_lookup_max or NGRAM_LOOKUP_MAX)
        draft = load_checkpoint(resolve_model(cfg.speculative_model))
        if draft.config.vocab_size != ckpt.config.vocab_size:
            raise ConfigError(f"speculative_model={cfg.speculative_model!r}: vocab_size "
                              f"{draft.config.vocab_size} != the target's {ckpt.config.vocab_size}")
        return DraftModelProposer(load_model(draft, self.backend, self.dtype), cfg, stream)

    # ---- requests ---------------------------------------------------------------------------
    def tokenize(self, prompt: Prompt, add_special_tokens: bool = True) -> list[int]:
        return tokenize_prompt(self.tokenizer, self.vocab_size, prompt, add_special_tokens)

    def stats(self) -> dict[str, int]:
        """What /metrics reports of the engine now: ints, and a tuple() of the request table, which CPython copies
        without letting the engine thread run in between (a snapshot, never a changing dict)."""
        sched, kv, driver = self.scheduler, self.kv_manager, self.runner.decoder
        return {"running": len(sched.running), "waiting": len(sched.waiting), "kv_used": kv.num_used,
                "kv_total": kv.num_blocks, "prefix_queries": kv.queries, "prefix_hits": kv.hits,
                "prefix_preempted_queries": kv.preempted_queries, "prefix_preempted_hits": kv.preempted_hits,
                "preemptions": sum(r.num_preemptions for r in tuple(self.requests.values())),
                "graph_replays": driver.num_replays, "eager_steps": driver.num_eager,
                "pool_misses": self.backend.pool.stats().get("misses", 0)}

    def check_request(self, prompt: Prompt, params: SamplingParams | None = None) -> tuple[list[int], Any]:
        """The prompt's token ids and the resolved parameters, or the RequestError add_request would raise
        (nothing is queued either way: LLM.generate checks every request before it queues any)."""
        from vt.engine.sample.sampler import MAX_BANNED

        ids = self.tokenize(prompt)
        if len(ids) >= self.cfg.max_model_len:  # refused before anything runs, as vLLM's input processor refuses it
            raise RequestError(f"prompt has {len(ids)} tokens; max_model_len={self.cfg.max_model_len} leaves no room "
                               f"for one generated token")
        resolved = (params or SamplingParams()).resolve(self.generation_config)
        if params is not None and params.bad_words:
            resolved = self._with_bad_words(resolved, params.bad_words)
        if params is not None and params.structured_outputs is not None:
            resolved = self._with_grammar(resolved, params.structured_outputs)
        if resolved.has_penalties and self.scheduler.num_spec_tokens:
            name, value = next((n, v) for n, v, off in (("repetition_penalty", resolved.repetition_penalty, 1.0),
                                                        ("presence_penalty", resolved.presence_penalty, 0.0),
                                                        ("frequency_penalty", resolved.frequency_penalty, 0.0))
                               if v != off)  # the field first: the server names it as the refusal's param
            raise RequestError(f"{name}={value}: penalties are not supported with speculative decoding")
        for name, tokens in (("stop_token_ids", resolved.stop_token_ids),
                             ("logit_bias", [t for t, _ in resolved.logit_bias]),
                             ("allowed_token_ids", resolved.allowed_token_ids or ())):
            if any(t >= self.vocab_size for t in tokens):
                raise RequestError(f"{name} {[t for t in tokens if t >= self.vocab_size][:5]}: outside the "
                                   f"vocabulary [0, {self.vocab_size})")
        banned = set(resolved.stop_token_ids) | (set() if resolved.ignore_eos else self.eos_ids)
        if resolved.min_tokens and len(banned) > MAX_BANNED:
            raise RequestError(f"min_tokens={resolved.min_tokens} holds off {len(banned)} token ids (EOS and "
                               f"stop_token_ids); at most {MAX_BANNED} are supported")
        allowed = resolved.allowed_token_ids
        if resolved.min_tokens and allowed is not None and set(allowed) <= banned:
            # every token the request may draw is held off until min_tokens: its first draw would find none (the
            # sampler's non-finite guard then failed it as a server error, 500)
            raise RequestError(f"min_tokens={resolved.min_tokens} holds off every one of allowed_token_ids "
                               f"{sorted(set(allowed))[:5]} (EOS and stop_token_ids): no token could be drawn")
        return ids, resolved

    def grammars(self) -> Any:
        """llguidance's view of the checkpoint's tokenizer (built on the first structured output, then kept)."""
        from vt.engine.sample.structured import grammar_tokenizer

        if self._tokenizer_json is None:
            self._tokenizer_json = self.tokenizer.to_str()
        return grammar_tokenizer(self._tokenizer_json, self.vocab_size, tuple(sorted(self.eos_ids)))

    def _with_grammar(self, resolved: Any, so: Any) -> Any:
        """resolved with its structured output's grammar, compiled and checked against the tokenizer, or the
        RequestError naming structured_outputs: a grammar llguidance refuses, or what vt cannot run it with."""
        if self.scheduler.num_spec_tokens:
            raise RequestError(f"structured_outputs.{so.kind}: not supported with speculative decoding")
        if self.cfg.tensor_parallel_size > 1:
            raise RequestError(f"structured_outputs.{so.kind}: not supported with tensor_parallel_size > 1")
        return replace(resolved, grammar=self.grammars().check(so))

    def _with_bad_words(self, resolved: Any, words: list[str]) -> Any:
        """resolved with its bad words as token ids (vLLM's tokenization), or the RequestError naming what cannot
        run: a token outside the vocabulary, a word of several tokens under speculative decoding (its ban depends
        on tokens the draft proposes), more banned and biased tokens than a sampler row holds."""
        from vt.engine.sample.sampler import MAX_BIASED

        seqs = bad_words_token_ids(self.tokenizer, words)
        named = f"bad_words {words[:3]!r}{'...' if len(words) > 3 else ''}"  # the words, not a whole long list
        outside = sorted({t for w in seqs for t in w if not 0 <= t < self.vocab_size})
        if outside:
            raise RequestError(f"{named}: token ids {outside[:5]} are outside the vocabulary [0, {self.vocab_size})")
        resolved = replace(resolved, bad_words_token_ids=tuple(tuple(w) for w in seqs))
        if resolved.sequence_bans and self.scheduler.num_spec_tokens:
            raise RequestError(f"{named}: words of more than one token are not supported with speculative decoding")
        width = len(resolved.biased_tokens) + len({w[-1] for w in resolved.sequence_bans})
        if width > MAX_BIASED:
            raise RequestError(f"{named} with logit_bias / allowed_token_ids name {width} tokens; at most "
                               f"{MAX_BIASED} per request")
        allowed = resolved.allowed_token_ids
        if allowed is not None and set(allowed) <= {w[0] for w in seqs if len(w) == 1}:
            # every token the request may draw is banned: its first draw would find none (greedy took token 0)
            raise RequestError(f"{named} bans every one of allowed_token_ids {sorted(set(allowed))[:5]}: no token "
                               f"could be drawn")
        return resolved

    def add_request(self, prompt: Prompt, params: SamplingParams | None = None,
                    request_id: str | None = None, cache_salt: str | None = None) -> Request:
        """Bad input, or a prompt that leaves no room for one generated token, raises RequestError (nothing is
        queued). cache_salt (vLLM's): the request shares cached prefix blocks only with requests of the same salt."""
        check_cache_salt(cache_salt)
        ids, resolved = self.check_request(prompt, params)
        rid = request_id or f"req-{next(self._ids)}"
        ids_n = [rid] + [f"{rid}#{i}" for i in range(1, resolved.n)]
        if any(i in self.requests for i in ids_n):
            raise RequestError(f"request id {rid!r} is already in use")
        seed = resolved.seed if resolved.seed is not None else int(self._rng.integers(1 << 62))
        root = KVCacheManager.salt_root(cache_salt)
        samples = [Request(i, ids, resolved, prompt if isinstance(prompt, str) else None, seed=wrap_seed(seed + k),
                           index=k, cache_root=root) for k, i in enumerate(ids_n)]
        for req in samples:
            req.siblings = samples if resolved.n > 1 else None
            req.detok = (IncrementalDetokenizer(self.tokenizer, resolved.stop, resolved.include_stop_str_in_output,
                                                resolved.skip_special_tokens) if resolved.detokenize else NO_TEXT)
            self.requests[req.id] = req
            self.scheduler.add(req)
        return samples[0]

    def reset_prefix_cache(self) -> bool:
        """KVCacheManager.reset_prefix_cache: True once every cached prefix is forgotten; False while requests run."""
        ok = self.kv_manager.reset_prefix_cache()
        if not ok:
            logging.getLogger("vt").warning("the prefix cache was not reset: %d requests hold KV blocks",
                                            len(self.kv_manager.tables))
        return ok

    def abort(self, request_id: str) -> list[Request]:
        """Finishes every sample of the request with reason "abort": its blocks (all groups) are free
        now; the runner drops it next step. Returns the requests aborted (none if already finished)."""
        out = []
        # its samples by their head, never by an id's prefix: a user's own "x#1" is not a sample of "x"
        samples = [r for r in self.requests.values() if (r.siblings or [r])[0].id == request_id]
        for r in samples:
            if not r.is_finished:
                self._finish(r, "abort")
                out.append(r)
        return out

    def has_unfinished(self) -> bool:
        return self.scheduler.has_work() or self._inflight is not None

    # ---- the step ---------------------------------------------------------------------------
    def step(self) -> list[Request]:
        """One engine step; returns the requests that got a token (or finished) in it. With async scheduling,
        the next decode step is scheduled and launched before this one's results are applied, so the host's
        update (stops, detokenization) overlaps the device's next step."""
        t0 = time.perf_counter()
        try:
            if self._inflight is None:
                so = self.scheduler.schedule()
                if so.is_empty:
                    return self._check_stall()
                self._launch(so)
            assert self._inflight is not None
            so, wait, sampling = self._inflight
            self._inflight = None
            if self.cfg.async_scheduling and self._can_overlap(so):
                following = self.scheduler.schedule()
                if not following.is_empty:
                    self._launch(following)
                    self.num_overlapped += 1
            out = wait()
            if (took := time.perf_counter() - t0) > SLOW_STEP_S:
                self._log_slow(so, took)
            for r in sampling:
                r.num_inflight -= 1
            return self._update(so, out)
        except Exception:
            in_flight = [r.id for r in self.scheduler.running] + [r.id for r in self.scheduler.waiting]
            traceback.print_exc()
            print(f"vt: fatal engine error; requests in flight: {in_flight}", file=sys.stderr)
            raise

    def _log_slow(self, so: SchedulerOutput, took: float) -> None:
        chunks = so.prefill_chunks
        prefill = sum(so.num_scheduled_tokens[rid] for rid in chunks)
        logging.getLogger("vt").warning(
            "step %d took %.2f s to its results (%d decode rows, %d prefill tokens in %d chunks, %d admitted); "
            "a first use compiling kernels, or the GPU shared with another process, makes such a step",
            so.step, took, len(so.num_scheduled_tokens) - len(chunks), prefill, len(chunks), len(so.new_reqs))

    def _launch(self, so: SchedulerOutput) -> None:
        """Launches the step; it is in flight until the next step() applies it. The requests whose next token
        it samples count it in num_inflight, so a step scheduled meanwhile counts that token's KV slot."""
        self.num_steps += 1
        so.step = self.num_steps
        sampling, requests = [], self.requests
        for rid in so.num_scheduled_tokens:
            r = requests.get(rid)
            if r is not None and r.num_computed >= len(r.prompt_ids) + len(r.output_ids) + r.num_inflight:
                r.num_inflight += 1
                sampling.append(r)
        self._inflight = (so, self._execute(so), sampling)

    def _execute(self, so: SchedulerOutput) -> Any:
        """The runner's launch; its result's wait. Without async scheduling (and on tensor-parallel ranks) the
        step runs to its end here."""
        if self.workers is None:
            if self.cfg.async_scheduling:
                return self.runner.launch(so)
            out = self.runner.execute(so)
            return lambda: out
        try:
            self.workers.broadcast(so)
            out = self.runner.execute(so)
        except Exception as e:
            raise self.workers.explain(e) from e
        return lambda: out

    def _can_overlap(self, so: SchedulerOutput) -> bool:
        """Whether the next step may be scheduled before this one's results are applied: any step after any
        step (decode rows read their last token on the device, whether the step is a decode step or a mixed
        one), except with speculation, penalties or bad words of several tokens, whose inputs (proposals, the tokens
        so far) are the host's."""
        if so.spec_tokens:
            return False
        return not any(r.params.reads_its_output for r in self.scheduler.running)

    def _check_stall(self) -> list[Request]:
        """Nothing was scheduled, yet requests are in flight: no later step would differ. A waiting head that
        can never be admitted fails alone, naming the numbers, and the rest carry on (returned: it finished
        this step); any other stall is the engine's own bug, raised rather than spun on."""
        sched, kv = self.scheduler, self.kv_manager
        stuck = sched.unrunnable_head()
        if stuck is not None:
            head, need = stuck
            self._finish(head, "error", f"request {head.id} needs {need} KV blocks for its first "
                                        f"{min(head.num_tokens, self.cfg.max_num_batched_tokens)} tokens; "
                                        f"{kv.num_free} of {kv.num_blocks} are free and no request in flight "
                                        f"holds any: it can never run")
            return [head]
        if sched.waiting or sched.running:
            waiting = [f"{r.id} ({r.num_tokens} tokens)" for r in list(sched.waiting)[:3]]
            raise EngineInvariantError(
                f"stalled: nothing can be scheduled; waiting {waiting or 'none'}, running but not scheduled "
                f"{[r.id for r in sched.running] or 'none'}; {kv.num_free} of {kv.num_blocks} KV blocks are free")
        return []

    def _update(self, so: SchedulerOutput, out: RunnerOutput) -> list[Request]:
        """The update step: the only place tokens are appended, stops checked, requests finished."""
        stepped, requests, spec_tokens = [], self.requests, so.spec_tokens
        errors, sampled, prompt_logprobs, logprobs_of = out.errors, out.sampled, out.prompt_logprobs, out.logprobs
        left = self._left_inflight
        for rid in so.scheduled_ids:  # per request: keep this loop's body lean
            if left and rid in left:  # it finished while this step ran (async scheduling): its token is dropped,
                left.discard(rid)  # even when a request added since has taken its id
                continue
            r = requests.get(rid)
            if r is None or r.status is Status.FINISHED:  # the scheduler runs only requests in flight
                raise EngineInvariantError(f"request {rid} was scheduled but is not in flight (finished or unknown)")
            if errors and rid in errors:  # this request fails; its neighbours carry on
                self._finish(r, "error", errors[rid])
            else:
                if prompt_logprobs and rid in prompt_logprobs:  # chunk by chunk, by position: a rescored
                    first, scored = prompt_logprobs[rid]  # position replaces itself
                    r.prompt_logprobs = [*(r.prompt_logprobs or [None])[:first], *scored]
                tokens = sampled.get(rid)
                if tokens is None:
                    continue  # a prefill chunk short of the prompt's end: nothing sampled yet
                if spec_tokens:
                    r.num_computed -= spec_tokens.get(rid, 0) - (len(tokens) - 1)  # rejected positions' KV is stale
                logprobs = logprobs_of.get(rid) if logprobs_of else None
                for i, token in enumerate(tokens):  # a speculative step may bring several; stop at the first finish
                    if logprobs is not None:
                        self._log(r, logprobs[i], token)
                    self._append(r, token)
                    if r.status is Status.FINISHED:
                        break
            stepped.append(r)
        return stepped

    @staticmethod
    def _log(r: Request, logprobs: dict[int, float], token: int) -> None:
        if r.logprobs is None:
            r.logprobs = []
        r.logprobs.append(logprobs)
        r.cumulative_logprob = (r.cumulative_logprob or 0.0) + logprobs[token]

    def _append(self, r: Request, token: int) -> None:
        p, out = r.params, r.output_ids
        if p.prompt_logprobs is not None and r.prompt_logprobs is None:
            r.prompt_logprobs = [None]  # a one-token prompt: nothing to score, as vLLM returns it
        out.append(token)
        r.last_token_time = time.monotonic()
        if r.first_token_time is None:
            r.first_token_time = r.last_token_time
        n = len(out)
        can_stop = n >= p.min_tokens  # the sampler bans EOS and stop ids until then
        # vLLM's rule (vllm/v1/engine/detokenizer.py, update(stop_terminated)): the EOS or stop token id that ends
        # the output keeps its id, not its text, unless include_stop_str_in_output
        ends = can_stop and ((not p.ignore_eos and token in self.eos_ids) or token in p.stop_token_ids)
        stop = r.detok.add(token, can_stop) if not ends or p.include_stop_str_in_output else None
        if can_stop and not p.ignore_eos and token in self.eos_ids:
            self._finish(r, "stop")
        elif can_stop and token in p.stop_token_ids:
            r.stop_reason = token
            self._finish(r, "stop")
        elif stop is not None:
            r.stop_reason = stop
            self._finish(r, "stop")
        elif n >= p.max_tokens or len(r.prompt_ids) + n >= self.cfg.max_model_len:
            self._finish(r, "length")

    def _finish(self, r: Request, reason: str, error: str | None = None) -> None:
        if self._inflight is not None and r.id in self._inflight[0].num_scheduled_tokens:
            self._left_inflight.add(r.id)  # that step's result for it is dropped when applied
        r.text = r.detok.text if r.stop_reason is not None else r.detok.flush()
        r.finish(reason, error)
        self.scheduler.finish(r)  # its blocks, in every KV group, are free before the step ends
        self.requests.pop(r.id, None)  # ids are unique among requests in flight


class FrontEngine:
    """What the API server reads of an engine, in a process that does not run it (the engine core runs in its
    own, vt/engine/core/proc.py): the checkpoint's tokenizer, chat template, special tokens, generation defaults
    and vocabulary, read without its weights, and the configuration (settled by the core once it has started)."""

    def __init__(self, cfg: EngineConfig) -> None:
        from models.loader import load_checkpoint, resolve_model

        ckpt = load_checkpoint(resolve_model(cfg.model))  # lazy: headers, config and tokenizer only
        self.cfg = cfg
        self.tokenizer, self.chat_template, self.special_tokens = _text_side(ckpt, cfg)
        self.generation_config = _generation_config(ckpt, cfg)  # the defaults a request resolves against, as the core's
        self.vocab_size = ckpt.config.vocab_size

    def tokenize(self, prompt: Prompt, add_special_tokens: bool = True) -> list[int]:
        return tokenize_prompt(self.tokenizer, self.vocab_size, prompt, add_special_tokens)


def _text_side(ckpt: Any, cfg: EngineConfig) -> tuple[Any, str | None, dict[str, str]]:
    """The checkpoint's tokenizer, the chat template (--chat-template's, else the checkpoint's) and its special
    tokens: what the engine and a front without the engine both read."""
    if cfg.chat_template is not None:
        from vt.engine.front.chat import load_template

        template: str | None = load_template(cfg.chat_template)
    else:
        template = ckpt.chat_template
    return ckpt.tokenizer, template, _special_tokens(ckpt.tokenizer_config)


def tokenize_prompt(tokenizer: Any, vocab_size: int, prompt: Prompt, add_special_tokens: bool = True) -> list[int]:
    """A prompt's token ids (text through the tokenizer, ids checked against the vocabulary), or a RequestError.
    add_special_tokens=False for a rendered chat: its template wrote them (a BOS post-processor would add a second)."""
    if isinstance(prompt, str):
        if not prompt:
            raise RequestError("prompt is empty")
        try:
            prompt.encode("utf-8")
        except UnicodeEncodeError as e:
            raise RequestError(f"prompt is not valid UTF-8 text (at character {e.start})") from None
        ids = encode_text(tokenizer, prompt, add_special_tokens)
    else:
        ids = [int(t) for t in prompt]
        bad = [t for t in ids if not 0 <= t < vocab_size]
        if bad:
            raise RequestError(f"prompt token ids {bad[:5]} are outside the vocabulary [0, {vocab_size})")
    if not ids:
        raise RequestError("prompt is empty")
    return ids


def check_cache_salt(cache_salt: Any) -> None:
    """vLLM's rule for a cache salt: None, or a non-empty string (RequestError otherwise)."""
    if cache_salt is not None and (not isinstance(cache_salt, str) or not cache_salt):
        raise RequestError(f"cache_salt={cache_salt!r}: must be a non-empty string if provided")


def bad_words_token_ids(tokenizer: Any, words: list[str]) -> list[list[int]]:
    """vLLM's tokenization of bad words (SamplingParams.update_from_tokenizer): each word, leading spaces stripped,
    as it starts a text; then with one leading space, as it follows a word, where that gives other tokens of the
    same count (a tokenizer that marks a word's start in its first token)."""
    seqs: list[list[int]] = []
    for word in words:
        plain = encode_text(tokenizer, word.lstrip(), add_special_tokens=False)
        spaced = encode_text(tokenizer, " " + word.lstrip(), add_special_tokens=False)
        seqs.append(plain)
        if spaced and len(spaced) == len(plain) and spaced[0] != plain[0]:
            seqs.append(spaced)
    return seqs


def encode_text(tokenizer: Any, text: str, add_special_tokens: bool = True) -> list[int]:
    """text's token ids through tokenizers' encode_batch, which releases the GIL while it works: its encode holds it
    throughout, so a prompt of megabytes encoded on a worker thread still froze every other thread (the server's
    event loop: each stream and /health) for seconds."""
    return tokenizer.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids


def _generation_config(ckpt: Any, cfg: EngineConfig) -> dict[str, Any]:
    """The checkpoint's sampling defaults, validated as SamplingParams are (CheckpointError names the field). Under
    speculative decoding, which takes no penalties, a default repetition_penalty (Qwen2.5's 1.05) is said once and
    left out: kept, it would refuse every request that set no penalty of its own."""
    from vt.engine.sample.params import validate_generation_config
    from vt.errors import CheckpointError

    source, where = ckpt.generation_config, ckpt.path / "generation_config.json"
    if cfg.generation_config == "vllm":  # vLLM's: none; the engine's neutral values (EOS ids stay the checkpoint's)
        source = {}
    elif cfg.generation_config != "auto":
        where = Path(cfg.generation_config).expanduser() / "generation_config.json"
        try:
            source = json.loads(where.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ConfigError(f"generation_config={cfg.generation_config!r}: {where} is not readable JSON ({e})") \
                from None
        if not isinstance(source, dict):
            raise ConfigError(f"generation_config={cfg.generation_config!r}: {where} holds no JSON object")
    source = {**source, **(cfg.override_generation_config or {})}
    try:
        defaults = validate_generation_config(source)
    except ConfigError as e:
        raise CheckpointError(f"{where}: {e}") from None
    if cfg.speculative_model is not None and defaults.get("repetition_penalty", 1.0) != 1.0:
        logging.getLogger("vt").warning(
            "%s: repetition_penalty=%s is not applied: speculative decoding takes no penalties",
            ckpt.path / "generation_config.json", defaults.pop("repetition_penalty"))
    return defaults


def _special_tokens(tok_cfg: dict[str, Any]) -> dict[str, str]:
    """bos_token, eos_token, ... as a chat template sees them (tokenizer_config.json writes a string or
    an AddedToken dict)."""
    out = {}
    for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
        v = tok_cfg.get(name)
        v = v.get("content") if isinstance(v, dict) else v
        if isinstance(v, str):
            out[name] = v
    return out


