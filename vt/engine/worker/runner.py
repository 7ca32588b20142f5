"""The model runner: `execute(SchedulerOutput) -> RunnerOutput`.

It mirrors the scheduled requests in its input batch (tokens, and per KV group the block tables the KV
manager handed out), runs the model (prefill eager; decode through the graph driver), lets the proposer
propose, and samples on the device (vt/engine/sample/sampler.py): only sampled ids (and requested logprobs)
come back to the host. It never touches a Request: only the engine's update step appends tokens,
checks stops and finishes requests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from models import kernels as K
from models.base import Model
from models.decoder import short_over_long_context
from vt.backend import Tensor
from vt.engine.config import EngineConfig
from vt.engine.core.kv_manager import TARGET
from vt.engine.core.outputs import RunnerOutput, SchedulerOutput
from vt.engine.sample.params import ResolvedParams
from vt.engine.sample.rejection import accept
from vt.engine.sample.sampler import (
    FIELDS_I,
    NF,
    NI,
    NLP,
    RowSpec,
    SamplingRows,
    logprobs_of,
    pack,
    sample_tokens,
    spread,
    stack,
)
from vt.engine.sample.structured import Matcher, mask_words
from vt.engine.spec_decode.proposers import Proposer, SpecRequest
from vt.engine.worker.graph_driver import DecodeInputs, GraphDriver, StepResult
from vt.engine.worker.input_batch import InputBatch
from vt.errors import EngineInvariantError

I64, F32 = np.int64, np.float32
COUNTER, NUM_PROMPT, NUM_HIST, NUM_BANNED, NUM_BIAS = (FIELDS_I.index(f) for f in
                                                       ("counter", "num_prompt", "num_hist", "num_banned", "num_bias"))
NON_FINITE = "non-finite logits (the model's, or a repetition penalty pushed one past float32's range)"


@dataclass(slots=True)
class Chunk:
    """A prefill this step: tokens [start, start + length) of a request (a fork computes nothing). Those before
    kv_held already have their KV in the cache (a cached prefix that holds the last token too): they are computed
    for their logits and write no KV, so a block the cache shares is never written."""

    req_id: str
    start: int
    length: int
    fork_of: str | None
    kv_held: int = 0

    @property
    def end(self) -> int:
        return self.start + self.length


@dataclass(slots=True)
class RequestState:
    params: ResolvedParams
    seed: int
    num_prompt_tokens: int


class ModelRunner:
    def __init__(self, model: Model, cfg: EngineConfig, proposer: Proposer | None = None, stream=None,
                 eos_ids: tuple[int, ...] = (), grammars: Callable[[], Any] | None = None) -> None:
        self.model = model
        self.cfg = cfg
        self.backend = model.backend
        self.kv = model.make_kv_cache(cfg.num_blocks, cfg.block_size)
        self.batch = InputBatch(cfg.max_num_seqs, cfg.max_model_len, cfg.max_blocks_per_seq, cfg.num_blocks,
                                cfg.num_kv_groups)
        self.stream = stream or self.backend.new_stream()  # one compute stream: prefill and decode stay ordered
        self.decoder = GraphDriver(model, self.kv, cfg.max_num_seqs, enabled=not cfg.enforce_eager,
                                   stream=self.stream, max_q=1 + (proposer.k if proposer is not None else 0),
                                   max_num_batched_tokens=cfg.max_num_batched_tokens,
                                   max_model_len=cfg.max_model_len, async_readback=bool(cfg.async_scheduling))
        self.proposer = proposer
        self.eos_ids = eos_ids
        self.states: dict[str, RequestState] = {}
        # structured outputs: the tokenizer's grammar compiler (the engine's), and each constrained request's matcher
        self.grammars = grammars
        self.matchers: dict[str, Matcher] = {}
        # Async scheduling: the free slots of the decoder's device array of last sampled ids; a request holds
        # one while it runs (batch.feed_slot, moving with its row), beside how many of its sampled tokens the
        # host has not been sent yet (batch.ahead)
        self._free_slots = list(range(cfg.max_num_seqs - 1, -1, -1))
        self.sampled_out: tuple[Tensor, Tensor, Tensor] | None = None  # the prefill sampler's outputs
        self._retired: list[Tensor] = []  # sampler outputs outgrown while a step in flight read them back
        self.num_fed_mixed = 0  # mixed steps whose decode rows read a token the host did not hold yet
        self.num_whole_prefills = 0  # steps with prefill tokens run whole as a captured decode step (_prefill_whole)
        if cfg.startup_capture or (cfg.startup_capture is None and self.backend.name == "cuda"):
            self.capture_graphs()

    def capture_graphs(self) -> int:
        """Every graph a step can use, captured at start-up (never on a request's time): the decode keys
        (plain, and verification when speculating), the prefill buckets, and the draft model's. On every
        rank alike: the dummy steps' collectives pair up. Returns how many graphs."""
        kinds = ((1, False),) + (((1 + self.proposer.k, True),) if self.proposer is not None else ())
        n = self.decoder.capture_all(kinds)
        if n:
            self._warm_eager()
        draft = getattr(self.proposer, "driver", None)
        n += draft.capture_all(((1, True),)) if draft is not None else 0
        if n:
            self.backend.end_start_up()  # every captured shape is tuned; a later new shape is a request's time
        return n

    def _warm_eager(self) -> None:
        """A prefill step's eager tail once (the LM head's row gather, the logit rows' gather, the sampler with
        logprobs): CuPy compiles its own kernels on first use, which cost the H200's first request 134 ms."""
        with self.backend.use_stream(self.stream):
            logits = self.decoder.head_rows(np.zeros(2, I64))
            self._sample_eager(self._gather(logits, [1]), pack([RowSpec(1.0, num_logprobs=2)], 1, 1))()

    # ---- the input batch follows the scheduler output --------------------------------------
    def _update_states(self, so: SchedulerOutput) -> None:
        """Leavers leave holes; new requests fill holes first; cached ones grow; then decoding rows move
        to the front and the rest condense (rows move: nothing may be keyed by a row)."""
        b = self.batch
        gone = [rid for rid in (*so.finished_ids, *so.preempted_ids) if rid in b.row_of]
        for rid in gone:
            self._free_slots.append(int(b.feed_slot[b.row_of[rid]]))
            b.remove(rid)
            del self.states[rid]
            self.matchers.pop(rid, None)
        if self.proposer is not None:
            self.proposer.drop(gone)
        for req in so.new_reqs:
            row = b.add(req.req_id, req.token_ids, req.block_ids)
            self.states[req.req_id] = st = RequestState(req.params, req.seed, req.num_prompt_tokens)
            b.feed_slot[row] = self._free_slots.pop()
            if req.params.grammar is not None:  # a resumed request's matcher catches up on its output again
                if self.grammars is None:
                    raise EngineInvariantError(f"request {req.req_id} has a structured output; the runner was "
                                               "given no grammar compiler")
                self.matchers[req.req_id] = self.grammars().matcher(req.params.grammar)
            self._fix_sampling(row, st)
        ones = [c for c in so.cached_reqs if len(c.new_token_ids) == 1]  # a decode step's: one token each
        if ones:
            rows = b.rows_of([c.req_id for c in ones])
            b.token_ids[rows, b.num_tokens[rows]] = [c.new_token_ids[0] for c in ones]
            b.num_tokens[rows] += 1
            b.ahead[rows] = np.maximum(b.ahead[rows] - 1, 0)  # sampled tokens the host now holds
        for c in so.cached_reqs:
            if len(c.new_token_ids) > 1:  # a verified speculation's, or a resumed request's
                row = b.row_of[c.req_id]
                b.append_tokens(c.req_id, c.new_token_ids)
                b.ahead[row] = max(0, b.ahead[row] - len(c.new_token_ids))
            if any(c.new_block_ids):  # most decode steps add none
                for group, ids in enumerate(c.new_block_ids):
                    if ids:
                        b.append_blocks(c.req_id, group, ids)
        new = {r.req_id for r in so.new_reqs}
        self.batch.reorder_decode_first(lambda rid: rid not in new)  # rows past their prefill first
        self.batch.condense()

    # ---- one step ---------------------------------------------------------------------------
    def execute(self, so: SchedulerOutput) -> RunnerOutput:
        return self.launch(so)()

    def launch(self, so: SchedulerOutput) -> Callable[[], RunnerOutput]:
        """Stages and launches the step; the returned call waits for its sampled ids and returns them (the
        engine's async scheduling launches the next step before it calls it)."""
        self._update_states(so)
        out = RunnerOutput()
        with self.backend.use_stream(self.stream):
            # a new request starts behind its cached prefix; a fork computes nothing
            sched = so.num_scheduled_tokens
            chunks = [Chunk(r.req_id, r.first_computed, len(r.token_ids) if r.fork_of else sched[r.req_id], r.fork_of,
                            r.num_cached) for r in so.new_reqs]
            new_ids = {r.req_id for r in so.new_reqs}
            chunks += [Chunk(rid, start, so.num_scheduled_tokens[rid], None) for rid, start in so.prefill_chunks.items()
                       if rid not in new_ids]
            waits = []  # the prefill's ids are waited for after the decode is launched: its staging overlaps
            cached = {c.req_id for c in so.cached_reqs if c.req_id not in so.prefill_chunks}
            decodes = [rid for rid in (self.batch.requests[i] for i in self.batch.rows()) if rid in cached]
            speculating = bool(decodes) and self.proposer is not None and any(so.spec_tokens.get(r) for r in decodes)
            num_decode = 0
            if chunks and decodes and not speculating:  # one forward: a decode row is a one-token chunk at its end
                chunks = [Chunk(rid, self._position(rid), 1, None) for rid in decodes] + chunks
                num_decode, decodes = len(decodes), []
            if chunks:
                ends = [c for c in chunks if c.end == self._length(c.req_id)]  # they sample their next token
                done = [c.req_id for c in ends]
                waits.append((done, self._prefill(chunks, ends, out, num_decode)))
                self._sampled(done)
                if self.proposer is not None and so.new_reqs:
                    self.proposer.add(self.batch, so.new_reqs)
            if speculating:
                self._speculate(decodes, so, out)
                self._sampled(decodes)
            elif decodes:
                waits.append((decodes, self._decode(decodes)))
                self._sampled(decodes)

        # read now: by the time the results are collected, the next step may have dropped a request's state
        asked: dict[str, int] = {}
        held: dict[str, Matcher] = {}  # structured outputs: each sampled token goes to its grammar when read back
        for rid in (rid for ids, _ in waits for rid in ids):
            if (n := self.states[rid].params.logprobs) is not None:
                asked[rid] = n
            if rid in self.matchers:
                held[rid] = self.matchers[rid]

        def collect() -> RunnerOutput:
            for req_ids, wait in waits:
                self._collect(req_ids, 1, wait(), out, asked)
            for rid, matcher in held.items():
                if rid in out.sampled and (why := matcher.accept(out.sampled[rid][0])) is not None:
                    del out.sampled[rid]
                    out.errors[rid] = why
            return out

        return collect

    def _sampled(self, req_ids: list[str]) -> None:
        """These requests' next tokens are being sampled: the host holds them once the engine sends them back."""
        self.batch.ahead[self.batch.rows_of(req_ids)] += 1

    # ---- sampling rows ----------------------------------------------------------------------
    def _fix_sampling(self, row: int, st: RequestState) -> None:
        """A joining request's sampler row, as far as its parameters fix it (the bans listed whether or not
        min_tokens still holds them; the step counts them in or out)."""
        p = st.params
        banned = (*(() if p.ignore_eos else self.eos_ids), *p.stop_token_ids) if p.min_tokens else ()
        spec = RowSpec(p.temperature, p.top_p, p.top_k, p.min_p, p.repetition_penalty, p.presence_penalty,
                       p.frequency_penalty, st.seed, 0, 0 if p.logprobs is None else p.logprobs + 1, None,
                       st.num_prompt_tokens, tuple(dict.fromkeys(banned)), bias=p.biased_tokens,
                       allowed=p.allowed_token_ids is not None)
        fixed = pack([spec], 1, 1)  # refuses more bans than the sampler holds
        b = self.batch
        b.sampling_f[row], b.sampling_i[row] = fixed.fparams[0], fixed.iparams[0]
        b.min_tokens[row], b.penalized[row] = p.min_tokens, spec.has_penalties
        b.bans_sequences[row] = bool(p.sequence_bans)
        b.constrained[row] = p.grammar is not None

    def _sampling(self, rows: np.ndarray, hist_width: int, offsets: np.ndarray | int = 0) -> SamplingRows:
        """The sampler's rows for these batch rows (a row may repeat: verifying, `offsets` positions later),
        sliced from the batch's columns. A draw is keyed by (seed, output position): nothing about the row."""
        b = self.batch
        fp, ip = b.sampling_f[rows], b.sampling_i[rows]
        num_tokens = b.num_tokens[rows]
        counter = num_tokens - ip[:, NUM_PROMPT] + b.ahead[rows] + offsets
        ip[:, COUNTER] = counter
        ip[:, NUM_BANNED] *= counter < b.min_tokens[rows]  # min_tokens reached: EOS and stop ids drawable
        hist = bias_ids = bias_vals = None
        penalized = b.penalized[rows]
        if penalized.any():  # the prompt and output so far, for the penalties
            ip[:, NUM_HIST] = np.where(penalized, num_tokens, 0)
            hist = np.zeros((len(rows), hist_width), I64)
            width = min(hist_width, b.token_ids.shape[1])
            hist[:, :width] = b.token_ids[rows, :width]
        banning = b.bans_sequences[rows]
        if ip[:, NUM_BIAS].any() or banning.any():  # few rows, each its own list; most steps have none
            bias_ids, bias_vals = self._bias_rows(rows, ip, banning, offsets)
        constrained = b.constrained[rows]
        mask = self._token_masks(rows, constrained) if constrained.any() else None
        return SamplingRows(fp, ip, hist, bias_ids, bias_vals, mask)

    def _token_masks(self, rows: np.ndarray, constrained: np.ndarray) -> np.ndarray:
        """Each row's next-token mask [n, words] int32: its grammar's after the output the host holds (all ones
        without a grammar). A constrained request never steps ahead of the host (reads_its_output)."""
        b = self.batch
        mask = np.full((len(rows), mask_words(self.model.cfg.vocab_size)), -1, np.int32)
        for i in np.flatnonzero(constrained):
            row = int(rows[i])
            rid = b.requests[row]
            assert rid is not None
            if b.ahead[row]:
                raise EngineInvariantError(f"request {rid}: its grammar's mask needs the {b.ahead[row]} token(s) "
                                           "sampled ahead of the host")
            matcher = self.matchers[rid]
            matcher.catch_up(b.token_ids[row, self.states[rid].num_prompt_tokens : b.num_tokens[row]])
            matcher.fill(mask[i])
        return mask

    def _bias_rows(self, rows: np.ndarray, ip: np.ndarray, banning: np.ndarray,
                   offsets: np.ndarray | int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The rows' bias lists as [n, W] ids and values (None when every list is empty): logit_bias,
        allowed_token_ids and one-token bad words as the request fixed them, then the bad words each row's output
        so far leads into (its NUM_BIAS set to its list's length)."""
        b = self.batch
        lists = {int(i): self.states[b.requests[rows[i]]].params.biased_tokens  # type: ignore[index]
                 for i in np.flatnonzero(ip[:, NUM_BIAS])}
        ahead = np.broadcast_to(np.asarray(offsets, I64), rows.shape)  # tokens past the host's (verify rows)
        for i in np.flatnonzero(banning):
            lists[int(i)] = self._with_sequence_bans(int(rows[i]), int(ahead[i]))
            ip[i, NUM_BIAS] = len(lists[int(i)])
        filled = {i: biased for i, biased in lists.items() if biased}
        if not filled:
            return None, None
        bias_ids = np.zeros((len(rows), max(len(v) for v in filled.values())), I64)
        bias_vals = np.zeros(bias_ids.shape, F32)
        for k, biased in filled.items():
            bias_ids[k, : len(biased)], bias_vals[k, : len(biased)] = zip(*biased)
        return bias_ids, bias_vals

    def _with_sequence_bans(self, row: int, offset: int) -> tuple[tuple[int, float], ...]:
        """Row's bias list with the last tokens of the bad words its output so far leads into at -inf. The host
        must hold that output: the engine steps such a request without overlap, and never speculates with it."""
        b = self.batch
        rid = b.requests[row]
        assert rid is not None
        if b.ahead[row] or offset:
            raise EngineInvariantError(f"request {rid} bans bad words of several tokens, but the host does not hold "
                                       f"its last {int(b.ahead[row]) + offset} tokens")
        st, end = self.states[rid], int(b.num_tokens[row])
        tail = max(st.num_prompt_tokens, end - st.params.ban_context)  # the output's last tokens a ban reads
        bans = st.params.bans_after(b.token_ids[row, tail:end].tolist())
        if not bans:
            return st.params.biased_tokens
        biased = dict(st.params.biased_tokens)
        allowed = st.params.allowed_token_ids is not None
        biased.update((t, -np.inf) for t in bans if not allowed or t in biased)
        return tuple(sorted(biased.items()))

    def _collect(self, req_ids: list[str], q: int, res: StepResult, out: RunnerOutput,
                 asked: dict[str, int]) -> None:
        """Row i*q of the result is request i's next token (non-speculative steps: q = 1); asked: the logprobs
        count of those that asked, as it was at launch."""
        ids = res.ids[: len(req_ids) * q : q].tolist()
        out.sampled.update(zip(req_ids, ([t] for t in ids)))
        if min(ids, default=0) < 0:  # these requests fail; their neighbours carry on
            for rid, tok in zip(req_ids, ids):
                if tok < -1:  # -1 is a row whose logits were not finite; below it, a row no sampler pass drew
                    raise EngineInvariantError(f"request {rid}'s row was never drawn (sampler id {tok})")
                if tok < 0:
                    del out.sampled[rid]
                    out.errors[rid] = NON_FINITE
        for i, rid in enumerate(req_ids):
            if rid in asked and rid in out.sampled:
                self._logprobs(rid, res, [i * q], out, asked[rid])

    def _logprobs(self, rid: str, res: StepResult, rows: list[int], out: RunnerOutput, n: int | None) -> None:
        if n is not None and res.logprob_vals is not None and res.logprob_ids is not None:
            out.logprobs[rid] = [logprobs_of(res.logprob_vals[r], res.logprob_ids[r], n) for r in rows]

    def _prefill(self, chunks: list[Chunk], ends: list[Chunk], out: RunnerOutput,
                 num_decode: int = 0) -> Callable[[], StepResult]:
        """One forward over every chunk (a whole prompt, a piece of it over the KV of the pieces before, or, for
        the first num_decode, a decoding request's one new token: the decode kernel attends those),
        then the sampler on the last-token logits of the chunks that end their sequence, in transient pool
        tensors; for prompt logprobs, also on each prompt position with the prompt's next token forced. A
        forked sample (n > 1) computes nothing: it copies its leader's partial prompt block and samples the
        leader's logits row with its own seed. Returns the wait for the sampled rows of `ends` (the chunks that
        end their sequence), in order (which also files the prompt logprobs)."""
        computed = {c.req_id: c for c in chunks if c.fork_of is None}
        scored = {rid for rid, c in computed.items() if self._scores_prompt(c)}
        if self._runs_whole(chunks, scored, num_decode):
            return self._prefill_whole(chunks, ends, num_decode)
        b = self.batch
        # a decode row whose last token the host does not hold yet (async scheduling) reads it on the device
        decoding = b.rows_of([c.req_id for c in chunks[:num_decode]])
        feed = np.where(b.ahead[decoding] > 0, b.feed_slot[decoding], -1)
        self.num_fed_mixed += bool((feed >= 0).any())
        seqs = [(b.tokens(rid)[c.start : c.end].tolist() or [0], b.blocks(rid), c.start, c.kv_held)
                for rid, c in computed.items()]
        logits = self.decoder.prefill(seqs, [i for i, rid in enumerate(computed) if rid in scored], num_decode, feed)
        first = dict(zip(computed, np.cumsum([0] + [c.length if rid in scored else 1 for rid, c in computed.items()])))
        rows = [int(first[c.fork_of or c.req_id]) + (c.length - 1 if (c.fork_of or c.req_id) in scored else 0)
                for c in ends]
        forced: list[RowSpec] = []
        spans = {}
        for rid in scored:  # row j of a scored chunk predicts the prompt's token j + 1
            c, toks = computed[rid], self.batch.tokens(rid)
            upto = min(c.end, self.states[rid].num_prompt_tokens - 1)
            k = self.states[rid].params.prompt_logprobs or 0
            spans[rid] = (len(rows), upto - c.start, k)
            rows += range(int(first[rid]), int(first[rid]) + upto - c.start)
            forced += [RowSpec(0.0, num_logprobs=k + 1, forced=int(t)) for t in toks[c.start + 1 : upto + 1]]
        self._fork([c for c in chunks if c.fork_of is not None])
        width = max(self._length(c.req_id) for c in chunks)
        ending = b.rows_of([c.req_id for c in ends])
        specs = self._sampling(ending, width)
        if forced:
            specs = stack(specs, pack(forced, len(forced), width))
        keep = np.full(specs.num_rows, -1, I64)
        keep[: len(ends)] = b.feed_slot[ending]  # the next step's decode reads them there (async scheduling)
        sampled = self._sample_eager(self._gather(logits, rows), specs, keep)

        def wait() -> StepResult:
            res = sampled()
            for rid, (at, n, k) in spans.items():
                assert res.logprob_vals is not None and res.logprob_ids is not None
                scored_rows = [logprobs_of(res.logprob_vals[r], res.logprob_ids[r], k) for r in range(at, at + n)]
                out.prompt_logprobs[rid] = (computed[rid].start + 1, scored_rows)
            return res

        return wait

    def _runs_whole(self, chunks: list[Chunk], scored: set[str], num_decode: int) -> bool:
        """Few prefill tokens over a long context (a prefix-cache hit's tail, a late chunk), beside the decode rows:
        the step runs as one captured decode step, a row a token, when its rows fit the driver's ladder. Not for a
        fork (it computes nothing but samples its leader's row) or a prompt scored for its logprobs (every row)."""
        prefill = chunks[num_decode:]
        return (not scored and all(c.fork_of is None for c in prefill)
                and sum(c.length for c in chunks) <= self.decoder.rows_ladder[-1]
                and short_over_long_context([(c.start, c.length) for c in prefill]))

    def _prefill_whole(self, chunks: list[Chunk], ends: list[Chunk], num_decode: int) -> Callable[[], StepResult]:
        """The step as a decode step of one token a row: row t attends keys 0..its position through its chunk's
        block table (the decode kernel's causal mask is the position), and the graph samples every row; only
        the last row of each chunk that ends its sequence is kept, in `ends` order. The other rows are greedy
        padding that keeps nothing."""
        b, bs = self.batch, self.kv.block_size
        rows = b.rows_of([c.req_id for c in chunks])
        lengths = np.fromiter((c.length for c in chunks), I64, len(chunks))
        owner = np.repeat(np.arange(len(chunks)), lengths)  # token -> its chunk
        firsts = np.cumsum(lengths) - lengths
        starts = np.fromiter((c.start for c in chunks), I64, len(chunks))
        positions = starts[owner] + np.arange(len(owner)) - firsts[owner]
        tables = b.tables_of(rows, TARGET)[owner]
        token_rows = rows[owner]
        held = np.fromiter((c.kv_held for c in chunks), I64, len(chunks))
        slots = np.where(positions < held[owner], -1, self._kv_slots(token_rows, positions, tables))
        # a decode row's token the host does not hold yet (async scheduling) is read on the device from its slot
        feed = np.full(len(owner), -1, I64)
        decoding = rows[:num_decode]
        feed[firsts[:num_decode]] = np.where(b.ahead[decoding] > 0, b.feed_slot[decoding], -1)
        self.num_fed_mixed += bool((feed >= 0).any())
        tokens = np.where(feed >= 0, 0, b.token_ids[token_rows, np.minimum(positions, b.token_ids.shape[1] - 1)])
        index = {id(c): i for i, c in enumerate(chunks)}
        at = np.fromiter((firsts[index[id(c)]] + c.length - 1 for c in ends), I64, len(ends))  # the sampled rows
        ending = b.rows_of([c.req_id for c in ends])
        keep = np.full(len(owner), -1, I64)
        keep[at] = b.feed_slot[ending]  # the next step's decode rows read them there (async scheduling)
        sampling = spread(self._sampling(ending, tables.shape[1] * bs), at, len(owner))
        inputs = DecodeInputs(tokens, positions, slots, tables, sampling=sampling, feed_src=feed, keep_dst=keep,
                              rows_share_sequences=True)
        wait = self.decoder.step_async(inputs)
        self.num_whole_prefills += 1

        def picked() -> StepResult:
            res = wait()
            return StepResult(res.ids[at], *(None if a is None else a[at] for a in (res.logprob_vals, res.logprob_ids)))

        return picked

    def _scores_prompt(self, c: Chunk) -> bool:
        """Prompt logprobs come from the prefill of the prompt, chunk by chunk (a request preempted before
        its first token scores its prompt again on the recompute; the engine replaces those positions)."""
        st = self.states[c.req_id]
        return (st.params.prompt_logprobs is not None and len(self.batch.tokens(c.req_id)) == st.num_prompt_tokens
                and c.start < st.num_prompt_tokens - 1)

    def _fork(self, forks: list[Chunk]) -> None:
        b, bs = self.backend, self.kv.block_size
        for r in forks:
            n = r.length
            assert r.fork_of is not None
            if n % bs:  # the partial last block: the fork's own copy, which it goes on writing
                src, dst = int(self.batch.blocks(r.fork_of)[n // bs]), int(self.batch.blocks(r.req_id)[n // bs])
                for cache in (*self.kv.k, *self.kv.v):
                    b.launch(K.copy_block, cache, src=src, dst=dst)

    def _gather(self, logits: Tensor, rows: list[int]) -> Tensor:
        """The sampler's rows, in order, from the prefill's logits (a fork reads its leader's row)."""
        if rows == list(range(logits.shape[0])):
            return logits
        b, pool = self.backend, self.backend.pool
        idx = pool.empty((len(rows),), I64)
        b.copy_h2d(idx, np.asarray(rows, I64))
        out = pool.empty((len(rows), logits.shape[1]), F32)
        b.launch(K.gather_rows, logits, idx, out)
        for t in (idx, logits):
            pool.release(t)
        return out

    def _sample_eager(self, logits: Tensor, rows: SamplingRows,
                      keep: np.ndarray | None = None) -> Callable[[], StepResult]:
        """Samples the rows into the runner's persistent outputs (read back after the host's next work, so no
        pool block the decode graph may reuse) and returns the wait for them. keep: per row, the request slot its
        id is kept at for the next step's feed (-1: none)."""
        b, pool, n = self.backend, self.backend.pool, rows.num_rows
        if n == 0:  # only chunks short of their sequence's end: nothing to sample (and no empty CUDA grid)
            pool.release(logits)
            return lambda: StepResult(np.zeros(0, I64))
        width = rows.hist.shape[1] if rows.hist is not None else 1
        bias_width = rows.bias_ids.shape[1] if rows.bias_ids is not None else 1
        t = {"f": pool.empty((n, NF), F32), "i": pool.empty((n, NI), I64), "h": pool.empty((n, width), I64),
             "hr": pool.empty((n, width), F32), "bi": pool.empty((n, bias_width), I64),
             "bv": pool.empty((n, bias_width), F32), "br": pool.empty((n, bias_width), F32)}
        ids, lv, li = self._sampled_rows(n)
        b.copy_h2d(t["f"], rows.fparams)
        b.copy_h2d(t["i"], rows.iparams)
        b.copy_h2d(t["h"], rows.hist if rows.hist is not None else np.zeros((n, 1), I64))
        if rows.bias_ids is not None and rows.bias_vals is not None:  # else num_bias is 0: never read
            b.copy_h2d(t["bi"], rows.bias_ids)
            b.copy_h2d(t["bv"], rows.bias_vals)
        if rows.token_mask is not None:  # a structured output's grammar, before anything reads the rows
            mask = pool.empty(rows.token_mask.shape, np.int32)
            b.copy_h2d(mask, rows.token_mask)
            b.mask_tokens(logits, mask)
            pool.release(mask)
        b.launch(sample_tokens, logits, *t.values(), ids, lv, li)
        if keep is not None and (keep >= 0).any():
            self.decoder.keep(ids, keep)
        for x in (logits, *t.values()):
            pool.release(x)  # stream-ordered: whatever draws them next runs after the sampler
        pending = self.decoder.readback.start([ids, lv, li] if rows.wants_logprobs else [ids])
        return lambda: StepResult(*pending.wait())

    def _sampled_rows(self, n: int) -> tuple[Tensor, Tensor, Tensor]:
        """Views of n rows of the prefill sampler's persistent outputs (ids, logprob values and ids), grown
        by doubling; the old ones are freed at the next growth, when no step in flight reads them any more."""
        if self.sampled_out is None or self.sampled_out[0].shape[0] < n:
            rows = max(n, 2 * self.sampled_out[0].shape[0] if self.sampled_out else self.cfg.max_num_seqs)
            for old in self._retired:  # retired one growth ago: every read-back of them was waited for since
                self.backend.free(old.buffer)
            self._retired = list(self.sampled_out or ())  # the step in flight may still be reading them back
            self.sampled_out = (self.backend.empty((rows,), I64), self.backend.empty((rows, NLP), F32),
                                self.backend.empty((rows, NLP), I64))
        ids, lv, li = self.sampled_out
        return ids.view((n,)), lv.view((n, NLP)), li.view((n, NLP))

    def _length(self, rid: str) -> int:
        """A request's tokens, counting those sampled but not sent to the host yet."""
        row = self.batch.row_of[rid]
        return int(self.batch.num_tokens[row] + self.batch.ahead[row])

    def _position(self, rid: str) -> int:
        """The last token's position (computed now): past the host's tokens by those sampled but not sent yet."""
        return self._length(rid) - 1

    def _kv_slots(self, rows: np.ndarray, positions: np.ndarray, tables: np.ndarray) -> np.ndarray:
        """The KV slot of each token (batch row rows[t] at positions[t], through tables[t]), or EngineInvariantError
        for a position past its request's blocks."""
        b, bs = self.batch, self.kv.block_size
        short = positions // bs >= b.num_blocks[rows, TARGET]
        if short.any():  # the padded table would hand it the trash block: a KV write lost, silently
            row = int(rows[np.flatnonzero(short)[0]])
            raise EngineInvariantError(f"request {b.requests[row]}: position {int(positions[short][0])} is past its "
                                       f"{int(b.num_blocks[row, TARGET])} KV blocks")
        return tables[np.arange(len(rows)), positions // bs] * bs + positions % bs

    def _decode(self, req_ids: list[str]) -> Callable[[], StepResult]:
        """Every input is a slice of the batch's columns at the decoding rows: no per-request work."""
        b, bs = self.batch, self.kv.block_size
        rows = b.rows_of(req_ids)
        num_tokens, ahead = b.num_tokens[rows], b.ahead[rows]
        pos = num_tokens + ahead - 1
        tables = b.tables_of(rows, TARGET)
        # a token the host does not hold yet (async scheduling) is read on the device from its request's slot
        unsent = ahead > 0
        inputs = DecodeInputs(
            tokens=np.where(unsent, 0, b.token_ids[rows, num_tokens - 1]),
            positions=pos,
            slots=self._kv_slots(rows, pos, tables),
            block_tables=tables,
            sampling=self._sampling(rows, tables.shape[1] * bs),
            feed_src=np.where(unsent, b.feed_slot[rows], -1),
            keep_dst=b.feed_slot[rows],
        )
        return self.decoder.step_async(inputs)

    # ---- speculative decoding ---------------------------------------------------------------
    def _speculate(self, req_ids: list[str], so: SchedulerOutput, out: RunnerOutput) -> None:
        """The target samples every verified position with the request's own (seed, output position)
        draws; proposals are accepted while they equal those samples (vt/engine/sample/rejection.py)."""
        assert self.proposer is not None
        asks = [SpecRequest(rid, self._position(rid), self.states[rid].params)
                for rid in req_ids if so.spec_tokens.get(rid)]
        proposals = self.proposer.propose(self.batch, asks)
        q = self.proposer.k + 1
        res = self._verify(req_ids, {rid: p.tokens for rid, p in proposals.items()})
        for i, rid in enumerate(req_ids):
            sampled = [int(t) for t in res.ids[i * q : (i + 1) * q]]
            if min(sampled) < -1:
                raise EngineInvariantError(f"request {rid}'s rows were not all drawn (sampler ids {sampled})")
            if min(sampled) < 0:
                out.errors[rid] = NON_FINITE
                continue
            toks = accept(sampled, proposals[rid].tokens) if rid in proposals else sampled[:1]
            if rid in proposals:
                self.proposer.accepted(self.batch, rid, self._position(rid), len(toks) - 1)
            out.sampled[rid] = toks
            self._logprobs(rid, res, [i * q + j for j in range(len(toks))], out,  # row j scored token j
                           self.states[rid].params.logprobs)

    def _verify(self, req_ids: list[str], proposals: dict[str, list[int]]) -> StepResult:
        """The target's forward over q = k+1 tokens per request. Rows without proposals carry k inert
        padding tokens (slot -1), so every request shares one shape and one graph."""
        k = self.proposer.k  # type: ignore[union-attr]
        q = k + 1
        toks: list[int] = []
        pos: list[int] = []
        slots: list[int] = []
        for rid in req_ids:
            p0, blocks = self._position(rid), self.batch.blocks(rid)
            last = int(self.batch.tokens(rid)[p0])
            if rid in proposals:
                toks += [last, *proposals[rid]]
                pos += range(p0, p0 + q)
                slots += [self.kv.slot(blocks, p) for p in range(p0, p0 + q)]
            else:
                toks += [last] + [0] * k
                pos += [p0] * q
                slots += [self.kv.slot(blocks, p0)] + [-1] * k
        tables = self.batch.tables(req_ids, TARGET)
        rows = np.repeat(self.batch.rows_of(req_ids), q)  # row i*q + j: request i's token j positions on
        inp = DecodeInputs(np.asarray(toks, I64), np.asarray(pos, I64), np.asarray(slots, I64), tables, q=q,
                           sampling=self._sampling(rows, tables.shape[1] * self.kv.block_size,
                                                   np.tile(np.arange(q), len(req_ids))))
        return self.decoder.step(inp, spec=True)
