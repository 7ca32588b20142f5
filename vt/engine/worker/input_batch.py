"""The runner's per-row mirror of the running requests: their token ids, per KV group their block tables as
the KV manager hands them out, and what their next token samples with (the sampler's parameter columns, set
once when the request joins), so a step's device inputs are slices of these arrays, not a loop over requests.

Rows move (condense, swap, decode-first reorder); every per-row field moves with its row, so anything
keyed by a row must be re-read after a move. State that must survive moves (draft contexts, n-gram
indexes) is keyed by request id, never by row.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from vt.engine.sample.sampler import NF, NI
from vt.errors import EngineInvariantError

ROW_ARRAYS = ("token_ids", "num_tokens", "block_table", "num_blocks", "ahead", "feed_slot", "sampling_f",
              "sampling_i", "min_tokens", "penalized", "bans_sequences", "constrained")


class InputBatch:
    def __init__(self, max_rows: int, max_model_len: int, max_blocks: int, trash_block: int,
                 num_groups: int = 1) -> None:
        self.max_rows = max_rows
        self.trash_block = trash_block  # unused block-table entries name it: a valid, never-owned block
        self.requests: list[str | None] = [None] * max_rows  # request id per row; None = a hole
        self.row_of: dict[str, int] = {}
        self.num_rows = 0  # rows [0, num_rows) hold live requests or holes; above is empty
        self.token_ids = np.zeros((max_rows, max_model_len), np.int64)
        self.num_tokens = np.zeros(max_rows, np.int64)
        self.block_table = np.full((max_rows, num_groups, max_blocks), trash_block, np.int64)
        self.num_blocks = np.zeros((max_rows, num_groups), np.int64)
        # async scheduling: sampled tokens the host has not been sent yet, and the request's slot in the
        # decoder's device array of last sampled ids (a request's, moving with its row)
        self.ahead = np.zeros(max_rows, np.int64)
        self.feed_slot = np.zeros(max_rows, np.int64)
        # the sampler's parameter rows (vt/engine/sample/sampler.py FIELDS_F / FIELDS_I) as the request fixed
        # them; a step sets the output position, the history length and whether the bans still hold
        self.sampling_f = np.zeros((max_rows, NF), np.float32)
        self.sampling_i = np.zeros((max_rows, NI), np.int64)
        self.min_tokens = np.zeros(max_rows, np.int64)
        self.penalized = np.zeros(max_rows, np.bool_)
        self.bans_sequences = np.zeros(max_rows, np.bool_)  # a bad word of several tokens: bans built each step
        self.constrained = np.zeros(max_rows, np.bool_)  # a structured output: its grammar's mask built each step

    def __len__(self) -> int:
        return len(self.row_of)

    def rows(self) -> list[int]:
        return [i for i in range(self.num_rows) if self.requests[i] is not None]

    def add(self, req_id: str, token_ids: list[int], block_ids: list[list[int]]) -> int:
        if req_id in self.row_of:
            raise EngineInvariantError(f"request {req_id} is already in the batch at row {self.row_of[req_id]}")
        holes = [i for i in range(self.num_rows) if self.requests[i] is None]
        row = holes[0] if holes else self.num_rows
        if row >= self.max_rows:
            raise EngineInvariantError(f"input batch is full ({self.max_rows} rows) adding {req_id}")
        self.num_rows = max(self.num_rows, row + 1)
        self.requests[row] = req_id
        self.row_of[req_id] = row
        self.append_tokens(req_id, token_ids)
        for group, ids in enumerate(block_ids):
            self.append_blocks(req_id, group, ids)
        return row

    def remove(self, req_id: str) -> int:
        """Leaves a hole; the row's fields are cleared (block tables back to the trash block)."""
        row = self.row_of.pop(req_id)
        self.requests[row] = None
        for name in ROW_ARRAYS[1:]:
            getattr(self, name)[row] = 0
        self.block_table[row] = self.trash_block
        self._trim()
        return row

    def _trim(self) -> None:
        while self.num_rows and self.requests[self.num_rows - 1] is None:
            self.num_rows -= 1

    def append_tokens(self, req_id: str, token_ids: list[int]) -> None:
        row = self.row_of[req_id]
        n = int(self.num_tokens[row])
        self.token_ids[row, n : n + len(token_ids)] = token_ids
        self.num_tokens[row] = n + len(token_ids)

    def append_blocks(self, req_id: str, group: int, block_ids: list[int]) -> None:
        row = self.row_of[req_id]
        n = int(self.num_blocks[row, group])
        self.block_table[row, group, n : n + len(block_ids)] = block_ids
        self.num_blocks[row, group] = n + len(block_ids)

    def tokens(self, req_id: str) -> np.ndarray:
        row = self.row_of[req_id]
        return self.token_ids[row, : self.num_tokens[row]]

    def blocks(self, req_id: str, group: int = 0) -> np.ndarray:
        row = self.row_of[req_id]
        return self.block_table[row, group, : self.num_blocks[row, group]]

    def rows_of(self, req_ids: list[str]) -> np.ndarray:
        row_of = self.row_of
        return np.fromiter((row_of[r] for r in req_ids), np.int64, len(req_ids))

    def tables(self, req_ids: list[str], group: int = 0) -> np.ndarray:
        """[len(req_ids), width] block tables, as wide as the widest of them (trash block beyond)."""
        return self.tables_of(self.rows_of(req_ids), group)

    def tables_of(self, rows: np.ndarray, group: int = 0) -> np.ndarray:
        width = max(1, int(self.num_blocks[rows, group].max()))
        return self.block_table[rows, group, :width]

    def swap_states(self, i: int, j: int) -> None:
        for name in ROW_ARRAYS:
            a = getattr(self, name)
            a[[i, j]] = a[[j, i]]
        self.requests[i], self.requests[j] = self.requests[j], self.requests[i]
        for row in (i, j):
            r = self.requests[row]
            if r is not None:
                self.row_of[r] = row
        self._trim()

    def condense(self) -> list[tuple[int, int]]:
        """Slide the last live rows into the holes below them; returns the (from, to) moves."""
        moves = []
        for hole in range(self.num_rows):
            if self.requests[hole] is not None:
                continue
            last = self.num_rows - 1
            while last > hole and self.requests[last] is None:
                last -= 1
            if last <= hole:
                break
            self.swap_states(hole, last)
            moves.append((last, hole))
        self._trim()
        return moves

    def reorder_decode_first(self, is_decode: Callable[[str], bool]) -> list[tuple[int, int]]:
        """Rows of decoding requests first, then the rest (vLLM's decode-first order), by swaps."""
        swaps = []
        lo, hi = 0, self.num_rows - 1
        while lo < hi:
            r_lo, r_hi = self.requests[lo], self.requests[hi]
            if r_lo is not None and is_decode(r_lo):
                lo += 1
            elif r_hi is None or not is_decode(r_hi):
                hi -= 1
            else:
                self.swap_states(lo, hi)
                swaps.append((lo, hi))
        return swaps
