"""Continuous batching with preemption (newest running request first, recomputed later).

A step is either a prefill of newly admitted requests or one decode token for every running request.
A step that preempted admits nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from vt.engine.config import EngineConfig
from vt.engine.kv_cache import BlockPool
from vt.engine.request import Request, Status


@dataclass(slots=True)
class SchedulerOutput:
    is_prefill: bool
    requests: list[Request]
    preempted: list[Request] = field(default_factory=list)


class Scheduler:
    def __init__(self, cfg: EngineConfig, blocks: BlockPool, lookahead: Callable[[Request], int] | None = None) -> None:
        self.cfg = cfg
        self.blocks = blocks
        # extra KV slots a request's decode step writes (its speculative tokens; 0 when it has no draft)
        self.lookahead = lookahead or (lambda req: 0)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # admission order: the last one is the newest

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        admitted = self._admit()
        if admitted:
            return SchedulerOutput(True, admitted)
        preempted = []
        for req in list(self.running):
            if req.status is not Status.RUNNING:
                continue  # preempted earlier in this loop
            need = min(req.num_tokens + self.lookahead(req), self.cfg.max_model_len)  # KV slots this step writes
            while not self.blocks.can_allocate(req, need):
                victim = self.running[-1]
                self._preempt(victim)
                preempted.append(victim)
                if victim is req:
                    break
            if req.status is Status.RUNNING:
                self.blocks.allocate(req, need)
        return SchedulerOutput(False, list(self.running), preempted)

    def _admit(self) -> list[Request]:
        admitted: list[Request] = []
        budget = self.cfg.max_num_batched_tokens
        while self.waiting and len(self.running) < self.cfg.max_num_seqs:
            req = self.waiting[0]
            n = req.num_tokens
            # keep one block per running request free, so admitting does not force a preemption
            if n > budget or not self.blocks.can_allocate(req, n, reserve=len(self.running)):
                break
            self.waiting.popleft()
            self.blocks.allocate(req, n)
            req.status = Status.RUNNING
            req.num_computed = 0
            self.running.append(req)
            admitted.append(req)
            budget -= n
        return admitted

    def _preempt(self, req: Request) -> None:
        self.running.remove(req)
        self.blocks.release(req)
        req.status = Status.WAITING
        req.num_computed = 0
        req.num_preemptions += 1
        self.waiting.appendleft(req)

    def finish(self, req: Request) -> None:
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self.blocks.release(req)
