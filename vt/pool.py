"""DevicePool: size-classed LIFO free lists over a backend's driver allocations.

Why it exists: a CUDA graph capture refuses a driver allocation (global mode), so every block a
captured step needs must already sit on a free list. The pool measures what a step needs
(`mark_step_boundary` + `step_demand_profile`) and grows to it before a capture
(`pregrow_for_capture`).

Aliasing rule (measured on an H200): blocks a captured graph used as temporaries may return to the
free lists only for transient work that is dead before that graph's next replay. Long-lived buffers
(weights, KV cache, a slot's persistent inputs and retained outputs) never come from here; they use
`Backend.empty`, a dedicated driver allocation.
"""

from __future__ import annotations

import atexit
import threading
from bisect import bisect_right, insort
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from vt.backend import Buffer, Tensor
from vt.errors import PoolError

MAX_BORROW_RUNGS = 16  # a borrow goes at most one octave (16 rungs) up ...
MAX_BORROW_FACTOR = 2  # ... and never to a class more than twice the requester's


def size_class(nbytes: int, exact: bool = False) -> int:
    """Sizes under 16 B are exact; above, keep the leading bit and the 4 bits below it, rounding
    up: 16 rungs per octave, at most 1/16 = 6.25% waste."""
    if exact or nbytes < 16:
        return nbytes
    shift = nbytes.bit_length() - 5
    if shift <= 0:
        return nbytes
    return ((nbytes + (1 << shift) - 1) >> shift) << shift


class _SizeClass:
    __slots__ = ("size", "free", "live", "base", "peak")

    def __init__(self, size: int) -> None:
        self.size = size
        # LIFO. Invariant: a block on a free list is never live (is_live False, nobody holds it),
        # and it sits on the list of the class it was allocated at.
        self.free: list[Block] = []
        # Blocks handed to requesters of THIS class and not yet put back. A borrowed block counts
        # here (the requester's class), not at the larger class it came from: a loan, not a demotion.
        self.live = 0
        self.base = 0  # `live` at the last step boundary
        self.peak = 0  # max(live - base) since the last step boundary: what a capture will need


class Block:
    """A pool block: a driver Buffer plus the class it belongs to and the class it is lent to."""

    __slots__ = ("buffer", "nbytes", "home", "lent_to", "pool", "generation", "owner_stack", "release_stack")

    def __init__(self, buffer: Buffer, home: _SizeClass | None, pool: DevicePool) -> None:
        self.buffer = buffer
        self.nbytes = buffer.nbytes
        self.home = home  # the class it was allocated at; `put` returns it to this free list
        self.lent_to: _SizeClass | None = None  # the requester's class while live; None = not live
        self.pool = pool
        self.generation = 0  # hand-outs so far: a tensor of an older one no longer owns the block
        self.owner_stack: str | None = None  # sanitizer: where the current (or last) tensor was made
        self.release_stack: str | None = None  # sanitizer: where it was released

    @property
    def is_live(self) -> bool:
        return self.lent_to is not None

    def tensor(self, shape: tuple[int, ...], dtype: Any) -> Tensor:
        t = Tensor(self.buffer, shape, dtype)
        t.block, t.generation = self, self.generation
        if self.pool.is_sanitizing:
            self.owner_stack, self.release_stack = _stack(), None
        return t


class DevicePool:
    def __init__(self, backend: Any, *, bypass: bool | None = None, exact: bool | None = None,
                 borrow: bool | None = None) -> None:
        from vt.env import flags

        f = flags()
        if getattr(backend, "pool", None) is not None:
            raise PoolError(f"backend {getattr(backend, 'name', backend)!r} already has a DevicePool")
        self.backend = backend
        backend.pool = self  # one pool per backend: its kernels' hidden arrays draw on it
        self.is_bypass = f.pool_bypass if bypass is None else bypass
        self.is_exact = f.pool_exact if exact is None else exact
        self.can_borrow = f.pool_borrow if borrow is None else borrow
        self.is_sanitizing = bool(getattr(backend, "is_sanitizing", False))
        # Re-entrant: a CuPy array's finaliser (a put) can run inside get() when the GC fires there.
        self._lock = threading.RLock()
        self._classes: dict[int, _SizeClass] = {}
        self._sizes: list[int] = []  # sorted class sizes, for the best-fit borrow search
        self._class_of: dict[int, _SizeClass] = {}  # nbytes -> its class (memo: the hit path is hot)
        self._owned: set[Block] = set()  # every pooled block not yet drained, live or free
        # Blocks a live graph uses as temporaries: drain never frees them (the graph would replay
        # over freed memory); they stay on the free lists for transient reuse. Refcount per block.
        self._pins: dict[Block, int] = {}
        self._recording: dict[int, set[Block]] = {}  # thread id -> blocks handed out in its recording()
        self.hits = self.misses = self.borrows = 0
        if f.pool_stats:
            atexit.register(lambda: print(f"vt pool stats ({getattr(backend, 'name', '?')}): {self.stats()}"))

    # ---- get / put --------------------------------------------------------------------------
    def get(self, nbytes: int) -> Block:
        sc = self._class_of.get(nbytes)
        if sc is None:
            sc = self._class_for(nbytes)
        c = sc.size
        with self._lock:
            if self.is_bypass:
                blk = Block(self.backend.alloc(nbytes), None, self)
                self.misses += 1
            elif sc.free:
                blk = sc.free.pop()
                self.hits += 1
            else:
                blk = self._borrow(c) or self._miss(sc)
            if self._recording:
                rec = self._recording.get(threading.get_ident())
                if rec is not None:
                    rec.add(blk)
            blk.lent_to = sc
            blk.generation += 1
            live = sc.live = sc.live + 1
            if live - sc.base > sc.peak:
                sc.peak = live - sc.base
            return blk

    def put(self, blk: Block) -> None:
        if blk.__class__ is not Block or blk.pool is not self:
            raise PoolError(f"put of a block this pool did not hand out: {blk!r}")
        with self._lock:
            requester = blk.lent_to
            if requester is None:
                raise PoolError(f"put of a block that is not live (double put?): {blk.buffer!r}")
            requester.live -= 1
            blk.lent_to = None
            if self.is_sanitizing:  # a stale tensor must read poison, not a later owner's data
                self.backend.poison(blk.buffer)
            if self.is_bypass or blk.home is None:
                self.backend.free(blk.buffer)
            elif self.is_sanitizing:  # quarantine: reused last, after every block free longer
                blk.home.free.insert(0, blk)
            else:
                blk.home.free.append(blk)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Tensor:
        """A transient tensor on a pool block; give it back with `release`."""
        import numpy as np

        n = 1
        for d in shape:
            n *= int(d)
        return self.get(max(n * np.dtype(dtype).itemsize, 1)).tensor(shape, dtype)

    def release(self, t: Tensor) -> None:
        if self.is_sanitizing:
            t.block.release_stack = _stack()
        self.put(t.block)

    def check_idle(self, blocks: set[Block], what: str) -> None:
        """Sanitizer, before a graph replays: none of the blocks it uses as temporaries may be held as a
        tensor by anyone (the replay would overwrite it): the aliasing rule, with the holder's stack."""
        held = [b for b in blocks if b.is_live]
        if held:
            from vt.errors import IllegalMemoryAccess

            b = held[0]
            raise IllegalMemoryAccess(f"{what} replays over {b.buffer!r}, one of its temporaries, which "
                                      f"{len(held)} live tensor(s) hold\n--- handed out at:\n{b.owner_stack}")

    # ---- step profile and capture preparation -----------------------------------------------
    def mark_step_boundary(self) -> None:
        with self._lock:
            for sc in self._classes.values():
                sc.base = sc.live
                sc.peak = 0

    def step_demand_profile(self) -> dict[int, int]:
        with self._lock:
            return {c: sc.peak for c, sc in self._classes.items() if sc.peak > 0}

    def pregrow_for_capture(self, demand: dict[int, int]) -> int:
        """Allocate until each class's free list holds demand[class] blocks; returns how many."""
        if self.is_bypass:
            return 0
        if self._backend_is_capturing():
            raise PoolError("pregrow_for_capture inside a capture: it must run before begin_capture")
        grown = 0
        with self._lock:
            for c, n in demand.items():
                sc = self._classes.get(c) or self._new_class(c)
                while len(sc.free) < n:
                    blk = Block(self.backend.alloc(c), sc, self)
                    self._owned.add(blk)
                    sc.free.append(blk)
                    grown += 1
        return grown

    def drain(self) -> int:
        """Free every free-list block to the driver; returns bytes freed. Live blocks untouched."""
        if self.is_bypass:
            return 0
        freed = 0
        with self._lock:
            doomed = [b for sc in self._classes.values() for b in sc.free if b not in self._pins]
            for sc in self._classes.values():
                sc.free[:] = [b for b in sc.free if b in self._pins]
            for blk in doomed:
                self._owned.discard(blk)
                self.backend.free(blk.buffer)
                freed += blk.nbytes
        return freed

    @contextmanager
    def recording(self) -> Iterator[set[Block]]:
        """Collects every block handed out inside the window (a capture's temporaries)."""
        used: set[Block] = set()
        me = threading.get_ident()  # captures on two threads record separately
        with self._lock:
            self._recording[me] = used
        try:
            yield used
        finally:
            with self._lock:
                del self._recording[me]

    def pin(self, blocks: set[Block]) -> None:
        with self._lock:
            for b in blocks:
                self._pins[b] = self._pins.get(b, 0) + 1

    def unpin(self, blocks: set[Block]) -> None:
        with self._lock:
            for b in blocks:
                n = self._pins.pop(b) - 1
                if n:
                    self._pins[b] = n

    # ---- stats --------------------------------------------------------------------
    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "hits": self.hits,
                "misses": self.misses,
                "borrows": self.borrows,
                "retained_bytes": sum(b.nbytes for sc in self._classes.values() for b in sc.free),
                "classes": len(self._classes),
                "blocks_in_use": sum(sc.live for sc in self._classes.values()),
                "pinned_blocks": len(self._pins),
            }

    # ---- internals --------------------------------------------------------------------------
    def _class_for(self, nbytes: int) -> _SizeClass:
        from vt.backend import _check_nbytes

        n = _check_nbytes(nbytes)
        c = size_class(n, self.is_exact)
        with self._lock:
            sc = self._classes.get(c) or self._new_class(c)
            self._class_of[n] = sc
        return sc

    def _new_class(self, c: int) -> _SizeClass:
        sc = self._classes[c] = _SizeClass(c)
        insort(self._sizes, c)
        return sc

    def _borrow(self, c: int) -> Block | None:
        if not self.can_borrow:
            return None
        i = bisect_right(self._sizes, c)
        for size in self._sizes[i : i + MAX_BORROW_RUNGS]:
            if size > MAX_BORROW_FACTOR * c:
                break
            if self._classes[size].free:
                self.borrows += 1
                return self._classes[size].free.pop()
        return None

    def _miss(self, sc: _SizeClass) -> Block:
        blk = Block(self.backend.alloc(sc.size), sc, self)
        self._owned.add(blk)
        self.misses += 1
        return blk

    def _backend_is_capturing(self) -> bool:
        probe = getattr(self.backend, "_any_capture_active", None)
        return bool(probe and probe())


def _stack() -> str:
    import traceback

    return "".join(traceback.format_stack(limit=12)[:-2])
