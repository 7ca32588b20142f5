"""Speculative decoding: a draft model proposes k tokens per request, the target verifies them in one
forward with q = k+1 tokens per request.

Draft state is keyed by REQUEST ID, never by batch row: rows move (condense slides a live request into
a finished neighbour's hole; the decode-first reorder swaps rows). An entry is created on first sight
(the request's prefill), pruned every step against the input batch's membership (it owns draft KV
blocks), and a request first seen with generated tokens already (resumed after preemption) is disabled
for life. The position invariant (draft context length == the row's position) is a hard error.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from models.decode_graph import DecodeGraphDriver, DecodeInputs
from models.qwen3 import Qwen3ForCausalLM
from vt.engine.kv_cache import BlockPool
from vt.engine.request import Request
from vt.engine.sampler import _filter, sample
from vt.errors import DraftPositionMismatch

I64 = np.int64
TRACE_LEN = 100_000


@dataclass(eq=False, slots=True)
class DraftContext:
    id: str  # the request id: the only key draft state ever has
    block_ids: list[int] = field(default_factory=list)  # blocks of the draft's own KV pool
    length: int = 0  # positions whose draft KV is valid
    owed: int = 0  # accepted tokens the draft has not consumed yet (1 after a full accept)


def _probs(logits: np.ndarray, r: Request) -> np.ndarray:
    x = _filter(logits, r.params)
    p = np.exp(x - x.max())
    return p / p.sum()


def _draw(p: np.ndarray, rng: np.random.Generator) -> int:
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), p.size - 1))


class SpecDecoder:
    def __init__(self, runner: Any, draft_ckpt: Any, k: int) -> None:
        cfg = runner.cfg
        self.runner, self.k, self.cfg = runner, k, cfg
        self.draft = Qwen3ForCausalLM(draft_ckpt, runner.backend)
        self.kv = self.draft.make_kv_cache(cfg.num_blocks, cfg.block_size)
        self.blocks = BlockPool(cfg.num_blocks, cfg.block_size, -(-(cfg.max_model_len + k) // cfg.block_size))
        self.driver = DecodeGraphDriver(self.draft, self.kv, cfg.max_num_seqs, enabled=not cfg.enforce_eager,
                                        stream=runner.stream)
        self.contexts: dict[str, DraftContext] = {}
        self.disabled: set[str] = set()  # for life: first seen with generated tokens already
        self.num_proposed = self.num_accepted = self.num_steps = 0
        # (step, request id, proposals) of the most recent steps: what the row-move gates read
        self.trace: deque[tuple[int, str, list[int]]] = deque(maxlen=TRACE_LEN)

    # ---- entries ----------------------------------------------------------------------------
    def _key(self, r: Request) -> str:
        return r.id  # never the batch row: rows move under condense, swap and reorder

    def _eligible(self, reqs: list[Request]) -> list[tuple[Request, DraftContext, int]]:
        """Requests that speculate this step, with their context and position. The position invariant
        is checked here and is never silenced."""
        out = []
        for r in reqs:
            ctx = self.contexts.get(self._key(r))
            if ctx is None or r.num_tokens + self.k > self.cfg.max_model_len:
                continue
            position = r.num_tokens - 1
            if ctx.length + ctx.owed != position:
                raise DraftPositionMismatch(self._mismatch(r, ctx, position))
            out.append((r, ctx, position))
        return out

    @staticmethod
    def _mismatch(r: Request, ctx: DraftContext, position: int) -> str:
        return (f"request {r.id}: draft context holds {ctx.length} positions (+{ctx.owed} owed) but its row "
                f"is at position {position}")

    def has_context(self, r: Request) -> bool:
        return self._key(r) in self.contexts

    def prune(self, live: list[Request], unfinished: set[str] | None = None) -> None:
        """Drop every entry whose request left the batch (finished or preempted); each owns KV blocks.
        `unfinished` (all request ids in flight) also trims the disabled set of finished requests."""
        keep = {self._key(r) for r in live}
        for key in [key for key in self.contexts if key not in keep]:
            self.blocks.release(self.contexts.pop(key))  # type: ignore[arg-type]
        if unfinished is not None:
            self.disabled &= unfinished

    def on_prefill(self, reqs: list[Request]) -> None:
        fresh = []
        for r in reqs:
            if r.id in self.disabled or r.id in self.contexts:
                continue
            if r.output_ids:  # first seen with committed position > 0: resumed after preemption
                self.disabled.add(r.id)
                continue
            ctx = DraftContext(r.id)
            if not self.blocks.can_allocate(ctx, len(r.prompt_ids) + self.k):  # type: ignore[arg-type]
                continue  # no draft memory now: decode without speculation, try again next prefill
            self.blocks.allocate(ctx, len(r.prompt_ids))  # type: ignore[arg-type]
            self.contexts[self._key(r)] = ctx
            fresh.append((r, ctx))
        if fresh:
            self._draft_prefill(fresh)

    def _draft_prefill(self, fresh: list[tuple[Request, DraftContext]]) -> None:
        self.draft.prefill([(r.prompt_ids, ctx.block_ids) for r, ctx in fresh], self.kv)  # logits unused
        for r, ctx in fresh:
            ctx.length = len(r.prompt_ids)

    # ---- one speculative decode step --------------------------------------------------------
    def step(self, reqs: list[Request]) -> dict[str, list[int] | str]:
        self.num_steps += 1
        self.prune(reqs)
        eligible = self._eligible(reqs)
        proposals, qs = self._propose(eligible)
        verify = self._verify(reqs, proposals)
        out: dict[str, list[int] | str] = {}
        for r in reqs:
            rows = verify[r.id]
            if not np.isfinite(rows).all():
                out[r.id] = "the model produced non-finite logits"
            elif r.id not in proposals:
                out[r.id] = [sample(rows[0], r.params, r.rng)]
            else:
                toks = self._accept(r, proposals[r.id], qs.get(r.id), rows)
                self._advance(self.contexts[self._key(r)], r.num_tokens - 1, len(toks) - 1)
                self.num_proposed += self.k
                self.num_accepted += len(toks) - 1
                out[r.id] = toks
        return out

    def _draft_step(self, items: list[tuple[DraftContext, int, int]]) -> np.ndarray:
        """One draft decode step: (context, token, position) per request, through the one driver."""
        width = max(len(c.block_ids) for c, _, _ in items)
        tables = np.full((len(items), width), self.kv.num_blocks, I64)
        for i, (c, _, _) in enumerate(items):
            tables[i, : len(c.block_ids)] = c.block_ids
        slots = [self.kv.slot(c.block_ids, p) for c, _, p in items]
        inp = DecodeInputs(np.asarray([t for _, t, _ in items], I64), np.asarray([p for _, _, p in items], I64),
                           np.asarray(slots, I64), tables)
        logits = self.driver.step(inp, spec=True)
        for c, _, p in items:
            c.length = p + 1
        return logits

    def _propose(self, eligible: list[tuple[Request, DraftContext, int]]
                 ) -> tuple[dict[str, list[int]], dict[str, list[np.ndarray]]]:
        if not eligible:
            return {}, {}
        spec = [r for r, _, _ in eligible]
        ctxs = [c for _, c, _ in eligible]
        positions = [p for _, _, p in eligible]
        for c, p in zip(ctxs, positions):
            self.blocks.allocate(c, p + self.k)  # type: ignore[arg-type]
        owed = [(c, r.all_ids[p - 1], p - 1) for r, c, p in zip(spec, ctxs, positions) if c.owed]
        if owed:  # the previous step accepted everything: feed the last proposal first
            self._draft_step(owed)
            for c, _, _ in owed:
                c.owed = 0
        props: dict[str, list[int]] = {r.id: [] for r in spec}
        qs: dict[str, list[np.ndarray]] = {r.id: [] for r in spec}
        for j in range(self.k):
            items = [(c, (r.all_ids[-1] if j == 0 else props[r.id][-1]), p + j)
                     for r, c, p in zip(spec, ctxs, positions)]
            logits = self._draft_step(items)
            for r, row in zip(spec, logits):
                if r.params.is_greedy:
                    props[r.id].append(int(np.argmax(row)))
                else:
                    q = _probs(row, r)
                    qs[r.id].append(q)
                    props[r.id].append(_draw(q, r.rng))  # type: ignore[arg-type]
        for r in spec:
            self.trace.append((self.num_steps, r.id, list(props[r.id])))
        return props, qs

    def _verify(self, reqs: list[Request], proposals: dict[str, list[int]]) -> dict[str, np.ndarray]:
        """The target's forward over q = k+1 tokens per request. Rows without proposals carry k inert
        padding tokens (slot -1), so every request shares one shape and one graph."""
        q, runner = self.k + 1, self.runner
        toks: list[int] = []
        pos: list[int] = []
        slots: list[int] = []
        for r in reqs:
            p0 = r.num_tokens - 1
            if r.id in proposals:
                toks += [r.all_ids[-1], *proposals[r.id]]
                pos += range(p0, p0 + q)
                slots += [runner.model_slot(r, p) for p in range(p0, p0 + q)]
            else:
                toks += [r.all_ids[-1]] + [0] * self.k
                pos += [p0] * q
                slots += [runner.model_slot(r, p0)] + [-1] * self.k
        rows = [runner.batch.row_of[r.id] for r in reqs]
        width = int(runner.batch.num_blocks[rows].max())
        inp = DecodeInputs(np.asarray(toks, I64), np.asarray(pos, I64), np.asarray(slots, I64),
                           runner.batch.block_table[rows, :width], q=q)
        logits = runner.decoder.step(inp, spec=True)
        for r in reqs:
            r.num_computed = r.num_tokens
        return {r.id: logits[i * q : (i + 1) * q] for i, r in enumerate(reqs)}

    def _accept(self, r: Request, props: list[int], qs: list[np.ndarray] | None, rows: np.ndarray) -> list[int]:
        """Greedy: the longest prefix the target agrees with, plus its bonus token. Sampling: standard
        speculative sampling (accept d with min(1, p/q), else draw from max(p - q, 0)), which preserves
        the target's distribution."""
        out: list[int] = []
        if r.params.is_greedy:
            for i, d in enumerate(props):
                g = int(np.argmax(rows[i]))
                if d != g:
                    return [*out, g]
                out.append(d)
            return [*out, int(np.argmax(rows[self.k]))]
        rng = r.rng
        assert rng is not None and qs is not None
        for i, d in enumerate(props):
            p = _probs(rows[i], r)
            if rng.random() < min(1.0, p[d] / max(qs[i][d], 1e-30)):
                out.append(d)
                continue
            residual = np.maximum(p - qs[i], 0.0)
            return [*out, _draw(residual if residual.sum() > 0 else p, rng)]
        return [*out, _draw(_probs(rows[self.k], r), rng)]

    def _advance(self, ctx: DraftContext, position: int, accepted: int) -> None:
        """After verification: the draft's KV is valid through the accepted tokens; after a full accept
        it owes the last proposal, which it never consumed."""
        new_position = position + accepted + 1
        ctx.length = min(position + self.k, new_position)
        ctx.owed = new_position - ctx.length

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted / self.num_proposed if self.num_proposed else 0.0
