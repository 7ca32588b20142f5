"""The seam harness: a tiny engine on a chosen backend, driven one decode step at a time at a chosen
batch shape, with the backend's counters exposed. Seam tests and mutations drive it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from models.base import prefill
from models.loader import load_checkpoint, resolve_model
from models.registry import load_model
from vt.engine.worker.graph_driver import DecodeInputs, GraphDriver
from vt.registry import make_backend

I64 = np.int64


@dataclass(slots=True)
class Seq:
    ids: list[int]
    blocks: list[int]


class SeamHarness:
    def __init__(self, model: str = "tiny-qwen3", backend: str = "cpu", *, graphs: bool = True,
                 max_num_seqs: int = 16, num_blocks: int = 256, block_size: int = 16,
                 backend_obj: Any = None, dtype: str = "float32", group: Any = None) -> None:
        self.backend = backend_obj or make_backend(backend)
        self.pool = self.backend.pool
        self.model = load_model(load_checkpoint(resolve_model(model)), self.backend, dtype, group)
        self.kv = self.model.make_kv_cache(num_blocks, block_size)
        # a step budget of 1,024 tokens: its buckets run past 512 (the piecewise seams take every one) at half the
        # CPU time the engine's 2,048-token top bucket would cost them
        self.driver = GraphDriver(self.model, self.kv, max_num_seqs, enabled=graphs, max_q=8,
                                  max_num_batched_tokens=1024)
        self.block_size = block_size
        self._next_block = 0
        self.seqs: list[Seq] = []
        self.prefill_logits: list[np.ndarray] = []

    # ---- state ------------------------------------------------------------------------------
    def start(self, batch: int, prompt_len: int = 20, seed: int = 0) -> None:
        """`batch` sequences with distinct prompts of about prompt_len tokens, prefilled eagerly."""
        rng = np.random.default_rng(seed)
        vocab = self.model.cfg.vocab_size
        self.seqs = [Seq(rng.integers(3, vocab, prompt_len + i).tolist(), []) for i in range(batch)]
        with self.backend.use_stream(self.driver.stream):
            for s in self.seqs:
                self._grow(s, len(s.ids))
                self._prefill(s)

    def _grow(self, s: Seq, num_tokens: int) -> None:
        while len(s.blocks) * self.block_size < num_tokens:
            s.blocks.append(self._next_block)
            self._next_block += 1

    def slot_of(self, s: Seq, pos: int) -> int:
        return self.kv.slot(s.blocks, pos)

    def _prefill(self, s: Seq) -> None:
        row = prefill(self.model, [(s.ids, s.blocks)], self.kv)[0]
        self.prefill_logits.append(row)
        s.ids.append(int(np.argmax(row)))

    def inputs(self, q: int = 1) -> DecodeInputs:
        """A decode step's inputs; q > 1 is a verify step: the last token plus q-1 proposals (here the
        same token repeated), at consecutive positions."""
        for s in self.seqs:
            self._grow(s, len(s.ids) + q - 1)
        width = max(len(s.blocks) for s in self.seqs)
        tables = np.full((len(self.seqs), width), self.kv.num_blocks, I64)
        for i, s in enumerate(self.seqs):
            tables[i, : len(s.blocks)] = s.blocks
        pos = [len(s.ids) - 1 + j for s in self.seqs for j in range(q)]
        toks = [s.ids[-1] for s in self.seqs for _ in range(q)]
        slots = [self.slot_of(s, p) for s, p in zip((s for s in self.seqs for _ in range(q)), pos)]
        return DecodeInputs(np.asarray(toks, I64), np.asarray(pos, I64), np.asarray(slots, I64), tables, q=q)

    # ---- one step ---------------------------------------------------------------------------
    def step(self, tokens: list[int] | None = None, q: int = 1, spec: bool = False) -> np.ndarray:
        """One decode step for every sequence; appends `tokens` (default: greedy on each sequence's first
        row, as the step's greedy sampler picked it) and returns the real rows' logits. Passing tokens lets
        two backends walk one trajectory."""
        sampled = self.driver.step(self.inputs(q), spec=spec).ids
        logits = self.driver.last_logits()
        chosen = tokens if tokens is not None else [int(t) for t in sampled[::q]]
        for s, t in zip(self.seqs, chosen):
            s.ids.append(int(t))
        return logits

    def traced_step(self) -> list[list]:
        """One decode step, returning its pool traffic in order: ["get", requested bytes, block bytes,
        kernel] and ["put", block bytes, kernel] (kernel: the launch that made the array, if any)."""
        pool, b, events = self.pool, self.backend, []
        get, put = pool.get, pool.put

        def traced_get(nbytes: int) -> Any:
            blk = get(nbytes)
            events.append(["get", int(nbytes), blk.nbytes, b.attribution.current])
            return blk

        def traced_put(blk: Any) -> None:
            events.append(["put", blk.nbytes, b.attribution.current])
            put(blk)

        pool.get, pool.put = traced_get, traced_put  # type: ignore[method-assign]
        try:
            self.step()
        finally:
            del pool.get, pool.put
        return events

    def force_prompt_tokens(self, other: SeamHarness) -> None:
        """Make this harness's sequences continue exactly as `other`'s (same prompts, same first token)."""
        for mine, theirs in zip(self.seqs, other.seqs):
            mine.ids[-1] = theirs.ids[-1]

    @property
    def is_captured(self) -> bool:
        slot = self.driver.last_slot
        return slot is not None and slot.is_captured

    def kv_snapshot(self) -> list[np.ndarray]:
        with self.backend.use_stream(self.driver.stream):
            return [self.backend.copy_d2h(t) for t in (*self.kv.k, *self.kv.v)]
