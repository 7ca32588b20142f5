"""A request's life: waiting -> running (-> preempted -> waiting ...) -> finished."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

import numpy as np

from vt.engine.sampling import ResolvedParams


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
    can_speculate: bool = True  # False for life once (re)admitted with generated tokens (draft KV is gone)
    num_preemptions: int = 0
    first_token_time: float | None = None
    finish_time: float | None = None
    finish_reason: str | None = None  # "stop", "length", "error"
    error: str | None = None
    text: str = ""
    rng: np.random.Generator | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED

    def finish(self, reason: str, error: str | None = None) -> None:
        self.status = Status.FINISHED
        self.finish_reason = reason
        self.error = error
        self.finish_time = time.monotonic()


@dataclass(frozen=True, slots=True)
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str | None
    error: str | None
    ttft_s: float | None
    latency_s: float | None
    num_preemptions: int

    @classmethod
    def of(cls, r: Request) -> RequestOutput:
        ttft = None if r.first_token_time is None else r.first_token_time - r.arrival
        lat = None if r.finish_time is None else r.finish_time - r.arrival
        return cls(r.id, r.prompt, list(r.prompt_ids), list(r.output_ids), r.text, r.finish_reason, r.error,
                   ttft, lat, r.num_preemptions)
