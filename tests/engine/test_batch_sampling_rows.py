"""A decode step's sampling rows are slices of the input batch's columns (issue 28: no per-request loop on the
hot path), set once when a request joins and moved with its row. Whatever rows the requests sit in after others
leave and join and the batch condenses, each row samples with its own request's parameters at its own output
position: checked at every decode step against rows built from the requests themselves by the sampler's
reference packer (`pack`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.helpers import guarding
from vt import LLM, SamplingParams
from vt.engine.sample.sampler import FIELDS_I, RowSpec, SamplingRows, pack

NUM_HIST, NUM_BIAS, NUM_BANNED = (FIELDS_I.index(f) for f in ("num_hist", "num_bias", "num_banned"))


def _params(i: int) -> SamplingParams:
    """Six requests that differ in every field a row carries; they finish at different steps."""
    return SamplingParams(temperature=0.5 + 0.1 * i, top_p=0.95 - 0.05 * i, top_k=3 + i, min_p=0.01 * i, seed=100 + i,
                          max_tokens=4 + 3 * i, min_tokens=min(i, 3), ignore_eos=i % 2 == 0,
                          stop_token_ids=[60 + i] if i % 3 else [], presence_penalty=0.5 if i % 3 == 0 else 0.0,
                          logit_bias={7 + i: 1.5, 9: -2.0} if i % 2 else None, logprobs=(i % 3) or None)


def _expected(engine: Any, req_ids: list[str], width: int) -> SamplingRows:
    """The rows as the requests define them: output position = tokens generated so far, EOS and stop ids banned
    until min_tokens, the history only where a penalty reads it."""
    runner, specs = engine.runner, []
    for rid in req_ids:
        r = engine.requests[rid]
        p, counter = r.params, len(r.output_ids)
        banned = () if counter >= p.min_tokens else (*(() if p.ignore_eos else runner.eos_ids), *p.stop_token_ids)
        specs.append(RowSpec(p.temperature, p.top_p, p.top_k, p.min_p, p.repetition_penalty, p.presence_penalty,
                             p.frequency_penalty, runner.states[rid].seed, counter,
                             0 if p.logprobs is None else p.logprobs + 1, r.all_ids if p.has_penalties else None,
                             len(r.prompt_ids), tuple(dict.fromkeys(banned)), bias=p.biased_tokens,
                             allowed=p.allowed_token_ids is not None))
    return pack(specs, len(specs), width)


def _same(got: SamplingRows, want: SamplingRows) -> None:
    np.testing.assert_array_equal(got.fparams, want.fparams, "the float parameters of each row")
    fields = len(FIELDS_I)
    np.testing.assert_array_equal(got.iparams[:, :fields], want.iparams[:, :fields], "seed, output position, counts")
    for i, n in enumerate(want.iparams[:, NUM_BANNED]):  # the sampler reads the first num_banned
        np.testing.assert_array_equal(got.iparams[i, fields : fields + n], want.iparams[i, fields : fields + n])
    assert (got.hist is None) == (want.hist is None), "history staged exactly when a row is penalized"
    if want.hist is not None:
        for i, n in enumerate(want.iparams[:, NUM_HIST]):
            np.testing.assert_array_equal(got.hist[i, :n], want.hist[i, :n], f"row {i}'s history")
    if want.bias_ids is not None:
        for i, n in enumerate(want.iparams[:, NUM_BIAS]):
            np.testing.assert_array_equal(got.bias_ids[i, :n], want.bias_ids[i, :n], f"row {i}'s biased tokens")
            np.testing.assert_array_equal(got.bias_vals[i, :n], want.bias_vals[i, :n], f"row {i}'s biases")


def test_every_decode_row_samples_with_its_own_requests_parameters_as_rows_move() -> None:
    llm = LLM("tiny-qwen3", backend="cpu", max_model_len=128, num_blocks=64, max_num_seqs=4)
    engine = llm.engine
    runner, driver = engine.runner, engine.runner.decoder
    steps: list[tuple[list[str], dict[str, int], SamplingRows, SamplingRows]] = []
    launch, decode, decoding = driver.step_async, runner._decode, []

    def spy_decode(req_ids: list[str]) -> Any:
        decoding[:] = req_ids
        return decode(req_ids)

    def spy_launch(inputs: Any) -> Any:
        want = _expected(engine, decoding, inputs.block_tables.shape[1] * runner.kv.block_size)
        steps.append((list(decoding), dict(runner.batch.row_of), inputs.sampling, want))
        return launch(inputs)

    runner._decode, driver.step_async = spy_decode, spy_launch
    for i in range(6):  # four rows: the last two join as the first leave, into the holes they leave
        engine.add_request([20 + i, 21, 22 + 2 * i], _params(i))
    while engine.has_unfinished():
        engine.step()

    rows_seen: dict[str, set[int]] = {}
    for req_ids, row_of, got, want in steps:
        _same(got, want)
        for rid in req_ids:
            rows_seen.setdefault(rid, set()).add(row_of[rid])
    assert len(steps) >= 10 and len(rows_seen) == 6, f"non-vacuity: {len(steps)} decode steps over {len(rows_seen)}"
    assert any(len(rows) > 1 for rows in rows_seen.values()), f"non-vacuity: no request moved rows {rows_seen}"
    banning = [want.iparams[:, NUM_BANNED].any() for _, _, _, want in steps]
    assert any(banning) and not all(banning), "non-vacuity: min_tokens bans held, then lifted"


def test_a_plain_decode_step_stages_its_inputs_in_one_pinned_copy() -> None:
    """Tokens, positions, KV slots, block tables and both sampler parameter arrays: one upload a decode step;
    a penalized row's history is a second (non-vacuity: the count sees uploads)."""
    llm = LLM("tiny-qwen3", backend="cpu", max_model_len=128, num_blocks=64, max_num_seqs=4)
    engine, uploads = llm.engine, llm.engine.runner.decoder.uploads
    copies: list[int] = []
    upload, decode = uploads.upload, engine.runner._decode

    def counted(*args: Any) -> Any:
        copies[-1] += 1
        return upload(*args)

    def step(req_ids: list[str]) -> Any:
        copies.append(0)
        return decode(req_ids)

    uploads.upload, engine.runner._decode = counted, step
    plain = SamplingParams(temperature=0.7, seed=1, max_tokens=6, ignore_eos=True)
    llm.generate([[5, 6, 7], [8, 9]], plain)
    plain_steps, copies[:] = list(copies), []
    llm.generate([[5, 6, 7]], SamplingParams(temperature=0.7, seed=1, max_tokens=6, ignore_eos=True,
                                             repetition_penalty=1.3))
    assert len(plain_steps) >= 4 and set(plain_steps) == {1}, f"copies per plain decode step: {plain_steps}"
    assert set(copies) == {2}, f"non-vacuity: a penalized step stages its history too: {copies}"


def test_a_decode_row_past_its_kv_blocks_is_refused_by_name_not_written_to_the_trash_block() -> None:
    """The decode inputs read KV slots from the batch's padded block tables, whose unused entries name the trash
    block: a row whose position outran its blocks (a broken growth invariant) must fail loudly, naming it."""
    from vt.engine.core.kv_manager import TARGET
    from vt.errors import EngineInvariantError

    llm = LLM("tiny-qwen3", backend="cpu", max_model_len=128, num_blocks=64, max_num_seqs=4)
    engine, runner = llm.engine, llm.engine.runner
    engine.add_request([5, 6, 7], SamplingParams(temperature=0, max_tokens=40, ignore_eos=True))
    engine.add_request(list(range(10, 30)), SamplingParams(temperature=0, max_tokens=40, ignore_eos=True))
    for _ in range(3):
        engine.step()
    rids = [r for r in runner.batch.requests[: runner.batch.num_rows] if r is not None]
    runner._decode(rids)()  # non-vacuity: as the engine keeps them, the rows decode
    row = runner.batch.row_of[rids[1]]
    runner.batch.num_blocks[row, TARGET] -= 1  # its table now ends before its last token's block
    # unchecked, the slot lookup reads past the trimmed table (IndexError) or into its trash-block padding (no error)
    with (guarding("a decode row past its KV blocks is refused by name", IndexError),
          pytest.raises(EngineInvariantError, match=rf"request {rids[1]}: position \d+ is past its \d+ KV blocks")):
        runner._decode(rids)
