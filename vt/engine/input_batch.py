"""Per-row state of the running requests. Rows move (condense, swap, decode-first reorder); every
per-row field moves with its row, so anything keyed by a row must be re-read after a move. State
that must survive moves (draft contexts) is keyed by request id, never by row."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from vt.engine.request import Request
from vt.errors import EngineInvariantError

ROW_ARRAYS = ("token_ids", "num_tokens", "num_prompt", "block_table", "num_blocks", "temperature", "top_p",
              "top_k", "min_p")


class InputBatch:
    def __init__(self, max_rows: int, max_model_len: int, max_blocks: int, trash_block: int) -> None:
        self.max_rows = max_rows
        self.trash_block = trash_block  # unused block-table entries name it: a valid, never-owned block
        self.requests: list[Request | None] = [None] * max_rows  # None = a hole
        self.row_of: dict[str, int] = {}
        self.num_rows = 0  # rows [0, num_rows) hold live requests or holes; above is empty
        self.token_ids = np.zeros((max_rows, max_model_len), np.int64)
        self.num_tokens = np.zeros(max_rows, np.int64)
        self.num_prompt = np.zeros(max_rows, np.int64)
        self.block_table = np.full((max_rows, max_blocks), trash_block, np.int64)
        self.num_blocks = np.zeros(max_rows, np.int64)
        self.temperature = np.zeros(max_rows, np.float64)
        self.top_p = np.ones(max_rows, np.float64)
        self.top_k = np.zeros(max_rows, np.int64)
        self.min_p = np.zeros(max_rows, np.float64)

    def __len__(self) -> int:
        return len(self.row_of)

    def rows(self) -> list[int]:
        return [i for i in range(self.num_rows) if self.requests[i] is not None]

    def add(self, req: Request) -> int:
        if req.id in self.row_of:
            raise EngineInvariantError(f"request {req.id} is already in the batch at row {self.row_of[req.id]}")
        holes = [i for i in range(self.num_rows) if self.requests[i] is None]
        row = holes[0] if holes else self.num_rows
        if row >= self.max_rows:
            raise EngineInvariantError(f"input batch is full ({self.max_rows} rows) adding {req.id}")
        self.num_rows = max(self.num_rows, row + 1)
        self.requests[row] = req
        self.row_of[req.id] = row
        ids = req.all_ids
        self.token_ids[row, : len(ids)] = ids
        self.num_tokens[row] = len(ids)
        self.num_prompt[row] = len(req.prompt_ids)
        p = req.params
        self.temperature[row], self.top_p[row], self.top_k[row], self.min_p[row] = (p.temperature, p.top_p,
                                                                                    p.top_k, p.min_p)
        self.set_blocks(req)
        return row

    def remove(self, req_id: str) -> int:
        """Leaves a hole; the row's fields are cleared (block table back to the trash block)."""
        row = self.row_of.pop(req_id)
        self.requests[row] = None
        self.num_tokens[row] = self.num_prompt[row] = self.num_blocks[row] = 0
        self.block_table[row] = self.trash_block
        self._trim()
        return row

    def _trim(self) -> None:
        while self.num_rows and self.requests[self.num_rows - 1] is None:
            self.num_rows -= 1

    def set_blocks(self, req: Request) -> None:
        row = self.row_of[req.id]
        n = len(req.block_ids)
        self.block_table[row, :n] = req.block_ids
        self.block_table[row, n:] = self.trash_block
        self.num_blocks[row] = n

    def append_token(self, req_id: str, token: int) -> None:
        row = self.row_of[req_id]
        self.token_ids[row, self.num_tokens[row]] = token
        self.num_tokens[row] += 1

    def swap_states(self, i: int, j: int) -> None:
        for name in ROW_ARRAYS:
            a = getattr(self, name)
            a[[i, j]] = a[[j, i]]
        self.requests[i], self.requests[j] = self.requests[j], self.requests[i]
        for row in (i, j):
            r = self.requests[row]
            if r is not None:
                self.row_of[r.id] = row
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

    def reorder_decode_first(self, is_decode: Callable[[Request], bool]) -> list[tuple[int, int]]:
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
