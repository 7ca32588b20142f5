"""Continuous batching with preemption (newest running request first, recomputed later).

`schedule()` returns one SchedulerOutput: either the newly admitted requests (a prefill step) or one
decode token, plus its speculative positions, for every running request. A step that preempted admits
nothing. The scheduler moves `num_computed` forward as it schedules; the engine's update step takes
back the rejected speculative positions.
"""

from __future__ import annotations

from collections import deque

from vt.engine.config import EngineConfig
from vt.engine.kv_manager import KVCacheManager
from vt.engine.outputs import CachedRequestData, NewRequestData, SchedulerOutput
from vt.engine.request import Request, Status


class Scheduler:
    def __init__(self, cfg: EngineConfig, kv: KVCacheManager, num_spec_tokens: int = 0) -> None:
        self.cfg = cfg
        self.kv = kv
        self.num_spec_tokens = num_spec_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # admission order: the last one is the newest
        self._num_sent: dict[str, int] = {}  # tokens of each running request the runner holds
        self._finished: set[str] = set()  # left since the last schedule (finished or failed)

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def has_work(self) -> bool:
        """Requests to run, or leavers the runner has not been told of yet (it drops them next step)."""
        return bool(self.waiting or self.running or self._finished)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput(finished_ids=self._finished)
        self._finished = set()
        self._admit(out)
        if not out.new_reqs:
            self._decode(out)
        return out

    def _need(self, req: Request, num_tokens: int) -> list[int]:
        """Tokens each KV group must hold: the draft's group only while the request may speculate."""
        draft = num_tokens if req.can_speculate else 0
        return [num_tokens, draft][: self.kv.num_groups]

    def _num_spec(self, req: Request) -> int:
        k = self.num_spec_tokens
        return k if k and req.can_speculate and req.num_tokens + k <= self.cfg.max_model_len else 0

    def _leader(self, req: Request, out: SchedulerOutput) -> str | None:
        """A sibling sample prefilled in this very step, whose prompt blocks and logits req can share."""
        if req.siblings is None or req.output_ids:
            return None
        ids = {s.id for s in req.siblings}
        return next((r.req_id for r in out.new_reqs if r.req_id in ids and r.fork_of is None
                     and len(r.token_ids) == r.num_prompt_tokens), None)

    def _admit(self, out: SchedulerOutput) -> None:
        budget = self.cfg.max_num_batched_tokens
        while self.waiting and len(self.running) < self.cfg.max_num_seqs:
            req = self.waiting[0]
            n = req.num_tokens
            req.can_speculate = req.can_speculate and not req.output_ids  # the draft's KV did not survive
            leader = self._leader(req, out)
            shared = self.kv.fork(leader, req.id, n // self.kv.block_size) if leader else []
            # keep a block per running request and group free, so admitting does not force a preemption
            reserve = len(self.running) * self.kv.num_groups
            cost = 0 if leader else n  # a fork computes nothing: it shares the leader's prefill
            if cost > budget or not self.kv.can_allocate(req.id, self._need(req, n), reserve=reserve):
                if leader:
                    self.kv.release(req.id)
                break
            self.waiting.popleft()
            blocks = self.kv.allocate(req.id, self._need(req, n))
            blocks[0] = shared + blocks[0]
            req.status, req.num_computed = Status.RUNNING, n
            self.running.append(req)
            self._num_sent[req.id] = n
            out.new_reqs.append(NewRequestData(req.id, req.all_ids, len(req.prompt_ids), blocks, req.params, req.seed,
                                               req.can_speculate, leader))
            out.num_scheduled_tokens[req.id] = n
            budget -= cost

    def _decode(self, out: SchedulerOutput) -> None:
        for req in list(self.running):
            if req.status is not Status.RUNNING:
                continue  # preempted earlier in this loop
            spec = self._num_spec(req)
            need = self._need(req, req.num_tokens + spec)  # the KV slots this step writes
            while not self.kv.can_allocate(req.id, need):
                victim = self.running[-1]
                self._preempt(victim, out)
                if victim is req:
                    break
            if req.status is Status.RUNNING:
                blocks = self.kv.allocate(req.id, need)
                sent = self._num_sent[req.id]
                out.cached_reqs.append(CachedRequestData(req.id, req.all_ids[sent:], blocks, req.num_computed))
                self._num_sent[req.id] = req.num_tokens
                out.num_scheduled_tokens[req.id] = 1 + spec
                if spec:
                    out.spec_tokens[req.id] = spec
                req.num_computed += 1 + spec

    def _preempt(self, req: Request, out: SchedulerOutput) -> None:
        if out.num_scheduled_tokens.pop(req.id, None) is not None:  # a victim already scheduled: unschedule
            out.cached_reqs = [c for c in out.cached_reqs if c.req_id != req.id]
            out.spec_tokens.pop(req.id, None)
        out.preempted_ids.append(req.id)
        self.running.remove(req)
        self.kv.release(req.id)
        self._num_sent.pop(req.id, None)
        req.status = Status.WAITING
        req.num_computed = 0
        req.num_preemptions += 1
        self.waiting.appendleft(req)

    def finish(self, req: Request) -> None:
        """A finished (or failed) request leaves: its blocks are free now, the runner drops it next step."""
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self.kv.release(req.id)
        if self._num_sent.pop(req.id, None) is not None:
            self._finished.add(req.id)
