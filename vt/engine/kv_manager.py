"""The one KV cache manager: one block pool, and one block table per request per KV group.

Group 0 is the target model; group 1, when the engine speculates with a draft model, is the draft's.
Both draw on the same pool (vLLM v1's shape: one block pool, a coordinator over groups), so every
capacity check, the start-up refusal and preemption count draft memory with the target's. Each
model's KV tensor is indexed by the same block ids.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from vt.errors import EngineInvariantError

TARGET, DRAFT = 0, 1


class KVCacheManager:
    def __init__(self, num_blocks: int, block_size: int, max_blocks_per_seq: int, num_groups: int = 1) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.max_blocks_per_seq = max_blocks_per_seq  # a block table's width: never overrun
        self.num_groups = num_groups
        # Invariant: every block id is either here or in exactly one table of exactly one request.
        self.free: deque[int] = deque(range(num_blocks))
        self.tables: dict[str, list[list[int]]] = {}  # request id -> block ids per group

    @property
    def num_free(self) -> int:
        return len(self.free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self.free)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def block_ids(self, req_id: str, group: int = TARGET) -> list[int]:
        tables = self.tables.get(req_id)
        return list(tables[group]) if tables else []

    def num_missing(self, req_id: str, num_tokens: Sequence[int]) -> int:
        """Blocks to add so that group g holds num_tokens[g] tokens, summed over the groups."""
        tables = self.tables.get(req_id) or [[] for _ in range(self.num_groups)]
        return sum(max(0, self.blocks_for(n) - len(t)) for n, t in zip(num_tokens, tables))

    def can_allocate(self, req_id: str, num_tokens: Sequence[int], reserve: int = 0) -> bool:
        return self.num_missing(req_id, num_tokens) + reserve <= self.num_free

    def allocate(self, req_id: str, num_tokens: Sequence[int]) -> list[list[int]]:
        """Grow the request's table in group g to hold num_tokens[g] tokens; returns the new ids per group."""
        if len(num_tokens) != self.num_groups:
            raise EngineInvariantError(f"request {req_id}: token counts for {len(num_tokens)} KV groups, the "
                                       f"manager has {self.num_groups}")
        need = [self.blocks_for(n) for n in num_tokens]
        if max(need) > self.max_blocks_per_seq:
            raise EngineInvariantError(f"request {req_id}: {max(num_tokens)} tokens need {max(need)} blocks, over "
                                       f"the block table's width {self.max_blocks_per_seq}")
        missing = self.num_missing(req_id, num_tokens)
        if missing > self.num_free:
            raise EngineInvariantError(f"request {req_id}: needs {missing} more blocks, {self.num_free} free")
        tables = self.tables.setdefault(req_id, [[] for _ in range(self.num_groups)])
        added: list[list[int]] = []
        for n, table in zip(need, tables):
            new = [self.free.popleft() for _ in range(n - len(table))]
            table.extend(new)
            added.append(new)
        return added

    def release(self, req_id: str) -> int:
        """Every block of the request, in every group, back to the pool; returns how many."""
        tables = self.tables.pop(req_id, None) or []
        ids = [b for t in tables for b in t]
        self.free.extend(ids)
        return len(ids)
