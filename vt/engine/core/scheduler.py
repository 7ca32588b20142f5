"""Continuous batching with chunked prefill and preemption (newest running request first, recomputed).

`schedule()` returns one SchedulerOutput under a token budget (`max_num_batched_tokens`), vLLM v1's
order: first one decode token (plus its speculative positions) for every running request past its
prefill, then the next chunk of every running request still prefilling, then new requests' first
chunks. A prompt longer than what is left of the budget is split across steps (`prefill_chunks`: where
each chunk starts). A step that preempted admits nothing. The scheduler moves `num_computed` forward as
it schedules; the engine's update step takes back the rejected speculative positions.

With prefix caching (kv_manager.py), a new request starts from its longest cached prefix: those blocks are
shared and its first chunk starts behind them (a prompt cached through its last token computes that token alone,
for its logits; the prefix-cache hits count it as computed). A request admitted in this step keys its full blocks
at once, so a later admission of the same step shares them: one forward writes every token's KV of a layer before
that layer's attention reads any, and the runner computes new requests in admission order. Every other running
request's full blocks are keyed at the end of the schedule (a decode may still be preempted before then).
A request that asks for prompt logprobs computes its whole prompt (every position is scored). One that
speculates with a draft model is served a prefix as far as the draft's KV group holds it too, and its prompt
is never split into chunks (the draft prefills the rest of it in one step).
"""

from __future__ import annotations

import time
from collections import deque

from vt.engine.config import EngineConfig
from vt.engine.core.kv_manager import TARGET, KVCacheManager
from vt.engine.core.outputs import CachedRequestData, NewRequestData, SchedulerOutput
from vt.engine.core.request import Request, Status


class Scheduler:
    def __init__(self, cfg: EngineConfig, kv: KVCacheManager, num_spec_tokens: int = 0) -> None:
        self.cfg = cfg
        self.kv = kv
        self.num_spec_tokens = num_spec_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # admission order: the last one is the newest
        self._num_sent: dict[str, int] = {}  # tokens of each running request the runner holds
        self._finished: set[str] = set()  # left since the last schedule (finished or failed)
        self.prefill_tokens = 0  # prompt (and recomputed) tokens scheduled for computing, cache hits not included

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def has_work(self) -> bool:
        """Requests to run, or leavers the runner has not been told of yet (it drops them next step)."""
        return bool(self.waiting or self.running or self._finished)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput(finished_ids=self._finished)
        self._finished = set()
        budget = self.cfg.max_num_batched_tokens - self._decode(out)
        budget = self._continue_prefills(out, budget)
        if not out.preempted_ids:
            self._admit(out, budget)
        self.kv.cache_computed(self.running)
        return out

    def _cached_prefix(self, req: Request) -> list[list[int]] | None:
        """Per KV group, the blocks of req's longest cached prefix it may start from (a request that speculates
        with a draft model: as far as the draft's group holds it too); None when it may not use the cache."""
        if not self._may_use_cache(req):
            return None
        return self.kv.lookup_groups(req.all_ids, draft=self.kv.num_groups > 1 and req.can_speculate,
                                     memo=req.block_keys, root=req.cache_root)

    def _may_use_cache(self, req: Request) -> bool:
        """Whether req's prompt is looked up (so counted) in the prefix cache: prompt logprobs score every position."""
        return self.kv.enable_caching and req.params.prompt_logprobs is None

    def _count_lookup(self, req: Request, num_tokens: int, num_hits: int) -> None:
        """vLLM's PrefixCacheStats.record: a readmission after preemption is counted apart (its preempted_*, which
        vLLM does not export), so a victim finding its own blocks again neither adds queries nor lifts the hit rate."""
        kv = self.kv
        if req.num_preemptions > 0:
            kv.preempted_queries += num_tokens
            kv.preempted_hits += num_hits
        else:
            kv.queries += num_tokens
            kv.hits += num_hits

    def _chunk(self, remaining: int, budget: int) -> int:
        """Tokens of a prefill this step: all that remain if they fit, else what the budget leaves, but
        never a split when speculating (the draft prefills whole prompts)."""
        if remaining <= budget:
            return remaining
        return 0 if self.num_spec_tokens else max(budget, 0)

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
        sched = out.num_scheduled_tokens
        return next((r.req_id for r in out.new_reqs if r.req_id in ids and r.fork_of is None  # its whole prompt
                     and len(r.token_ids) == r.num_prompt_tokens == r.first_computed + sched[r.req_id]), None)

    def _admit(self, out: SchedulerOutput, budget: int) -> None:
        while self.waiting and len(self.running) < self.cfg.max_num_seqs:
            req = self.waiting[0]
            n = req.num_tokens
            req.can_speculate = req.can_speculate and not req.output_ids  # the draft's KV did not survive
            leader = self._leader(req, out)
            looked_up = None if leader else self._cached_prefix(req)
            cached = looked_up or [[] for _ in range(self.kv.num_groups)]
            if leader:
                shared = [self.kv.fork(leader, req.id, n // self.kv.block_size), *cached[1:]]
            else:
                shared = cached
                self.kv.attach(req.id, cached)
            held = len(cached[TARGET]) * self.kv.block_size  # tokens whose KV the cache holds
            # a prompt of whole blocks, all cached, still computes its last token's logits: that one token, over
            # the held KV (its own included, which the step leaves as it is), not its last block again
            start = min(held, n - 1)
            # keep a block per running request and group free, so admitting does not force a preemption
            reserve = len(self.running) * self.kv.num_groups
            chunk = n if leader else self._chunk(n - start, budget)  # a fork computes nothing: it shares the leader's
            if chunk < 1 or not self.kv.can_allocate(req.id, self._need(req, start + chunk), reserve=reserve):
                self.kv.release(req.id)
                break
            self.waiting.popleft()
            blocks = self.kv.allocate(req.id, self._need(req, (0 if leader else start) + chunk))
            blocks = [s + b for s, b in zip(shared, blocks)]
            req.status, req.num_computed, req.num_prefill = Status.RUNNING, (0 if leader else start) + chunk, n
            if req.scheduled_time is None:  # the first admission ends its queue time (a readmission does not)
                req.scheduled_time = time.monotonic()
            self.running.append(req)
            self._num_sent[req.id] = n
            out.new_reqs.append(NewRequestData(req.id, req.all_ids, len(req.prompt_ids), blocks, req.params, req.seed,
                                               req.can_speculate, leader, held))
            out.num_scheduled_tokens[req.id] = 0 if leader else chunk  # a fork computes nothing this step
            out.prefill_chunks[req.id] = start
            budget -= 0 if leader else chunk
            self.prefill_tokens += 0 if leader else chunk
            # a request that speculates has its whole prompt prefilled by the draft in this step as well
            self.kv.cache_full_blocks(req.id, req.all_ids, req.num_computed,
                                      draft_computed=req.num_computed if req.can_speculate and not leader else 0,
                                      root=req.cache_root)
            if req.num_cached_tokens < 0:  # vLLM's: what the cache served its first admission (a fork: none)
                req.num_cached_tokens = 0 if leader else start
            if self._may_use_cache(req):  # vLLM's prefix-cache counters, in tokens, once per admission
                # vLLM runs each of n samples as a request that looks its prompt up: a fork, which computes none of
                # the leader's blocks it shares, counts them as hits (vLLM's later children find them cached)
                self._count_lookup(req, n, len(shared[TARGET]) * self.kv.block_size if leader else start)

    def _continue_prefills(self, out: SchedulerOutput, budget: int) -> int:
        """The next chunk of every running request whose prefill is not done, oldest first, while the
        budget lasts."""
        for req in [r for r in self.running if r.num_computed < r.num_prefill]:
            chunk = self._chunk(req.num_prefill - req.num_computed, budget)
            if chunk < 1 or not self.kv.can_allocate(req.id, self._need(req, req.num_computed + chunk)):
                break
            blocks = self.kv.allocate(req.id, self._need(req, req.num_computed + chunk))
            out.cached_reqs.append(CachedRequestData(req.id, [], blocks, req.num_computed))
            out.num_scheduled_tokens[req.id] = chunk
            out.prefill_chunks[req.id] = req.num_computed
            req.num_computed += chunk
            budget -= chunk
            self.prefill_tokens += chunk
        return budget

    def _decode(self, out: SchedulerOutput) -> int:
        """One token (and its speculative positions) for every running request past its prefill;
        returns the tokens scheduled."""
        num_tokens, running, max_len, kv = 0, Status.RUNNING, self.cfg.max_model_len, self.kv
        one_group, sent_of, scheduled = kv.num_groups == 1, self._num_sent, out.num_scheduled_tokens
        tables, block_size = kv.tables, kv.block_size
        cached = out.cached_reqs  # _preempt filters it in place
        for req in list(self.running):  # per request: keep this loop's body lean (it is most of a step's host)
            if req.status is not running or req.num_computed < req.num_prefill:
                continue  # preempted earlier in this loop, or still prefilling
            n = len(req.prompt_ids) + len(req.output_ids)
            ahead = req.num_inflight  # tokens a step in flight samples (async scheduling), counted as if known
            if ahead and (len(req.output_ids) + ahead >= req.params.max_tokens or n + ahead >= max_len):
                continue  # the step in flight samples its last token
            spec = self._num_spec(req) if self.num_spec_tokens else 0
            need = [n + ahead + spec] if one_group else self._need(req, n + ahead + spec)  # the slots it writes
            table = tables.get(req.id) if one_group else None
            if table is not None and need[0] <= len(table[0]) * block_size:
                blocks: list[list[int]] | None = [[]]  # most decode steps: its last block has room (kv.grow's test)
            else:
                blocks = kv.grow(req.id, need)
            while blocks is None:
                victim = self.running[-1]
                self._preempt(victim, out)
                if victim is req:
                    break
                blocks = self.kv.grow(req.id, need)
            if blocks is not None:
                cached.append(CachedRequestData(req.id, req.ids_from(sent_of[req.id]), blocks, req.num_computed))
                sent_of[req.id] = n
                scheduled[req.id] = 1 + spec
                if spec:
                    out.spec_tokens[req.id] = spec
                req.num_computed += 1 + spec
                num_tokens += 1 + spec
        return num_tokens

    def _preempt(self, req: Request, out: SchedulerOutput) -> None:
        if out.num_scheduled_tokens.pop(req.id, None) is not None:  # a victim already scheduled: unschedule
            out.cached_reqs[:] = [c for c in out.cached_reqs if c.req_id != req.id]
            out.prefill_chunks.pop(req.id, None)
            out.spec_tokens.pop(req.id, None)
        out.preempted_ids.append(req.id)
        self.running.remove(req)
        self.kv.release(req.id)
        self._num_sent.pop(req.id, None)
        req.status = Status.WAITING
        req.num_computed = 0
        req.num_preemptions += 1
        self.waiting.appendleft(req)

    def unrunnable_head(self) -> tuple[Request, int] | None:
        """(the waiting head, the KV blocks its first chunk needs) when it can never be admitted: nothing runs,
        so nothing will free a block, and it needs more than are free now (blocks held by no request in flight
        leave it so). None otherwise."""
        if not self.waiting or self.running:
            return None
        head = self.waiting[0]
        chunk = max(1, self._chunk(head.num_tokens, self.cfg.max_num_batched_tokens))
        need = self.kv.num_missing(head.id, self._need(head, chunk))
        return (head, need) if need > self.kv.num_free else None

    def finish(self, req: Request) -> None:
        """A finished (or failed) request leaves: its blocks are free now, the runner drops it next step."""
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self.kv.release(req.id)
        if self._num_sent.pop(req.id, None) is not None:
            self._finished.add(req.id)
