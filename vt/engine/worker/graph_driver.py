"""THE graph driver: every model's decode steps (target dense, target MoE, draft) go through this one
class, over any `Model` (models/base.py). A driver per model is how a real engine came to have seven
drivers opening captures over pools nobody had pre-grown.

A step is the forward and the batched sampler (vt/engine/sample/sampler.py), captured together: the host
stages tokens, positions, block tables and each row's sampling parameters, and reads back only the
sampled ids (and logprobs, when a row asks), never logits.

Per step, unconditionally: `pool.mark_step_boundary()`. A slot's first step is cold (eager) and
records the step's demand profile. Before EVERY capture, unconditionally and in one place
(`_pregrow`): the pool's free lists and every collective's lazy setup. Then capture, replay once; later steps stage
inputs into the slot's persistent buffers outside the graph and replay.

A slot is a (rows, tokens per row, speculative, block-table width) key: every width bucket keeps its own
graph, so `capture_all` can take every key the scheduler can make (and every prefill bucket) at start-up,
on dummy inputs that write no KV, and no request ever waits for a capture.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.base import ForwardBatch, KVCache, Model, prefill_inputs, run_prefill
from models.decoder import LONG_CONTEXT_KEYS, SHORT_PREFILL_TOKENS
from vt.backend import Graph, Tensor
from vt.capture import BreakableGraph, GraphCaptureScope
from vt.engine.sample.sampler import (
    MAX_BIASED,
    NF,
    NI,
    NLP,
    SPLIT_MAX,
    SamplingRows,
    needs_general,
    pack,
    sample_general,
    sample_tokens,
    split_blocks,
)
from vt.engine.sample.structured import mask_words
from vt.engine.worker.piecewise import Bucket, carry_buffers, token_ladder
from vt.engine.worker.readback import Readback
from vt.engine.worker.uploads import Uploads
from vt.errors import GraphInputMismatch

I64, F32 = np.int64, np.float32
log = logging.getLogger("vt")


def capture_ladder(max_num_seqs: int) -> list[int]:
    """{1, 2, 4, 8, 16, 24, 32, ...} up to max_num_seqs (which is always a rung)."""
    rungs = [s for s in (1, 2, 4, 8) if s < max_num_seqs] + list(range(16, max_num_seqs, 8))
    return [*rungs, max_num_seqs]


def shared_token_rows(tables: np.ndarray, rows: int) -> np.ndarray:
    """token_row for a step whose rows share sequences (a row a token, each with a copy of its sequence's table):
    each row names the first row of its run of consecutive rows with the same table, so the attention sees one
    sequence's tokens as one (the rows kernels read its keys once for them); the padding rows past the tables, whose
    table rows are all trash, name the first of them: one run, not a run each (the tensor-core rows kernel gives a
    run its own block). The same keys either way: a row reads its table's contents, whichever row holds them."""
    out = np.arange(rows, dtype=I64)
    B = tables.shape[0]
    if B > 1:
        starts = np.ones(B, bool)
        starts[1:] = (tables[1:] != tables[:-1]).any(axis=1)
        out[:B] = np.maximum.accumulate(np.where(starts, np.arange(B), 0))
    out[B:] = B
    return out


def token_rows_ladder(max_num_seqs: int) -> list[int]:
    """The rungs of one-token-a-row steps: the decode ladder, then 16, 32 and 64 rows where they lie above it, so
    a short prefill over a long context (up to SHORT_PREFILL_TOKENS tokens, a row each) finds a graph too."""
    ladder = capture_ladder(max_num_seqs)
    return ladder + [r for r in (16, 32, SHORT_PREFILL_TOKENS) if r > ladder[-1]]


def width_bucket(width: int, min_width: int = 1) -> int:
    """Block-table widths are padded to a power of two, and to min_width at least: a graph per bucket, so a
    growing sequence moves between log2(max width) of them."""
    return max(min_width, 1 << max(0, int(width) - 1).bit_length())


# (rows, tokens per row, speculative, block-table width bucket, rows may share a sequence): the last is a whole
# prefill step's (a row a token: several rows of one chunk) where the model's decode attention writes each row's KV
# itself (the rope variant, whose precondition is one token a sequence), so those steps keep a graph of their own;
# then whether a row has a structured output's token mask (its graph masks the logits before the sampler: such
# steps are rare, so the others' graphs keep no launch for it)
SlotKey = tuple[int, int, bool, int, bool, bool]
ROW_INPUTS = 6  # per-row int64 inputs of a slot: tokens, positions, KV slots, table rows, feed sources, keep slots
GREEDY_PADDING = pack([], 1, 0).iparams  # a padding row's sampler ints: greedy, reads nothing
assert NF % 2 == 0, "a row's sampling floats fill whole int64 words of the staged inputs"


def split_scratch(backend: Any, rows: int, blocks: int | None = None) -> tuple[Tensor, ...]:
    """The split sampler's scratch for rows of G blocks each (split_blocks(rows) unless given; the launch takes G from
    it): block partials [rows, G, 256] and sums [rows, G], the row state [rows, 8], and per row a counter of blocks
    done, zero (each launch leaves it zero)."""
    G = blocks or split_blocks(rows)
    parts, psum, state = (backend.empty(shape, np.uint64) for shape in ((rows, G, 256), (rows, G), (rows, 8)))
    counters = backend.empty((rows,), np.uint32)
    backend.copy_h2d(counters, np.zeros(rows, np.uint32))
    return parts, psum, state, counters


def split_views(scratch: tuple[Tensor, ...], rows: int) -> tuple[Tensor, ...]:
    """A slot's share of the driver's split-sampler scratch (allocated at SPLIT_MAX blocks a row): its rows at
    split_blocks(rows) blocks each. The launch takes a row's blocks from the partials' shape, so a slot of one row
    runs 16 blocks a row and a slot of 256 rows two, whatever the driver's largest slot."""
    if not scratch:
        return ()
    parts, psum, state, counters = scratch
    blocks = split_blocks(rows)
    return parts.view((rows, blocks, 256)), psum.view((rows, blocks)), state.view((rows, 8)), counters.view((rows,))


def width_ladder(min_width: int, max_width: int) -> list[int]:
    """Every width bucket from min_width to max_width: powers of two."""
    return [1 << i for i in range(max_width.bit_length()) if min_width <= 1 << i <= max_width]


@dataclass(slots=True)
class DecodeInputs:
    """Host arrays for one decode step of B requests x q tokens each (rows in batch order)."""

    tokens: np.ndarray  # [B*q]
    positions: np.ndarray  # [B*q]
    slots: np.ndarray  # [B*q] KV slot of each token
    block_tables: np.ndarray  # [B, W]
    q: int = 1
    sampling: SamplingRows | None = None  # [B*q] rows; None: greedy, no logprobs
    # async scheduling: per row, the request slot whose last sampled id is its input token (-1: tokens[i] holds
    # it), and the slot its sampled id is kept in (-1: not kept); None: every row -1
    feed_src: np.ndarray | None = None
    keep_dst: np.ndarray | None = None
    # a short prefill run whole (runner._prefill_whole): rows are tokens of a chunk, so several share a sequence
    rows_share_sequences: bool = False


@dataclass(slots=True)
class StepResult:
    """What a step hands back: the sampled id per row (-1: non-finite logits), and per row the raw
    logprobs (values and ids, [B*q, NLP]) when any row asked for them."""

    ids: np.ndarray
    logprob_vals: np.ndarray | None = None
    logprob_ids: np.ndarray | None = None


def _check_inputs(inp: DecodeInputs) -> None:
    """Every replay stages inputs of the shapes and dtypes its graph was captured with; anything else
    is refused by name rather than replayed over."""
    B = inp.block_tables.shape[0]
    want = B * inp.q
    for name in ("tokens", "positions", "slots"):
        a = getattr(inp, name)
        if a.ndim != 1 or a.shape[0] != want or a.dtype.kind not in "iu":
            raise GraphInputMismatch(f"decode input {name}: shape {a.shape} dtype {a.dtype}, expected ({want},) "
                                     f"integers for {B} rows x q={inp.q}")
    if inp.block_tables.ndim != 2 or inp.block_tables.dtype.kind not in "iu":
        raise GraphInputMismatch(f"decode input block_tables: shape {inp.block_tables.shape} dtype "
                                 f"{inp.block_tables.dtype}, expected [rows, width] integers")
    if inp.sampling is not None and inp.sampling.num_rows != want:
        raise GraphInputMismatch(f"decode input sampling: {inp.sampling.num_rows} rows, expected {want}")


class Slot:
    """A captured decode shape: persistent step inputs, its graph, retained outputs, for its life."""

    def __init__(self, driver: GraphDriver, key: SlotKey) -> None:
        S, q, _, width = key[:4]
        b, c = driver.backend, driver.model.cfg
        self.key, self.width = key, width
        # The step inputs are views of one buffer, staged from one host array in one copy (the sampling floats
        # too, NF float32 in NF / 2 of its int64 words a row); the penalty history takes a second copy and the
        # logit biases a third, only when a row has them.
        n = S * q
        floats_at = ROW_INPUTS * n + S * width + n * NI
        self.staged = np.zeros(floats_at + n * NF // 2, I64)
        self.staged_floats = self.staged[floats_at:].view(F32).reshape(n, NF)
        self.staged[3 * n : 4 * n] = np.repeat(np.arange(S, dtype=I64), q)  # token_row: the same every step
        self.inputs = b.empty(self.staged.shape, I64)
        (self.tokens, self.positions, self.slots, self.token_row, self.feed_src,
         self.keep_dst) = (self.inputs.view((n,), offset=8 * i * n) for i in range(ROW_INPUTS))
        self.block_tables = self.inputs.view((S, width), offset=8 * ROW_INPUTS * n)
        self.iparams = self.inputs.view((n, NI), offset=8 * (ROW_INPUTS * n + S * width))
        self.fparams = self.inputs.view((n, NF), F32, offset=8 * floats_at)
        # The penalty history, the sampler's scratch and the logits / hidden outputs are views of the driver's
        # one buffer each (slots replay one at a time, on one stream, and each step stages its own): a ladder
        # of slots at every width holds one [max rows, max width] history, not one per slot.
        self.hist_width = width * driver.kv.block_size
        self.hist = driver.hist.view((n, self.hist_width))
        self.hist_raw = driver.hist_raw.view((n, self.hist_width))
        self.bias_ids, self.bias_vals, self.bias_raw = (t.view((n, MAX_BIASED)) for t in driver.bias)
        self.split = split_views(driver.split, n)  # the split sampler's scratch, or ()
        self.logits = driver.logits.view((n, c.vocab_size))
        self.hidden = driver.hidden.view((n, c.hidden_size))
        self.out_ids = b.empty((n,), I64)
        self.lp_vals, self.lp_ids = b.empty((n, NLP), F32), b.empty((n, NLP), I64)
        # structured outputs: the rows' next-token masks (vt/engine/sample/structured.py), in masked slots only
        self.token_mask = driver.token_mask.view((n, driver.token_mask.shape[1])) if key[5] else None
        self.demand: dict[int, int] | None = None  # the cold step's profile
        self.graph: Graph | None = None
        self.pinned: set = set()  # pool blocks the graph uses as temporaries
        self.num_replays = 0
        self.general = False  # this step has a row only the split sampler's general passes draw (staged per step)

    @property
    def is_captured(self) -> bool:
        return self.graph is not None

    def buffers(self) -> list[Tensor]:
        """The slot's own buffers (the shared ones are the driver's)."""
        return [self.inputs, self.out_ids, self.lp_vals, self.lp_ids]


class GraphDriver:
    def __init__(self, model: Model, kv: KVCache, max_num_seqs: int, *, enabled: bool = True,
                 stream: Any = None, max_q: int = 1, max_num_batched_tokens: int = 8192,
                 max_model_len: int | None = None, async_readback: bool = False) -> None:
        from vt.env import flags

        self.model, self.kv = model, kv
        self.backend, self.pool = model.backend, model.backend.pool
        self.ladder = capture_ladder(max_num_seqs)  # rows of a step of several tokens a row (verification)
        self.rows_ladder = token_rows_ladder(max_num_seqs)  # rows of a step of one token a row
        self.max_q = max_q  # tokens per row at most (k + 1 when verifying k proposals)
        # The widest block table a step can bring: a sequence of max_model_len tokens (or, without one, the
        # whole cache); its bucket is the last of width_ladder.
        blocks = -(-max_model_len // kv.block_size) if max_model_len else kv.num_blocks
        self.max_model_len = max_model_len
        # Tables narrower than the decode attention's partition floor (VT_DECODE_MIN_PARTITION) cost its kernel what
        # that width does (one partition, reading only each row's own context): they share its graphs, fewer to
        # capture. The flag's floor, not the default's: under 128, a table of 128 keys or fewer padded to 256 would
        # launch an empty second partition and the reduce (before session 38 it was; the gain is not measured)
        self.min_width = width_bucket(-(-flags().decode_min_partition // kv.block_size))
        self.max_width = width_bucket(max(1, blocks), self.min_width)
        c, rows = model.cfg, max(max_num_seqs * max_q, self.rows_ladder[-1])
        self.logits = self.backend.empty((rows, c.vocab_size), F32)  # the slots' shared outputs (see Slot)
        self.hidden = self.backend.empty((rows, c.hidden_size), model.operand_dtype)
        self.hist = self.backend.empty((rows, self.max_width * kv.block_size), I64)
        self.hist_raw = self.backend.empty((rows, self.max_width * kv.block_size), F32)
        self.bias = tuple(self.backend.empty((rows, MAX_BIASED), dt) for dt in (I64, F32, F32))  # ids, values, raw
        # structured outputs' token masks, a bit a token (4.9 MB at 256 rows of 151,936 tokens): allocated here, so
        # the start-up's sizing counts it, though only masked slots' graphs read it (their capture is lazy)
        self.token_mask = self.backend.empty((rows, mask_words(c.vocab_size)), np.int32)
        # the split sampler's scratch (CUDA: the NumPy body is one draw either way)
        split = flags().sampler == "split" and self.backend.name == "cuda"
        self.split = split_scratch(self.backend, rows, SPLIT_MAX) if split else ()  # each slot views its share
        # Each request's last sampled id, by its request slot (async scheduling: the next step's input token)
        self.last_sampled = self.backend.empty((max_num_seqs,), I64)
        self.backend.copy_h2d(self.last_sampled, np.zeros(max_num_seqs, I64))
        # The bypass lane has no free lists to pre-grow: every get is a driver allocation, which a
        # global-mode capture refuses. Graphs are off there; the lane exists for real lifetimes.
        self.is_enabled = enabled and flags().cudagraph and self.backend.can_capture and not self.pool.is_bypass
        self.stream = stream or self.backend.new_stream()  # the engine's one compute stream
        # sampled ids come back on a copy stream (with async scheduling, on the compute stream: see Readback)
        self.readback = Readback(self.backend, self.stream, on_compute=async_readback)
        self.uploads = Uploads(self.backend, self.stream)  # step inputs go up from pinned buffers
        self.slots: dict[SlotKey, Slot] = {}  # one per key: its graph, inputs and outputs
        self.last_slot: Slot | None = None
        self.num_eager = self.num_captures = self.num_replays = 0
        self._last_rows = 0
        self.token_ladder = token_ladder(max_num_batched_tokens)  # prefill buckets (vt/engine/worker/piecewise.py)
        self.buckets: dict[int, Bucket] = {}
        self.carry: dict[str, Tensor] = {}  # the buckets' persistent carry, allocated at the first prefill
        self.num_prefill_eager = self.num_prefill_captures = self.num_prefill_replays = 0
        self._quiet = False  # capture_all: one progress line per tenth, not one per graph

    # ---- public -----------------------------------------------------------------------------
    def capture_all(self, kinds: tuple[tuple[int, bool], ...] = ((1, False),), prefill: bool = True) -> int:
        """Captures now every decode key of these (tokens per row, speculative) kinds, at every rung of the
        ladder and every width bucket, and every prefill bucket: each on dummy inputs that write no KV (slot
        -1) and read only the trash block, run cold once for its demand and then captured, as a first use
        would. Returns how many graphs it took; graphs off, none (the eager path needs no warming)."""
        if not self.is_enabled:
            return 0
        widths = width_ladder(self.min_width, self.max_width)
        keys: list[SlotKey] = []
        for q, spec in kinds:
            for S, w in ((S, w) for S in self._rungs(q, spec) for w in widths):
                short_step = w * self.kv.block_size > LONG_CONTEXT_KEYS  # a short prefill's rows (runner._runs_whole)
                if q == 1 and not spec and self._apart(S, w):  # decode rows and short steps' rows apart
                    keys += ([(S, q, spec, w, False, False)] * (S <= self.ladder[-1])
                             + [(S, q, spec, w, True, False)] * short_step)
                elif S <= self.ladder[-1] or short_step:  # rows above the decode ladder: short steps only
                    keys.append((S, q, spec, w, False, False))
        buckets = self.token_ladder if prefill else []
        gc.collect()  # what is already dead goes now, outside any capture (captures run with the collector off)
        total, t0, self._quiet = len(keys) + len(buckets), time.monotonic(), True
        log.info("capturing %d graphs (%d decode keys, %d prefill buckets)", total, len(keys), len(buckets))
        try:
            for i, key in enumerate(keys):
                while not self._slot(key).is_captured:
                    self.step(self._dummy_decode(key), spec=key[2])
                self._progress(i + 1, total, t0)
            for j, T in enumerate(buckets):
                while not self._bucket(T).is_captured:
                    self._dummy_prefill(self._bucket(T))
                self._progress(len(keys) + j + 1, total, t0)
        finally:
            self._quiet = False
        log.info("captured %d graphs in %.1f s; they hold %.1f MiB (their buffers and pinned temporaries)",
                 total, time.monotonic() - t0, self.graph_bytes() / 2**20)
        return total

    def _apart(self, rows: int, width: int) -> bool:
        """Whether a step of rows sharing sequences (a short prefill run whole) needs a graph apart from a decode
        step's at this shape: where the model's decode attention would write each row's KV itself (the rope
        variant's precondition is one token a sequence), or where such rows attend together (the model's
        rows_kernel). Asked at every step, so a model's flag is never stale."""
        attends_with_rope = getattr(self.model, "attends_with_rope", None)
        rope = bool(attends_with_rope is not None and attends_with_rope(rows, width, self.kv.block_size))
        return rope or getattr(self.model, "rows_kernel", None) is not None

    def _rungs(self, q: int, spec: bool) -> list[int]:
        return self.rows_ladder if q == 1 and not spec else self.ladder

    def graph_bytes(self) -> int:
        """Device bytes the graphs keep: the slots' and buckets' buffers, the shared outputs, and the pool
        blocks pinned as their temporaries."""
        own = [t for slot in self.slots.values() for t in slot.buffers()]
        own += [self.logits, self.hidden, self.hist, self.hist_raw, *self.bias, self.token_mask, *self.split,
                self.last_sampled,
                *self.carry.values()]
        own += [t for b in self.buckets.values() for t in (b.inputs, b.token_row, b.tiles, b.tables) if t is not None]
        pinned = {blk for slot in self.slots.values() for blk in slot.pinned}
        pinned |= {blk for b in self.buckets.values() for blk in b.pinned}
        return sum(t.nbytes for t in own) + sum(blk.nbytes for blk in pinned)

    def _progress(self, done: int, total: int, t0: float) -> None:
        if done == total or done % max(1, total // 10) == 0:
            log.info("captured %d/%d graphs (%.1f s)", done, total, time.monotonic() - t0)

    def _dummy_decode(self, key: SlotKey) -> DecodeInputs:
        S, q, _, width, shared = key[:5]
        trash = self.kv.num_blocks
        return DecodeInputs(np.zeros(S * q, I64), np.zeros(S * q, I64), np.full(S * q, -1, I64),
                            np.full((S, width), trash, I64), q=q, rows_share_sequences=shared)

    def _dummy_meta(self, T: int) -> tuple[list[tuple[int, int, int, list[int]]], list[int]]:
        """T tokens of sequences no longer than max_model_len (positions stay inside the model's), their tables
        all trash blocks: the per-sequence metadata and the positions."""
        bs, longest = self.kv.block_size, self.max_width * self.kv.block_size
        if self.max_model_len:
            longest = min(longest, self.max_model_len)
        meta = [(row0, min(longest, T - row0), 0, [self.kv.num_blocks] * -(-min(longest, T - row0) // bs))
                for row0 in range(0, T, longest)]
        return meta, [p for _, n, _, _ in meta for p in range(n)]

    def _dummy_prefill(self, bucket: Bucket) -> None:
        """A step of the bucket's size on dummy sequences (_dummy_meta), no KV written."""
        T = bucket.num_tokens
        meta, positions = self._dummy_meta(T)
        with self.backend.use_stream(self.stream):
            self.pool.mark_step_boundary()
            bucket.stage(self.backend, [0] * T, positions, [-1] * T, meta)
            self._run_bucket(bucket)

    def dummy_eager_prefill(self, T: int) -> None:
        """A step of T tokens larger than every bucket, as the engine runs one (eager, unsplit), on dummy
        sequences, no KV written; its logits released (the profile run's largest step)."""
        meta, positions = self._dummy_meta(T)
        last = np.cumsum([n for _, n, _, _ in meta]) - 1
        inputs = (np.zeros(T, I64), np.asarray(positions, I64), np.full(T, -1, I64), meta, last.astype(I64))
        with self.backend.use_stream(self.stream):
            self.pool.mark_step_boundary()
            self.pool.release(run_prefill(self.model, self.kv, inputs))

    def step(self, inp: DecodeInputs, spec: bool = False) -> StepResult:
        """Runs one decode step (forward and sampler); returns the sampled ids of its B*q rows."""
        return self.step_async(inp, spec)()

    def step_async(self, inp: DecodeInputs, spec: bool = False) -> Callable[[], StepResult]:
        """Launches the step and its read-back; the returned call waits for the ids (vt/engine/worker/readback.py)."""
        with self.backend.use_stream(self.stream):  # staging, replay and read-back stay in order
            return self._step(inp, spec)

    def prefill(self, seqs: list[tuple], all_rows: list[int] | tuple = (), num_decode: int = 0,
                feed: np.ndarray | None = None) -> Tensor:
        """A prefill step (whole prompts or chunks of them): the logits `prefill_logits` would return, in a
        pool tensor the caller releases, computed through the piecewise graph of the smallest token bucket
        that holds the step; the final norm and LM head run eagerly on its logit rows. feed: for each of the
        first num_decode tokens, the request slot of `last_sampled` it is read from on the device (-1: staged)."""
        inputs = prefill_inputs(seqs, self.kv, all_rows)
        ids, positions, slots, meta, rows = inputs
        fed = feed if feed is not None and (feed >= 0).any() else None
        if len(ids) > self.token_ladder[-1]:  # larger than the largest bucket: the eager forward, unsplit
            return run_prefill(self.model, self.kv, inputs, num_decode,
                               before=None if fed is None else lambda tokens: self._feed(tokens, fed))
        with self.backend.use_stream(self.stream):
            self.pool.mark_step_boundary()
            bucket = self._bucket(next(t for t in self.token_ladder if t >= len(ids)))
            bucket.stage(self.backend, ids, positions, slots, meta, num_decode)
            if fed is not None:
                self._feed(bucket.fb.input_ids, fed)
            self._run_bucket(bucket)
            return self._head(bucket, rows)

    def _feed(self, tokens: Tensor, feed: np.ndarray) -> None:
        """tokens[i] = last_sampled[feed[i]] where feed[i] >= 0, on the device, before the forward reads them."""
        src = self.pool.empty((len(feed),), I64)
        self.backend.copy_h2d(src, feed.astype(I64))
        self.backend.feed_tokens(tokens.view((len(feed),)), src, self.last_sampled)
        self.pool.release(src)

    def keep(self, ids: Tensor, dst: np.ndarray) -> None:
        """last_sampled[dst[i]] = ids[i] where dst[i] >= 0: a prefill's sampled ids, where the next step's decode
        rows read them (async scheduling)."""
        with self.backend.use_stream(self.stream):
            idx = self.pool.empty((len(dst),), I64)
            self.backend.copy_h2d(idx, dst.astype(I64))
            self.backend.keep_sampled(ids.view((len(dst),)), idx, self.last_sampled)
            self.pool.release(idx)

    def last_logits(self) -> np.ndarray:
        """The last step's logits [B*q, vocab] after penalties and bans: a diagnostic copy for tests; the
        engine never reads logits back."""
        assert self.last_slot is not None and self._last_rows
        with self.backend.use_stream(self.stream):
            return self.backend.copy_d2h(self.last_slot.logits)[: self._last_rows]

    def _step(self, inp: DecodeInputs, spec: bool) -> Callable[[], StepResult]:
        _check_inputs(inp)
        self.pool.mark_step_boundary()
        B, rungs = inp.block_tables.shape[0], self._rungs(inp.q, spec)
        if B > rungs[-1] or inp.q > self.max_q:
            raise GraphInputMismatch(f"{B} rows x q={inp.q}: above {rungs[-1]} rows x max_q={self.max_q}, the "
                                     f"driver's output buffers")
        S = next(s for s in rungs if s >= B)
        width = width_bucket(inp.block_tables.shape[1], self.min_width)
        if width > self.max_width:
            raise GraphInputMismatch(f"a block table {inp.block_tables.shape[1]} blocks wide: above the driver's "
                                     f"{self.max_width} (max_model_len)")
        masked = inp.sampling is not None and inp.sampling.token_mask is not None
        slot = self._slot((S, inp.q, spec, width, inp.rows_share_sequences and self._apart(S, width), masked))
        self._stage(slot, inp)
        if slot.demand is None or not self.is_enabled:
            self._run_cold(slot)
        elif slot.graph is None:
            self._capture(slot)
        else:
            if self.backend.is_sanitizing:
                self.pool.check_idle(slot.pinned, f"the graph of slot {slot.key}")
            slot.graph.replay(self.stream)
            slot.num_replays += 1
            self.num_replays += 1
        self._sample_general(slot)
        self.last_slot, self._last_rows = slot, B * inp.q
        return self._read(slot, B * inp.q, inp.sampling is not None and inp.sampling.wants_logprobs)

    def _read(self, slot: Slot, n: int, logprobs: bool) -> Callable[[], StepResult]:
        """The slot's outputs are persistent: nothing writes them again before the next step's replay."""
        outs = [slot.out_ids.view((n,))] + ([slot.lp_vals.view((n, NLP)), slot.lp_ids.view((n, NLP))]
                                            if logprobs else [])
        pending = self.readback.start(outs)
        return lambda: StepResult(*pending.wait())

    # ---- prefill buckets --------------------------------------------------------------------
    def _bucket(self, num_tokens: int) -> Bucket:
        if not self.carry:
            self.carry = carry_buffers(self.backend, self.model, self.token_ladder[-1])
        if num_tokens not in self.buckets:
            self.buckets[num_tokens] = Bucket(self, num_tokens)
        return self.buckets[num_tokens]

    def _run_bucket(self, bucket: Bucket) -> None:
        if bucket.demand is None or not self.is_enabled:
            bucket.run_eager()
            bucket.demand = bucket.demand or self.pool.step_demand_profile()
            self.num_prefill_eager += 1
        elif bucket.graph is None:
            graph = BreakableGraph(self.backend, self.stream, before_segment=lambda i: self._pregrow_bucket(bucket),
                                   recording=self.pool.recording)
            graph.capture(bucket.pieces)  # raises (destroyed) if a segment's capture failed
            bucket.graph, bucket.pinned = graph, graph.used  # the segments' temporaries, not the breaks'
            self.pool.pin(graph.used)
            self.num_prefill_captures += 1
        else:
            if self.backend.is_sanitizing:
                self.pool.check_idle(bucket.pinned, f"the piecewise graph of {bucket.num_tokens} tokens")
            bucket.graph.replay()
            bucket.num_replays += 1
            self.num_prefill_replays += 1

    def _pregrow_bucket(self, bucket: Bucket) -> None:
        assert bucket.demand is not None
        self._pregrow(bucket.demand)  # before EVERY segment's capture, unconditionally

    def _pregrow(self, demand: dict[int, int]) -> None:
        """What a capture must find ready: the free lists of its demand profile, and every collective's
        lazy setup (NCCL's first enqueue of a kind allocates: inside a capture, global mode refuses it)."""
        self.pool.pregrow_for_capture(demand)
        group = getattr(self.model, "group", None)
        if group is not None:
            group.warm_up()

    def head_rows(self, rows: np.ndarray) -> Tensor:
        """The LM head on these rows of the smallest bucket's last step (start-up's warm-up of the eager head)."""
        with self.backend.use_stream(self.stream):
            return self._head(self._bucket(self.token_ladder[0]), rows)

    def _head(self, bucket: Bucket, rows: np.ndarray) -> Tensor:
        b, pool = self.backend, self.pool
        idx = pool.empty((len(rows),), I64)
        b.copy_h2d(idx, rows)
        logits = pool.empty((len(rows), self.model.cfg.vocab_size), F32)
        self.model.head(ForwardBatch(bucket.fb.input_ids, bucket.fb.positions, bucket.fb.slot_mapping, True,
                                     logits_rows=idx), bucket.carry, logits)
        pool.release(idx)
        return logits

    # ---- slots ------------------------------------------------------------------------------
    def _slot(self, key: SlotKey) -> Slot:
        # Graphs off: one slot per shape all the same, run eagerly every step (same padding, same kernels).
        slot = self.slots.get(key)
        if slot is None:
            slot = self.slots[key] = Slot(self, key)
        return slot

    def _retire(self, slot: Slot) -> None:
        if slot.graph is not None:
            slot.graph.destroy()
            self.pool.unpin(slot.pinned)
        for t in slot.buffers():
            self.backend.free(t.buffer)

    def _stage(self, slot: Slot, inp: DecodeInputs) -> None:
        """Host -> the slot's persistent inputs, outside any graph, in one copy. Padding rows are inert:
        slot -1 (no KV write), position 0, and a block-table row of trash blocks."""
        S, q = slot.key[:2]
        n, B, W = inp.tokens.shape[0], inp.block_tables.shape[0], inp.block_tables.shape[1]
        tokens, positions, slots, _, feed_src, keep_dst = slot.staged[: ROW_INPUTS * S * q].reshape(ROW_INPUTS, S * q)
        tokens[:n], tokens[n:] = inp.tokens, 0
        positions[:n], positions[n:] = inp.positions, 0
        slots[:n], slots[n:] = inp.slots, -1
        feed_src[:n], feed_src[n:] = (inp.feed_src if inp.feed_src is not None else -1), -1
        keep_dst[:n], keep_dst[n:] = (inp.keep_dst if inp.keep_dst is not None else -1), -1
        base = ROW_INPUTS * S * q
        tables = slot.staged[base : base + S * slot.width].reshape(S, slot.width)
        tables.fill(self.kv.num_blocks)
        tables[:B, :W] = inp.block_tables
        if slot.key[4]:  # rows sharing sequences: a run of one table is one token_row (the rows kernel's runs)
            slot.staged[3 * S * q : 4 * S * q] = shared_token_rows(inp.block_tables, S)
        rows = inp.sampling if inp.sampling is not None else pack([], n, 0)
        iparams = slot.staged[base + S * slot.width : base + S * slot.width + S * q * NI].reshape(S * q, NI)
        iparams[:n], iparams[n:] = rows.iparams, GREEDY_PADDING  # padding: greedy, reads nothing
        slot.staged_floats[:n], slot.staged_floats[n:] = rows.fparams, 0.0
        slot.general = bool(slot.split) and needs_general(rows.fparams, rows.iparams, self.model.cfg.vocab_size)
        self.uploads.upload(slot.inputs, slot.staged)
        if slot.token_mask is not None:  # a masked slot's step: padding rows all ones (no grammar)
            assert rows.token_mask is not None
            mask = np.full(slot.token_mask.shape, -1, np.int32)
            mask[:n] = rows.token_mask
            self.uploads.upload(slot.token_mask, mask)
        if rows.hist is not None:
            if rows.hist.shape[1] > slot.hist_width:
                raise GraphInputMismatch(f"penalty history of {rows.hist.shape[1]} tokens; the slot holds "
                                         f"{slot.hist_width}")
            hist = np.zeros((S * q, slot.hist_width), I64)
            hist[:n, : rows.hist.shape[1]] = rows.hist
            self.uploads.upload(slot.hist, hist)
        if rows.bias_ids is not None and rows.bias_vals is not None:  # rows without a bias read none of it
            W = rows.bias_ids.shape[1]
            if W > MAX_BIASED:
                raise GraphInputMismatch(f"logit bias of {W} tokens; the slot holds {MAX_BIASED}")
            for dst, src, dt in ((slot.bias_ids, rows.bias_ids, I64), (slot.bias_vals, rows.bias_vals, F32)):
                padded = np.zeros((S * q, MAX_BIASED), dt)
                padded[:n, :W] = src
                self.uploads.upload(dst, padded)

    def _forward(self, slot: Slot) -> None:
        fb = ForwardBatch(slot.tokens, slot.positions, slot.slots, False, token_row=slot.token_row,
                          block_tables=slot.block_tables, tokens_per_row=0 if slot.key[4] else slot.key[1],
                          rows_share_sequences=slot.key[4])
        self.backend.feed_tokens(slot.tokens, slot.feed_src, self.last_sampled)
        self.model.forward(fb, self.kv, slot.logits, slot.hidden)
        if slot.token_mask is not None:  # structured outputs: the grammars' masks before the sampler reads a row
            self.backend.mask_tokens(slot.logits, slot.token_mask)
        self.backend.launch(sample_tokens, *self._sampler_args(slot), *slot.split, general=False)
        self.backend.keep_sampled(slot.out_ids, slot.keep_dst, self.last_sampled)

    @staticmethod
    def _sampler_args(slot: Slot) -> tuple[Tensor, ...]:
        return (slot.logits, slot.fparams, slot.iparams, slot.hist, slot.hist_raw, slot.bias_ids, slot.bias_vals,
                slot.bias_raw, slot.out_ids, slot.lp_vals, slot.lp_ids)

    def _sample_general(self, slot: Slot) -> None:
        """After a step's graph (or its cold run): the split sampler's general passes for the rows the graph left
        at -2 (top-k above KMAX, top-p alone), then their ids kept for the next step's feed. Only when the step
        has such a row: the graph itself carries two launches of the sampler, not twelve."""
        if slot.general:
            self.backend.launch(sample_general, *self._sampler_args(slot), *slot.split)
            self.backend.keep_sampled(slot.out_ids, slot.keep_dst, self.last_sampled)

    def _run_cold(self, slot: Slot) -> None:
        self._forward(slot)
        slot.demand = self.pool.step_demand_profile()
        self.num_eager += 1

    def _capture(self, slot: Slot) -> None:
        assert slot.demand is not None
        t0 = time.monotonic()
        self._pregrow(slot.demand)  # before EVERY capture, unconditionally
        scope = GraphCaptureScope(self.backend, self.stream, enabled=True)
        with self.pool.recording() as used, scope:
            self._forward(slot)
        if scope.capture_failed:
            assert scope.error is not None
            raise scope.error  # the capture executed nothing: its outputs are garbage
        slot.graph = scope.graph
        slot.pinned = used
        self.pool.pin(used)  # the graph's temporaries outlive drains for as long as the graph lives
        self.num_captures += 1
        assert slot.graph is not None
        log.log(logging.DEBUG if self._quiet else logging.INFO,
                "captured a graph for %s rows x q=%s%s, width %s, in %.0f ms", slot.key[0], slot.key[1],
                 " (speculative)" if slot.key[2] else "", slot.width, 1e3 * (time.monotonic() - t0))
        slot.graph.replay(self.stream)
