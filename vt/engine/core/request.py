"""A request's life: waiting -> running (-> preempted -> waiting ...) -> finished."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any

from vt.engine.sample.params import ResolvedParams


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False, slots=True)
class Request:
    id: str
    prompt_ids: list[int]
    params: ResolvedParams
    prompt: str | None = None
    arrival: float = field(default_factory=time.monotonic)
    output_ids: list[int] = field(default_factory=list)
    status: Status = Status.WAITING
    num_computed: int = 0  # tokens whose K/V are in the cache (0 again after a preemption); the scheduler's
    num_prefill: int = 0  # tokens this admission prefills (its chunks run until num_computed reaches it)
    num_inflight: int = 0  # launched steps that sample its next token, not yet applied (async scheduling: 0-2)
    can_speculate: bool = True  # False for life once (re)admitted with generated tokens (draft KV is gone)
    num_preemptions: int = 0
    # vLLM v1's request intervals (its metrics/stats.py): queued = arrival to scheduled_time, prefill = to
    # first_token_time, decode = first_token_time to last_token_time; a preemption moves none of them back
    scheduled_time: float | None = None  # its first admission to the running batch
    first_token_time: float | None = None
    last_token_time: float | None = None
    finish_time: float | None = None
    finish_reason: str | None = None  # "stop", "length", "error"
    stop_reason: int | str | None = None  # the stop string or stop token id that ended it
    error: str | None = None
    text: str = ""
    seed: int = 0  # its sampling seed: draws are a function of (seed, output position) only
    logprobs: list[dict[int, float]] | None = None  # one per output token, when the request asked
    cumulative_logprob: float | None = None
    detok: Any = None  # its IncrementalDetokenizer (the engine's, set when the request is added)
    index: int = 0  # which of the request's n samples
    siblings: list[Request] | None = None  # all n samples, this one included (n > 1)
    prompt_logprobs: list[dict[int, float] | None] | None = None  # per prompt token (None for the first)
    # the prefix cache's keys of its first full blocks, as far as a lookup has keyed them (its tokens only grow, so
    # they hold for life): a request waiting for blocks is looked up again each step without hashing again
    block_keys: list[bytes] = field(default_factory=list)
    # the parent key of its first block (KVCacheManager.salt_root of its cache_salt): empty without a salt
    cache_root: bytes = b""
    # prompt tokens the prefix cache served at its first admission, which it did not compute (vLLM's
    # num_cached_tokens: a prompt cached through its last token counts all but that token); -1 until admitted
    num_cached_tokens: int = -1

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    def ids_from(self, start: int) -> list[int]:
        """all_ids[start:], without copying the prompt when start is past it (a decode step's new tokens)."""
        p = len(self.prompt_ids)
        return self.output_ids[start - p :] if start >= p else self.prompt_ids[start:] + self.output_ids

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED

    def finish(self, reason: str, error: str | None = None) -> None:
        self.status = Status.FINISHED
        self.finish_reason = reason
        self.error = error
        self.finish_time = time.monotonic()


@dataclass(frozen=True, slots=True)
class Logprob:
    """vLLM's Logprob: a token's log probability, its rank among the vocabulary (1 the likeliest; None where vt
    did not count it: a sampled or prompt token outside the top-n asked for) and its text."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


def logprob_objects(d: dict[int, float], n: int, decode: Any) -> dict[int, Logprob]:
    """A {token id: logprob} of the top n (and the token itself, when outside them) as vLLM lays it out."""
    ranked = sorted(d.items(), key=lambda kv: -kv[1])
    return {t: Logprob(v, r + 1 if r < n else None, decode(t)) for r, (t, v) in enumerate(ranked)}


@dataclass(frozen=True, slots=True)
class CompletionOutput:
    """One completion of a request, as vLLM's: index, text, token_ids, cumulative_logprob, logprobs,
    finish_reason ("stop", "length", "error"; None while running) and stop_reason (the stop string or
    stop token id that ended it; None for EOS, length or error)."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list | None
    finish_reason: str | None
    stop_reason: int | str | None = None


@dataclass(frozen=True, slots=True)
class RequestMetrics:
    arrival_time: float
    first_token_time: float | None
    finished_time: float | None
    num_preemptions: int

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def latency_s(self) -> float | None:
        return None if self.finished_time is None else self.finished_time - self.arrival_time


@dataclass(frozen=True, slots=True)
class RequestOutput:
    """vLLM's RequestOutput: request_id, prompt, prompt_token_ids, outputs, finished, metrics, num_cached_tokens
    (prompt tokens the prefix cache served; None until admitted); plus `error` (why a request failed, if it did).
    For the usual single completion, token_ids / text / finish_reason and the metrics' figures read through to
    outputs[0] and metrics."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics
    error: str | None = None

    @property
    def token_ids(self) -> list[int]:
        return self.outputs[0].token_ids

    @property
    def text(self) -> str:
        return self.outputs[0].text

    @property
    def finish_reason(self) -> str | None:
        return self.outputs[0].finish_reason

    @property
    def ttft_s(self) -> float | None:
        return self.metrics.ttft_s

    @property
    def latency_s(self) -> float | None:
        return self.metrics.latency_s

    @property
    def num_preemptions(self) -> int:
        return self.metrics.num_preemptions

    prompt_logprobs: list[dict[int, float] | None] | None = None
    num_cached_tokens: int | None = None

    def with_logprob_objects(self, logprobs_n: int, prompt_n: int, decode: Any) -> RequestOutput:
        """The same output with every {token id: float} as {token id: Logprob} (the offline API's, as vLLM's)."""
        from dataclasses import replace

        def conv(rows: list | None, n: int) -> list | None:
            return None if rows is None else [None if d is None else logprob_objects(d, n, decode) for d in rows]

        outs = [replace(c, logprobs=conv(c.logprobs, logprobs_n)) for c in self.outputs]
        return replace(self, outputs=outs, prompt_logprobs=conv(self.prompt_logprobs, prompt_n))

    @classmethod
    def of(cls, r: Request) -> RequestOutput:
        """One request's output; for n > 1 (r is any of the samples), all n as outputs[0..n-1]."""
        samples = r.siblings or [r]
        outs = [CompletionOutput(s.index, s.text if s.is_finished or s.detok is None else s.detok.text,
                                 list(s.output_ids), s.cumulative_logprob,
                                 None if s.logprobs is None else list(s.logprobs), s.finish_reason, s.stop_reason)
                for s in samples]
        first = samples[0]
        times = [s.first_token_time for s in samples if s.first_token_time is not None]
        ends = [s.finish_time for s in samples]
        metrics = RequestMetrics(first.arrival, min(times) if times else None,
                                 None if None in ends else max(e for e in ends if e is not None),
                                 sum(s.num_preemptions for s in samples))
        errors = [s.error for s in samples if s.error]
        return cls(first.id, first.prompt, list(first.prompt_ids), outs, all(s.is_finished for s in samples),
                   metrics, errors[0] if errors else None, first.prompt_logprobs, cached_of(first))


def cached_of(r: Request) -> int | None:
    """RequestOutput.num_cached_tokens of a request: None until its first admission."""
    return None if r.num_cached_tokens < 0 else r.num_cached_tokens


@dataclass(frozen=True, slots=True)
class Finished:
    """What a finished request (one sample) leaves for the metrics and the server's hooks: plain numbers, which
    the engine core process sends to the front as they are."""

    request_id: str
    index: int
    num_prompt_tokens: int
    num_output_tokens: int
    arrival: float
    first_token_time: float | None
    finish_time: float | None
    finish_reason: str | None
    num_preemptions: int
    scheduled_time: float | None = None
    last_token_time: float | None = None
    n: int = 1  # the request's samples: this is sample `index` of them

    @classmethod
    def of(cls, r: Request) -> Finished:
        return cls(r.id, r.index, len(r.prompt_ids), len(r.output_ids), r.arrival, r.first_token_time, r.finish_time,
                   r.finish_reason, r.num_preemptions, r.scheduled_time, r.last_token_time, r.params.n)
