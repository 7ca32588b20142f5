"""The one KV cache manager: one block pool, and one block table per request per KV group.

Group 0 is the target model; group 1, when the engine speculates with a draft model, is the draft's.
Both draw on the same pool (vLLM v1's shape: one block pool, a coordinator over groups), so every
capacity check, the start-up refusal and preemption count draft memory with the target's. Each
model's KV tensor is indexed by the same block ids.

Blocks are reference-counted: the n samples of one request (`n` > 1) share the full blocks of their
prompt (`fork`), and a block returns to the pool when its last table lets go of it.
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
        # Invariant: a block is free, or its refcount is the number of table entries naming it (> 0).
        self.free: deque[int] = deque(range(num_blocks))
        self.refs = [0] * num_blocks
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
            for b in new:
                self.refs[b] = 1
            table.extend(new)
            added.append(new)
        return added

    def fork(self, src_id: str, dst_id: str, num_blocks: int) -> list[int]:
        """dst's target table starts with src's first num_blocks blocks, shared (read-only from now: full
        blocks of a prompt both hold); returns them. dst must hold no blocks yet."""
        if dst_id in self.tables:
            raise EngineInvariantError(f"request {dst_id}: forked from {src_id} but already holds blocks")
        shared = self.tables[src_id][TARGET][:num_blocks]
        for b in shared:
            self.refs[b] += 1
        self.tables[dst_id] = [list(shared) if g == TARGET else [] for g in range(self.num_groups)]
        return list(shared)

    def release(self, req_id: str) -> int:
        """The request lets go of every block it holds, in every group; returns how many went back to
        the pool (a block shared with a sibling stays until the last of them lets go)."""
        tables = self.tables.pop(req_id, None) or []
        freed = 0
        for b in (b for t in tables for b in t):
            self.refs[b] -= 1
            if self.refs[b] == 0:
                self.free.append(b)
                freed += 1
        return freed
