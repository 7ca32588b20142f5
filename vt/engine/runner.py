"""The model runner: keeps the input batch in step with the scheduler, builds each step's inputs,
runs the model (prefill eager; decode through the decode-graph driver), and samples."""

from __future__ import annotations

from typing import Any

import numpy as np

from models.decode_graph import DecodeGraphDriver, DecodeInputs
from models.qwen3 import Qwen3ForCausalLM
from vt.engine.config import EngineConfig
from vt.engine.input_batch import InputBatch
from vt.engine.request import Request
from vt.engine.sampler import sample
from vt.engine.scheduler import SchedulerOutput


class ModelRunner:
    def __init__(self, model: Qwen3ForCausalLM, cfg: EngineConfig) -> None:
        self.model = model
        self.cfg = cfg
        self.backend = model.backend
        self.pool = model.backend.pool
        self.kv = model.make_kv_cache(cfg.num_blocks, cfg.block_size)
        self.batch = InputBatch(cfg.max_num_seqs, cfg.max_model_len, cfg.max_blocks_per_seq, cfg.num_blocks)
        self.stream = self.backend.new_stream()  # one compute stream: prefill and decode stay ordered
        self.decoder = DecodeGraphDriver(model, self.kv, cfg.max_num_seqs, enabled=not cfg.enforce_eager,
                                         stream=self.stream)
        self.spec: Any = None  # a SpecDecoder when the engine speculates

    # ---- the input batch follows the scheduler ----------------------------------------------
    def sync_batch(self, running: list[Request]) -> None:
        """Finished and preempted requests leave holes; new ones fill holes first; then decoding rows
        move to the front and the rest condense (rows move: nothing may be keyed by a row)."""
        live = {r.id for r in running}
        for rid in [rid for rid in self.batch.row_of if rid not in live]:
            self.batch.remove(rid)
        for r in running:
            if r.id not in self.batch.row_of:
                self.batch.add(r)
            else:
                self.batch.set_blocks(r)
        self.batch.reorder_decode_first(lambda r: r.num_computed > 0)
        self.batch.condense()

    # ---- one step ---------------------------------------------------------------------------
    def execute(self, out: SchedulerOutput, running: list[Request]) -> dict[str, list[int] | str]:
        """Runs the step; returns each scheduled request's new tokens, or the error that ends it."""
        self.sync_batch(running)
        with self.backend.use_stream(self.stream):
            if out.is_prefill:
                logits = self._prefill(out.requests)
                if self.spec is not None:
                    self.spec.on_prefill(out.requests)
                return self._sample_all(out.requests, logits)
            reqs = [r for r in (self.batch.requests[i] for i in self.batch.rows()) if r is not None]
            if self.spec is not None:
                return self.spec.step(reqs)
            return self._sample_all(reqs, self._decode(reqs))

    def _sample_all(self, reqs: list[Request], logits: dict[str, np.ndarray]) -> dict[str, list[int] | str]:
        out: dict[str, list[int] | str] = {}
        for r in reqs:
            row = logits[r.id]
            if not np.isfinite(row).all():  # this request fails; its neighbours carry on
                out[r.id] = "the model produced non-finite logits"
            else:
                out[r.id] = [sample(row, r.params, r.rng)]
        return out

    def _prefill(self, reqs: list[Request]) -> dict[str, np.ndarray]:
        seqs = []
        for r in reqs:
            toks = r.all_ids  # a recompute after preemption re-prefills its generated tokens too
            seqs.append((toks, r.block_ids))
        host = self.model.prefill(seqs, self.kv)
        for r in reqs:
            r.num_computed = r.num_tokens
        return {r.id: host[i] for i, r in enumerate(reqs)}

    def _decode(self, reqs: list[Request]) -> dict[str, np.ndarray]:
        rows = [self.batch.row_of[r.id] for r in reqs]
        b = self.batch
        n = b.num_tokens[rows]
        width = int(b.num_blocks[rows].max())
        inputs = DecodeInputs(
            tokens=b.token_ids[rows, n - 1],
            positions=n - 1,
            slots=np.asarray([self.model_slot(r, r.num_tokens - 1) for r in reqs], np.int64),
            block_tables=b.block_table[rows, :width],
        )
        logits = self.decoder.step(inputs)
        for r in reqs:
            r.num_computed = r.num_tokens
        return {r.id: logits[i] for i, r in enumerate(reqs)}

    def model_slot(self, r: Request, position: int) -> int:
        return self.kv.slot(r.block_ids, position)

