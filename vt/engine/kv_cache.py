"""The paged KV block pool: fixed-size blocks, block tables, slot mapping."""

from __future__ import annotations

from collections import deque

from vt.engine.request import Request
from vt.errors import EngineInvariantError


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int, max_blocks_per_seq: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.max_blocks_per_seq = max_blocks_per_seq  # a block table's width: never overrun
        # Invariant: every block id is either here or in exactly one request's block_ids.
        self.free: deque[int] = deque(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self.free)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def num_missing(self, req: Request, num_tokens: int) -> int:
        return max(0, self.blocks_for(num_tokens) - len(req.block_ids))

    def can_allocate(self, req: Request, num_tokens: int, reserve: int = 0) -> bool:
        return self.num_missing(req, num_tokens) + reserve <= self.num_free

    def allocate(self, req: Request, num_tokens: int) -> None:
        """Grow req's block table to hold num_tokens tokens."""
        need = self.blocks_for(num_tokens)
        if need > self.max_blocks_per_seq:
            raise EngineInvariantError(f"request {req.id}: {num_tokens} tokens need {need} blocks, over the "
                                       f"block table's width {self.max_blocks_per_seq}")
        missing = need - len(req.block_ids)
        if missing > self.num_free:
            raise EngineInvariantError(f"request {req.id}: needs {missing} more blocks, {self.num_free} free")
        for _ in range(missing):
            req.block_ids.append(self.free.popleft())

    def release(self, req: Request) -> None:
        self.free.extend(req.block_ids)
        req.block_ids = []

    def slot(self, req: Request, position: int) -> int:
        return req.block_ids[position // self.block_size] * self.block_size + position % self.block_size
