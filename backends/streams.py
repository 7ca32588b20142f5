"""The CPU backend's stream-order simulator: what CUDA streams may do, made deterministic.

Each stream is a queue of deferred work. `record_event` snapshots a stream's vector clock and
`wait_event` merges it into the waiter's, so an op's clock says exactly which work on every stream
happens before it; the host is one more participant (a synchronize merges the stream's clock into the
host's, and work the host submits afterwards inherits it). A policy picks which runnable queue head runs
next, so one test can replay in order, with side streams as late as legal, seeded at random, or under
hypothesis.

Races come from the clocks, not from the interleaving: when an op runs, every overlapping byte range it
reads or writes is checked against the last write (and, for a write, the last reads) by each other
stream; one that does not happen before it is a `StreamRace` carrying both submit stacks. So a missing
wait is reported under every policy, and the adversarial one also shows the wrong values it causes.

What an op wrote is seen by comparing its tensors' bytes before and after it runs (a kernel declares
nothing): a write of the bytes already there goes unseen, which can hide no wrong value.
"""

from __future__ import annotations

import random
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vt.backend import Stream, Tensor
from vt.errors import StreamRace

Clock = dict[int, int]  # stream id -> how many of its ops happen before
# A policy picks the stream whose runnable head op runs next, or None to leave them all deferred
# (only when not forced: a synchronize or a host read must make progress).
Policy = Callable[[Sequence[Stream], bool], "Stream | None"]


def in_order(runnable: Sequence[Stream], forced: bool) -> Stream | None:
    """Every op runs as soon as it is submitted: what the CPU backend does without the simulator."""
    return runnable[0] if runnable else None


def side_streams_late(primary: Stream) -> Policy:
    """The adversary: work on any stream but `primary` runs only when something forces it, and then
    as late as the forcing allows (primary work first)."""

    def pick(runnable: Sequence[Stream], forced: bool) -> Stream | None:
        first = [s for s in runnable if s is primary]
        if first:
            return first[0]
        return runnable[0] if forced and runnable else None

    return pick


def seeded(seed: int, defer: float = 0.5, primary: Stream | None = None) -> Policy:
    """A random runnable head, or (with probability `defer`) nothing until forced: one seed, one schedule.
    With a primary stream (the host's program order: what it allocates and releases follows it), that
    stream's work runs at once and only the others are shuffled and held back."""
    rng = random.Random(seed)

    def pick(runnable: Sequence[Stream], forced: bool) -> Stream | None:
        if primary is not None and primary in runnable:
            return primary
        if not runnable or (not forced and rng.random() < defer):
            return None
        return rng.choice(list(runnable))

    return pick


def from_choices(choices: Sequence[int]) -> Policy:
    """A schedule spelled as integers (hypothesis draws them): each pick is choices[i] modulo the
    runnable count plus one, where the extra value defers; past the end, in order."""
    it = iter(choices)

    def pick(runnable: Sequence[Stream], forced: bool) -> Stream | None:
        if not runnable:
            return None
        c = next(it, 0) % (len(runnable) + (0 if forced else 1))
        return runnable[c] if c < len(runnable) else None

    return pick


@dataclass(slots=True)
class _Op:
    stream: Stream
    seq: int  # its 1-based index on its stream
    clock: Clock  # what happens before it, on every stream
    run: Callable[[], None]
    tensors: list[tuple[Tensor, bool]]  # each with whether the kernel declares it written (`writes`)
    stack: str
    what: str


@dataclass(slots=True)
class _Access:
    seq: int
    lo: int
    hi: int
    stack: str
    what: str


@dataclass(slots=True)
class _History:
    """A buffer's last write and last read by each stream (-1: the host)."""

    writes: dict[int, list[_Access]] = field(default_factory=dict)
    reads: dict[int, list[_Access]] = field(default_factory=dict)


HOST = -1


class StreamOrder:
    def __init__(self, policy: Policy = in_order) -> None:
        self.policy = policy
        self.queues: dict[int, deque[_Op]] = {}
        self.streams: dict[int, Stream] = {}
        self.clocks: dict[int, Clock] = {}  # per stream: its ops' clock so far (waits merged in)
        self.host: Clock = {}
        self.done: dict[int, int] = {}  # per stream: ops executed
        self.history: dict[int, _History] = {}  # buffer id -> accesses
        self.races: list[StreamRace] = []
        self.num_executed = 0

    # ---- what the backend calls -------------------------------------------------------------
    def submit(self, stream: Stream, run: Callable[[], None], tensors: list[tuple[Tensor, bool]], what: str) -> None:
        clock = self._clock(stream)
        _merge(clock, self.host)  # the host submits after everything it has seen complete
        clock[stream.id] = clock.get(stream.id, 0) + 1
        op = _Op(stream, clock[stream.id], dict(clock), run, tensors, "".join(traceback.format_stack(limit=12)[:-3]),
                 what)
        self.queues.setdefault(stream.id, deque()).append(op)
        self._pump(until=None)

    def record(self, stream: Stream) -> Clock:
        return dict(self._merged(stream))

    def wait(self, stream: Stream, clock: Clock) -> None:
        _merge(self._clock(stream), clock)

    def synchronize(self, stream: Stream | None) -> None:
        """Runs what the stream (or every stream) has, and everything it waits on; the host has then seen it."""
        targets = [stream] if stream is not None else list(self.streams.values())
        for s in targets:
            self.host_wait(dict(self._merged(s)))

    def query(self, clock: Clock) -> bool:
        """An event query: whether everything in clock has run (the host has then seen it), without running
        anything; work still queued answers False, as cudaEventQuery does."""
        if any(self.done.get(s, 0) < n for s, n in clock.items() if s != HOST):
            return False
        _merge(self.host, clock)
        return True

    def host_wait(self, clock: Clock) -> None:
        """The host blocks until everything in clock has run (an event synchronize); it has then seen it."""
        self._pump(until=clock)
        _merge(self.host, clock)

    def host_read(self, t: Tensor) -> None:
        """A host read of t (a synchronous copy, after its stream was synchronized): a race if a write to
        it on some stream is not yet seen by the host, or if work the host has not waited for, still
        queued, touches it (it may write: nothing is known of it until it runs)."""
        stack = "".join(traceback.format_stack(limit=12)[:-3])
        lo, hi = t.offset, t.offset + t.nbytes
        for q in self.queues.values():
            for op in q:
                for u, _ in op.tensors:
                    if u.buffer is t.buffer and u.offset < hi and lo < u.offset + u.nbytes:
                        race = StreamRace(f"a host read of bytes [{lo}, {hi}) of {t.buffer!r}, which {op.what} on "
                                          f"Stream#{op.stream.id}, not waited for, has yet to run over\n--- this "
                                          f"access, at:\n{stack}--- the other, submitted at:\n{op.stack}")
                        self.races.append(race)
                        raise race
        self._check(HOST, self.host, t, wrote=False, stack=stack, what="a host read", seq=0)

    # ---- internals --------------------------------------------------------------------------
    def _clock(self, stream: Stream) -> Clock:
        self.streams.setdefault(stream.id, stream)
        return self.clocks.setdefault(stream.id, {})

    def _merged(self, stream: Stream) -> Clock:
        clock = self._clock(stream)
        _merge(clock, self.host)
        return clock

    def _runnable(self) -> list[Stream]:
        out = []
        for sid, q in self.queues.items():
            if q and all(self.done.get(t, 0) >= n for t, n in q[0].clock.items() if t != sid):
                out.append(q[0].stream)
        return out

    def _pump(self, until: Clock | None) -> None:
        """Runs heads the policy picks; with `until`, keeps going (forced) until that much has run."""
        while True:
            forced = until is not None and any(self.done.get(t, 0) < n for t, n in until.items() if t != HOST)
            if until is not None and not forced:
                return
            runnable = self._runnable()
            if until is not None:  # forced: only work the target needs
                runnable = [s for s in runnable if self.done.get(s.id, 0) < until.get(s.id, 0)] or runnable
            pick = self.policy(runnable, forced) if runnable else None
            if pick is None:
                if forced:
                    raise RuntimeError(f"stream simulator: nothing runnable, yet {until} is not done")
                return
            self._execute(self.queues[pick.id].popleft())

    def _execute(self, op: _Op) -> None:
        before = [_bytes(t) for t, _ in op.tensors]
        op.run()
        self.done[op.stream.id] = op.seq
        self.num_executed += 1
        for (t, declared), old in zip(op.tensors, before):
            wrote = declared or not np.array_equal(old, _bytes(t))
            self._check(op.stream.id, op.clock, t, wrote=wrote, stack=op.stack, what=op.what, seq=op.seq)

    def _check(self, sid: int, clock: Clock, t: Tensor, wrote: bool, stack: str, what: str, seq: int) -> None:
        h = self.history.setdefault(t.buffer.id, _History())
        lo, hi = t.offset, t.offset + t.nbytes
        conflicts = [(a, other) for other, accs in h.writes.items() for a in accs]
        if wrote:
            conflicts += [(a, other) for other, accs in h.reads.items() for a in accs]
        for a, other in conflicts:
            if other != sid and a.lo < hi and lo < a.hi and clock.get(other, 0) < a.seq:
                race = StreamRace(f"{what} on {_name(sid)} {'wrote' if wrote else 'read'} bytes [{lo}, {hi}) of "
                                  f"{t.buffer!r}, which {a.what} on {_name(other)} accessed with no wait between "
                                  f"them\n--- this access, submitted at:\n{stack}--- the other, submitted at:\n"
                                  f"{a.stack}")
                self.races.append(race)
                raise race
        if sid == HOST:
            return  # a host read is synchronous: whatever is submitted after it comes after it
        log = h.writes if wrote else h.reads
        log[sid] = [x for x in log.get(sid, []) if not (lo <= x.lo and x.hi <= hi)] + [_Access(seq, lo, hi, stack,
                                                                                                what)]


def _merge(into: Clock, other: Clock) -> None:
    for t, n in other.items():
        if into.get(t, 0) < n:
            into[t] = n


def _bytes(t: Tensor) -> np.ndarray:
    return t.buffer.mem[t.offset : t.offset + t.nbytes].copy()


def _name(sid: int) -> str:
    return "the host" if sid == HOST else f"Stream#{sid}"


def tensors_of(kernel: Any, args: tuple, kw: dict) -> list[tuple[Tensor, bool]]:
    """A launch's tensors, each with whether the kernel declares it written (a `writes` tuple of argument
    positions: a copy's destination is a write even when the bytes it writes are the bytes already there)."""
    writes = getattr(kernel, "writes", ())
    return [(a, i in writes) for i, a in enumerate((*args, *kw.values())) if isinstance(a, Tensor)]


