"""The model runner: `execute(SchedulerOutput) -> RunnerOutput`.

It mirrors the scheduled requests in its input batch (tokens, and per KV group the block tables the KV
manager handed out), runs the model (prefill eager; decode through the graph driver), lets the proposer
propose and the rejection sampler verify, and samples. It never touches a Request: only the engine's
update step appends tokens, checks stops and finishes requests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.base import Model, prefill
from vt.engine.config import EngineConfig
from vt.engine.graph_driver import DecodeInputs, GraphDriver
from vt.engine.input_batch import InputBatch
from vt.engine.kv_manager import TARGET
from vt.engine.outputs import RunnerOutput, SchedulerOutput
from vt.engine.proposers import Proposer, SpecRequest
from vt.engine.rejection import rejection_sample
from vt.engine.sampler import apply_penalties, sample, top_logprobs
from vt.engine.sampling import ResolvedParams

I64 = np.int64
NON_FINITE = "the model produced non-finite logits"


@dataclass(slots=True)
class RequestState:
    params: ResolvedParams
    rng: np.random.Generator | None
    num_prompt_tokens: int


class ModelRunner:
    def __init__(self, model: Model, cfg: EngineConfig, proposer: Proposer | None = None, stream=None) -> None:
        self.model = model
        self.cfg = cfg
        self.backend = model.backend
        self.kv = model.make_kv_cache(cfg.num_blocks, cfg.block_size)
        self.batch = InputBatch(cfg.max_num_seqs, cfg.max_model_len, cfg.max_blocks_per_seq, cfg.num_blocks,
                                cfg.num_kv_groups)
        self.stream = stream or self.backend.new_stream()  # one compute stream: prefill and decode stay ordered
        self.decoder = GraphDriver(model, self.kv, cfg.max_num_seqs, enabled=not cfg.enforce_eager,
                                   stream=self.stream)
        self.proposer = proposer
        self.states: dict[str, RequestState] = {}

    # ---- the input batch follows the scheduler output --------------------------------------
    def _update_states(self, so: SchedulerOutput) -> None:
        """Leavers leave holes; new requests fill holes first; cached ones grow; then decoding rows move
        to the front and the rest condense (rows move: nothing may be keyed by a row)."""
        gone = [rid for rid in (*so.finished_ids, *so.preempted_ids) if rid in self.batch.row_of]
        for rid in gone:
            self.batch.remove(rid)
            del self.states[rid]
        if self.proposer is not None:
            self.proposer.drop(gone)
        for req in so.new_reqs:
            self.batch.add(req.req_id, req.token_ids, req.block_ids)
            self.states[req.req_id] = RequestState(req.params, req.rng, req.num_prompt_tokens)
        for c in so.cached_reqs:
            self.batch.append_tokens(c.req_id, c.new_token_ids)
            for group, ids in enumerate(c.new_block_ids):
                self.batch.append_blocks(c.req_id, group, ids)
        new = {r.req_id for r in so.new_reqs}
        self.batch.reorder_decode_first(lambda rid: rid not in new)  # rows past their prefill first
        self.batch.condense()

    # ---- one step ---------------------------------------------------------------------------
    def execute(self, so: SchedulerOutput) -> RunnerOutput:
        self._update_states(so)
        out = RunnerOutput()
        with self.backend.use_stream(self.stream):
            new = [r.req_id for r in so.new_reqs]
            if new:
                self._sample(new, self._prefill(new), out)
                if self.proposer is not None:
                    self.proposer.add(self.batch, so.new_reqs)
            cached = {c.req_id for c in so.cached_reqs}
            decodes = [rid for rid in (self.batch.requests[i] for i in self.batch.rows()) if rid in cached]
            if decodes and self.proposer is not None and any(so.spec_tokens.get(r) for r in decodes):
                self._speculate(decodes, so, out)
            elif decodes:
                self._sample(decodes, self._decode(decodes), out)
        return out

    def _sample(self, req_ids: list[str], logits: dict[str, np.ndarray], out: RunnerOutput) -> None:
        for rid in req_ids:
            row, st = logits[rid], self.states[rid]
            if not np.isfinite(row).all():  # this request fails; its neighbours carry on
                out.errors[rid] = NON_FINITE
            else:
                if st.params.has_penalties:
                    toks = self.batch.tokens(rid)
                    row = apply_penalties(row, st.params, toks[: st.num_prompt_tokens], toks[st.num_prompt_tokens :])
                out.sampled[rid] = [sample(row, st.params, st.rng)]
                if st.params.logprobs is not None:
                    out.logprobs[rid] = [top_logprobs(logits[rid], st.params.logprobs, out.sampled[rid][0])]

    def _prefill(self, req_ids: list[str]) -> dict[str, np.ndarray]:
        # a recompute after preemption re-prefills its generated tokens too: the batch holds them all
        seqs = [(self.batch.tokens(rid).tolist(), self.batch.blocks(rid)) for rid in req_ids]
        host = prefill(self.model, seqs, self.kv)
        return {rid: host[i] for i, rid in enumerate(req_ids)}

    def _position(self, rid: str) -> int:
        return int(self.batch.num_tokens[self.batch.row_of[rid]]) - 1  # the last token: computed now

    def _decode(self, req_ids: list[str]) -> dict[str, np.ndarray]:
        pos = [self._position(rid) for rid in req_ids]
        inputs = DecodeInputs(
            tokens=np.asarray([self.batch.tokens(rid)[p] for rid, p in zip(req_ids, pos)], I64),
            positions=np.asarray(pos, I64),
            slots=np.asarray([self.kv.slot(self.batch.blocks(rid), p) for rid, p in zip(req_ids, pos)], I64),
            block_tables=self.batch.tables(req_ids, TARGET),
        )
        logits = self.decoder.step(inputs)
        return {rid: logits[i] for i, rid in enumerate(req_ids)}

    # ---- speculative decoding ---------------------------------------------------------------
    def _speculate(self, req_ids: list[str], so: SchedulerOutput, out: RunnerOutput) -> None:
        assert self.proposer is not None
        asks = [SpecRequest(rid, self._position(rid), self.states[rid].params, self.states[rid].rng)
                for rid in req_ids if so.spec_tokens.get(rid)]
        proposals = self.proposer.propose(self.batch, asks)
        verify = self._verify(req_ids, {rid: p.tokens for rid, p in proposals.items()})
        for rid in req_ids:
            rows, st = verify[rid], self.states[rid]
            if not np.isfinite(rows).all():
                out.errors[rid] = NON_FINITE
            elif rid not in proposals:
                out.sampled[rid] = [sample(rows[0], st.params, st.rng)]
            else:
                p = proposals[rid]
                toks = rejection_sample(rows, p.tokens, p.probs if p.probs else None, st.params, st.rng)
                self.proposer.accepted(self.batch, rid, self._position(rid), len(toks) - 1)
                out.sampled[rid] = toks
            if rid in out.sampled and st.params.logprobs is not None:  # row i scored the i-th token
                out.logprobs[rid] = [top_logprobs(rows[i], st.params.logprobs, t)
                                     for i, t in enumerate(out.sampled[rid])]

    def _verify(self, req_ids: list[str], proposals: dict[str, list[int]]) -> dict[str, np.ndarray]:
        """The target's forward over q = k+1 tokens per request. Rows without proposals carry k inert
        padding tokens (slot -1), so every request shares one shape and one graph."""
        k = self.proposer.k  # type: ignore[union-attr]
        q = k + 1
        toks: list[int] = []
        pos: list[int] = []
        slots: list[int] = []
        for rid in req_ids:
            p0, blocks = self._position(rid), self.batch.blocks(rid)
            last = int(self.batch.tokens(rid)[p0])
            if rid in proposals:
                toks += [last, *proposals[rid]]
                pos += range(p0, p0 + q)
                slots += [self.kv.slot(blocks, p) for p in range(p0, p0 + q)]
            else:
                toks += [last] + [0] * k
                pos += [p0] * q
                slots += [self.kv.slot(blocks, p0)] + [-1] * k
        inp = DecodeInputs(np.asarray(toks, I64), np.asarray(pos, I64), np.asarray(slots, I64),
                           self.batch.tables(req_ids, TARGET), q=q)
        logits = self.decoder.step(inp, spec=True)
        return {rid: logits[i * q : (i + 1) * q] for i, rid in enumerate(req_ids)}
