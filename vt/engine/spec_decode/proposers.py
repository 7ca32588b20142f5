"""Speculative proposers behind one interface: a draft model, and n-gram prompt lookup (no second model).

Every piece of proposer state is keyed by REQUEST ID, never by batch row: rows move (condense slides a
live request into a finished neighbour's hole; the decode-first reorder swaps rows). State is created on
first sight of an id and dropped when the scheduler says the request left (finished or preempted). A
request first seen with committed tokens (resumed after preemption) may not speculate for its life; the
scheduler decides that (`can_speculate`) and the proposers record it. Proposals are deterministic (the
draft proposes its argmax), so verification is vt/engine/sample/rejection.py's exact rule, the same for both.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from models.base import Model
from vt.engine.config import EngineConfig
from vt.engine.core.kv_manager import DRAFT
from vt.engine.core.outputs import NewRequestData
from vt.engine.sample.params import ResolvedParams
from vt.engine.worker.graph_driver import DecodeInputs, GraphDriver
from vt.engine.worker.input_batch import InputBatch
from vt.errors import DraftPositionMismatch

I64 = np.int64
TRACE_LEN = 100_000


@dataclass(slots=True)
class SpecRequest:
    req_id: str
    position: int  # of the last committed token: the first position the target verifies
    params: ResolvedParams


@dataclass(slots=True)
class Proposal:
    tokens: list[int]  # deterministic: the draft's distribution is one-hot at each


class Proposer(Protocol):
    k: int
    num_proposed: int
    num_accepted: int

    def add(self, batch: InputBatch, reqs: list[NewRequestData]) -> None: ...

    def drop(self, req_ids: Iterable[str]) -> None: ...

    def propose(self, batch: InputBatch, reqs: list[SpecRequest]) -> dict[str, Proposal]: ...

    def accepted(self, batch: InputBatch, req_id: str, position: int, num_accepted: int) -> None: ...


class ProposerStats:
    """Counters and the proposal trace (step, request id, tokens) the row-move gates read."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.num_proposed = self.num_accepted = self.num_steps = 0
        self.disabled: set[str] = set()  # requests the scheduler let never speculate (while in the batch)
        self.trace: deque[tuple[int, str, list[int]]] = deque(maxlen=TRACE_LEN)

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted / self.num_proposed if self.num_proposed else 0.0

    def _record(self, proposals: dict[str, Proposal]) -> None:
        self.num_steps += 1
        for rid, p in proposals.items():
            self.trace.append((self.num_steps, rid, list(p.tokens)))

    def accepted(self, batch: InputBatch, req_id: str, position: int, num_accepted: int) -> None:
        self.num_proposed += self.k
        self.num_accepted += num_accepted
        self._advance(batch, req_id, position, num_accepted)

    def _advance(self, batch: InputBatch, req_id: str, position: int, num_accepted: int) -> None:
        pass


# ---- n-gram prompt lookup ---------------------------------------------------------------------------


class NgramIndex:
    """One request's tokens, and for each n-gram the start of what followed its latest occurrence;
    extended incrementally, so a step costs O(new tokens), not O(context)."""

    __slots__ = ("tokens", "follow", "n_max")

    def __init__(self, n_max: int) -> None:
        self.tokens: list[int] = []
        self.follow: dict[tuple[int, ...], int] = {}
        self.n_max = n_max

    def extend(self, new: Iterable[int]) -> None:
        for t in new:
            i = len(self.tokens)
            for n in range(1, min(self.n_max, i) + 1):
                self.follow[tuple(self.tokens[i - n : i])] = i
            self.tokens.append(int(t))

    def lookup(self, k: int, n_min: int) -> list[int] | None:
        """k tokens continuing the longest suffix seen before, extended periodically past the end."""
        L = len(self.tokens)
        for n in range(min(self.n_max, L), n_min - 1, -1):
            j = self.follow.get(tuple(self.tokens[L - n :]))
            if j is not None:
                period = L - j
                return [self.tokens[j + t % period] for t in range(k)]
        return None


class NgramProposer(ProposerStats):
    def __init__(self, k: int, n_max: int = 3, n_min: int = 1) -> None:
        super().__init__(k)
        self.n_max, self.n_min = n_max, n_min
        self.index: dict[str, NgramIndex] = {}

    def _key(self, batch: InputBatch, req_id: str) -> str:
        return req_id  # never the batch row: rows move under condense, swap and reorder

    def add(self, batch: InputBatch, reqs: list[NewRequestData]) -> None:
        self.disabled.update(r.req_id for r in reqs if not r.can_speculate)

    def drop(self, req_ids: Iterable[str]) -> None:
        for rid in req_ids:
            self.index.pop(rid, None)
            self.disabled.discard(rid)

    def propose(self, batch: InputBatch, reqs: list[SpecRequest]) -> dict[str, Proposal]:
        out: dict[str, Proposal] = {}
        for r in reqs:
            idx = self.index.setdefault(self._key(batch, r.req_id), NgramIndex(self.n_max))
            idx.extend(batch.tokens(r.req_id)[len(idx.tokens) :].tolist())
            tokens = idx.lookup(self.k, self.n_min)
            if tokens is not None:
                out[r.req_id] = Proposal(tokens)
        self._record(out)
        return out


# ---- the draft model --------------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class DraftContext:
    id: str  # the request id: the only key draft state ever has
    length: int = 0  # positions whose draft KV is valid
    owed: int = 0  # accepted tokens the draft has not consumed yet (1 after a full accept)


class DraftModelProposer(ProposerStats):
    """The draft's KV lives in the KV manager's draft group (same pool, same capacity checks)."""

    def __init__(self, draft: Model, cfg: EngineConfig, stream: Any) -> None:
        super().__init__(cfg.num_speculative_tokens)
        self.draft = draft
        self.kv = draft.make_kv_cache(cfg.num_blocks, cfg.block_size)
        self.driver = GraphDriver(draft, self.kv, cfg.max_num_seqs, enabled=not cfg.enforce_eager, stream=stream,
                                  max_num_batched_tokens=cfg.max_num_batched_tokens, max_model_len=cfg.max_model_len)
        self.contexts: dict[str, DraftContext] = {}

    def _key(self, batch: InputBatch, req_id: str) -> str:
        return req_id  # never the batch row: rows move under condense, swap and reorder

    def add(self, batch: InputBatch, reqs: list[NewRequestData]) -> None:
        fresh = [r for r in reqs if r.can_speculate]
        self.disabled.update(r.req_id for r in reqs if not r.can_speculate)
        # a prefix cached through its last token leaves the draft nothing to prefill: both groups hold its KV
        prefills = [r for r in fresh if r.num_cached < len(r.token_ids)]
        if prefills:  # the draft prefills what the target prefilled, into its own group's blocks (through its
            # driver's piecewise graphs), behind the prefix both groups' cached blocks hold; it keeps the KV and
            # never reads the logits back
            self.driver.pool.release(self.driver.prefill([(r.token_ids[r.num_cached:], batch.blocks(r.req_id, DRAFT),
                                                           r.num_cached) for r in prefills]))
        for r in fresh:
            self.contexts[self._key(batch, r.req_id)] = DraftContext(r.req_id, length=len(r.token_ids))

    def drop(self, req_ids: Iterable[str]) -> None:
        for rid in req_ids:
            self.contexts.pop(rid, None)
            self.disabled.discard(rid)

    def _context(self, batch: InputBatch, r: SpecRequest) -> DraftContext | None:
        """The request's context, with the position invariant checked: never silenced."""
        ctx = self.contexts.get(self._key(batch, r.req_id))
        if ctx is not None and ctx.length + ctx.owed != r.position:
            raise DraftPositionMismatch(f"request {r.req_id}: draft context holds {ctx.length} positions "
                                        f"(+{ctx.owed} owed) but its row is at position {r.position}")
        return ctx

    def propose(self, batch: InputBatch, reqs: list[SpecRequest]) -> dict[str, Proposal]:
        items = [(r, ctx) for r in reqs if (ctx := self._context(batch, r)) is not None]
        out: dict[str, Proposal] = {r.req_id: Proposal([]) for r, _ in items}
        owed = [(ctx, r.req_id, batch.tokens(r.req_id)[r.position - 1], r.position - 1) for r, ctx in items if ctx.owed]
        if owed:  # the previous step accepted everything: feed the last proposal first
            self._draft_step(batch, owed)
            for ctx, *_ in owed:
                ctx.owed = 0
        for j in range(self.k):
            last = [batch.tokens(r.req_id)[-1] if j == 0 else out[r.req_id].tokens[-1] for r, _ in items]
            step = [(ctx, r.req_id, t, r.position + j) for (r, ctx), t in zip(items, last)]
            for (r, _), tok in zip(items, self._draft_step(batch, step) if step else []):
                out[r.req_id].tokens.append(int(tok))
        self._record(out)
        return out

    def _draft_step(self, batch: InputBatch, items: list[tuple[DraftContext, str, int, int]]) -> np.ndarray:
        """One draft decode step: (context, request id, token, position) per request, through the one
        driver (its sampler greedy), into the request's own draft-group blocks. Returns the argmax ids."""
        req_ids = [rid for _, rid, _, _ in items]
        slots = [self.kv.slot(batch.blocks(rid, DRAFT), p) for _, rid, _, p in items]
        inp = DecodeInputs(np.asarray([t for _, _, t, _ in items], I64), np.asarray([p for *_, p in items], I64),
                           np.asarray(slots, I64), batch.tables(req_ids, DRAFT))
        ids = self.driver.step(inp, spec=True).ids
        for c, _, _, p in items:
            c.length = p + 1
        return ids

    def _advance(self, batch: InputBatch, req_id: str, position: int, num_accepted: int) -> None:
        """After verification: the draft's KV is valid through the accepted tokens; after a full accept
        it owes the last proposal, which it never consumed."""
        ctx = self.contexts[self._key(batch, req_id)]
        new_position = position + num_accepted + 1
        ctx.length = min(position + self.k, new_position)
        ctx.owed = new_position - ctx.length
