"""The one KV cache manager: one block pool, and one block table per request per KV group.

Group 0 is the target model; group 1, when the engine speculates with a draft model, is the draft's.
Both draw on the same pool (vLLM v1's shape: one block pool, a coordinator over groups), so every
capacity check, the start-up refusal and preemption count draft memory with the target's. Each
model's KV tensor is indexed by the same block ids.

Blocks are reference-counted: the n samples of one request (`n` > 1) share the full blocks of their
prompt (`fork`), and a block returns to the pool when its last table lets go of it.

Automatic prefix caching (vLLM v1's design), when enabled: a full block of the target group whose KV is
computed is keyed by a hash chained through its parent block's hash (so a block matches only behind the same
whole prefix). A released block keeps its key in the free queue, which is in least-recently-released order
(a request's blocks go back tail first, so its shared prefix is evicted last); taking a block for new KV
evicts its key. A new request's longest cached prefix is served from those blocks, referenced again.
A request's cache salt (vLLM's `cache_salt`) roots its chain: its first block's parent is the salt's digest, not
the empty key, so requests share cached blocks only under the same salt (or none).
With a draft model, the draft group's blocks of a prompt are keyed beside the target's (the draft prefills the
whole prompt in the step the target does), under the target block's key tagged as the draft's: a request that
speculates is served a prefix only as far as both groups hold it, so the draft's KV starts where the target's
does. Invariants: a block is free (in the queue) or referenced, never both; a key names exactly one block and
that block carries the key; an evicted block is never served.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from vt.errors import EngineInvariantError

if TYPE_CHECKING:
    from vt.engine.core.request import Request

TARGET, DRAFT = 0, 1


class KVCacheManager:
    def __init__(self, num_blocks: int, block_size: int, max_blocks_per_seq: int, num_groups: int = 1,
                 enable_caching: bool = False) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.max_blocks_per_seq = max_blocks_per_seq  # a block table's width: never overrun
        self.num_groups = num_groups
        self.enable_caching = enable_caching
        # Invariant: a block is free, or its refcount is the number of table entries naming it (> 0).
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))  # the first is evicted first
        self.refs = [0] * num_blocks
        self.tables: dict[str, list[list[int]]] = {}  # request id -> block ids per group
        self.block_key: list[bytes | None] = [None] * num_blocks  # a cached block's chained hash
        self.cached: dict[bytes, int] = {}  # chained hash -> the block holding that prefix's KV
        self.req_keys: dict[str, list[bytes]] = {}  # a request's full target blocks' keys, in order
        self.queries = 0  # prompt tokens of admitted requests that looked in the cache (vLLM's prefix_cache_queries)
        self.hits = 0  # of them, tokens served from it (the scheduler counts both)
        # the same for readmissions after a preemption, kept apart as vLLM's preempted_queries / preempted_hits are
        self.preempted_queries = self.preempted_hits = 0

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
        tables = self.tables.get(req_id)
        if tables is None:
            return sum(-(-n // self.block_size) for n in num_tokens)
        bs, missing = self.block_size, 0
        for n, t in zip(num_tokens, tables):  # a loop, not a generator: this runs per request per step
            k = -(-n // bs) - len(t)
            if k > 0:
                missing += k
        return missing

    def can_allocate(self, req_id: str, num_tokens: Sequence[int], reserve: int = 0) -> bool:
        return self.num_missing(req_id, num_tokens) + reserve <= self.num_free

    def grow(self, req_id: str, num_tokens: Sequence[int]) -> list[list[int]] | None:
        """allocate when the free blocks hold what it needs (the new ids per group, empty lists when the last
        blocks have room: most decode steps), else None: one count of the missing blocks, not three."""
        tables = self.tables.get(req_id)
        if tables is not None:
            bs = self.block_size
            for n, t in zip(num_tokens, tables):
                if n > len(t) * bs:
                    break
            else:
                return [[] for _ in tables]  # most decode steps: the last blocks have room
        missing = self.num_missing(req_id, num_tokens)
        if missing > self.num_free:
            return None
        return self.allocate(req_id, num_tokens)

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
        if missing == 0 and req_id in self.tables:  # most decode steps: the last block has room
            return [[] for _ in range(self.num_groups)]
        if missing > self.num_free:
            raise EngineInvariantError(f"request {req_id}: needs {missing} more blocks, {self.num_free} free")
        tables = self.tables.setdefault(req_id, [[] for _ in range(self.num_groups)])
        added: list[list[int]] = []
        for n, table in zip(need, tables):
            new = [self._take() for _ in range(n - len(table))]
            table.extend(new)
            added.append(new)
        return added

    def _take(self) -> int:
        """The least recently released free block, its cached key (if any) evicted: it is about to hold new KV."""
        b, _ = self.free.popitem(last=False)
        key = self.block_key[b]
        if key is not None:
            del self.cached[key]
            self.block_key[b] = None
        self.refs[b] = 1
        return b

    # ---- prefix caching ---------------------------------------------------------------------------
    @staticmethod
    def salt_root(cache_salt: str | None) -> bytes:
        """The parent key of a request's first block: empty without a salt, else the salt's SHA-256 (32 bytes, the
        shape of every other parent, so a salted chain is an unsalted one's only by a hash collision)."""
        if cache_salt is None:
            return b""
        return hashlib.sha256(b"vt cache salt\0" + cache_salt.encode()).digest()

    def chained_keys(self, token_ids: Sequence[int], start: int, stop: int, parent: bytes) -> Iterator[bytes]:
        """The keys of full blocks start..stop-1 of token_ids, block `start`'s parent keyed `parent`, one at a time:
        a full block's key is the SHA-256 of its parent's key (b"" for the first block) and its tokens as int64
        bytes. The blocks' tokens are made bytes in one conversion (a block's own conversion was three quarters of
        the hashing's time: 151 against 39 us for a 1,024-token prompt on the CPU machine)."""
        bs = self.block_size
        data = np.asarray(token_ids[start * bs : stop * bs], dtype=np.int64).tobytes()
        step = 8 * bs
        for i in range(stop - start):
            parent = hashlib.sha256(parent + data[i * step : (i + 1) * step]).digest()
            yield parent

    def keys_of(self, token_ids: Sequence[int], num_blocks: int, known: list[bytes] | None = None,
                root: bytes = b"") -> list[bytes]:
        """The chained keys of the first num_blocks full blocks of token_ids (extending `known`, a prefix of them),
        the first block's parent keyed `root` (salt_root)."""
        keys = list(known or [])
        keys += self.chained_keys(token_ids, len(keys), num_blocks, keys[-1] if keys else root)
        return keys

    @staticmethod
    def draft_key(key: bytes) -> bytes:
        """The key of the draft group's block that holds the same prefix as the target block keyed `key`."""
        return b"draft:" + key

    def lookup(self, token_ids: Sequence[int], root: bytes = b"") -> list[int]:
        """The target blocks holding the longest cached prefix of token_ids (lookup_groups' first list)."""
        return self.lookup_groups(token_ids, root=root)[TARGET]

    def lookup_groups(self, token_ids: Sequence[int], draft: bool = False, memo: list[bytes] | None = None,
                      root: bytes = b"") -> list[list[int]]:
        """Per KV group, the blocks holding the longest cached prefix of token_ids, whole blocks only, up to the
        last token's (whose logits are still computed, over the KV the cache holds: `Scheduler._admit`). draft: the
        prefix must be cached in the draft group too (a request that speculates); else the draft's list is empty.
        memo: the keys of token_ids' first blocks known so far (a request's own list, which this extends as it keys
        more): a request looked up again (one waiting for blocks, step after step) hashes no block twice. root: the
        first block's parent key (salt_root of the request's cache salt)."""
        hit: list[list[int]] = [[] for _ in range(self.num_groups)]
        # keyed one block at a time, up to the first block not cached: a miss hashes one block, not its whole prompt
        for key in self._keys_through(token_ids, len(token_ids) // self.block_size, memo, root):
            b = self.cached.get(key)
            d = self.cached.get(self.draft_key(key)) if draft else None
            if b is None or (draft and d is None):
                break
            hit[TARGET].append(b)
            if d is not None:
                hit[DRAFT].append(d)
        return hit

    def _keys_through(self, token_ids: Sequence[int], stop: int, memo: list[bytes] | None,
                      root: bytes) -> Iterator[bytes]:
        """The keys of blocks 0..stop-1 of token_ids, one at a time: memo's first, then hashed (and added to memo)."""
        if memo is None:
            yield from self.chained_keys(token_ids, 0, stop, root)
            return
        yield from memo[:stop]
        for key in self.chained_keys(token_ids, len(memo), stop, memo[-1] if memo else root):
            memo.append(key)
            yield key

    def attach(self, req_id: str, blocks: list[list[int]]) -> None:
        """req_id's tables start with cached blocks, per group (from `lookup`), referenced again; a free one leaves
        the free queue. req_id must hold no blocks yet."""
        if req_id in self.tables:
            raise EngineInvariantError(f"request {req_id}: served a cached prefix but already holds blocks")
        for b in (b for group in blocks for b in group):
            if self.refs[b] == 0:
                del self.free[b]
            self.refs[b] += 1
        self.tables[req_id] = [list(group) for group in blocks]
        self.req_keys[req_id] = [k for k in (self.block_key[b] for b in blocks[TARGET]) if k is not None]

    def cache_computed(self, requests: Iterable[Request]) -> None:
        """cache_full_blocks for each request a block of which filled since it was last keyed: its token list is
        built only then (one request in block_size, a decode step). Per request per step: kept lean."""
        if not self.enable_caching:
            return
        bs, keys, tables = self.block_size, self.req_keys, self.tables
        for req in requests:
            computed = min(req.num_computed, len(req.prompt_ids) + len(req.output_ids))
            if computed // bs > len(keys.get(req.id, ())) and req.id in tables:
                self.cache_full_blocks(req.id, req.all_ids, req.num_computed, root=req.cache_root)

    def cache_full_blocks(self, req_id: str, token_ids: Sequence[int], num_computed: int,
                          draft_computed: int = 0, root: bytes = b"") -> None:
        """Key every full target block of req_id whose KV is computed (the first num_computed tokens), so later
        requests find it, and every full draft block whose draft KV is (the first draft_computed tokens: the
        prompt, prefilled whole). A prefix already cached in another block leaves this one unkeyed. root: the first
        block's parent key (salt_root of the request's cache salt)."""
        if not self.enable_caching or req_id not in self.tables:
            return
        tables = self.tables[req_id]
        full = min(num_computed, len(token_ids)) // self.block_size
        known = self.req_keys.setdefault(req_id, [])
        if full <= len(known) and not draft_computed:
            return
        keys = self.keys_of(token_ids, max(full, len(known)), known, root)
        for i in range(len(known), full):
            self._key(tables[TARGET][i], keys[i])
        if draft_computed and self.num_groups > DRAFT:
            draft_full = min(draft_computed, len(tables[DRAFT]) * self.block_size, len(token_ids)) // self.block_size
            keys = self.keys_of(token_ids, max(draft_full, len(keys)), keys, root)
            for i in range(draft_full):
                self._key(tables[DRAFT][i], self.draft_key(keys[i]))
        self.req_keys[req_id] = keys[: max(full, len(known))]

    def _key(self, b: int, key: bytes) -> None:
        if key not in self.cached and self.block_key[b] is None:
            self.cached[key] = b
            self.block_key[b] = key

    def reset_prefix_cache(self) -> bool:
        """Forgets every cached prefix (vLLM's reset_prefix_cache: after the weights change, or between benchmark
        runs), so no later request is served KV computed before it. Only while no request holds a block (a running
        request's keys are what later admissions of its own step are served): False, with nothing changed,
        otherwise."""
        if self.tables:
            return False
        self.cached.clear()
        self.block_key = [None] * self.num_blocks
        return True

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
        self.req_keys.pop(req_id, None)
        freed = 0
        for b in (b for t in tables for b in reversed(t)):  # tail first: a shared prefix is evicted last
            self.refs[b] -= 1
            if self.refs[b] == 0:
                self.free[b] = None
                freed += 1
        return freed
