"""The engine's own streams under the CPU stream simulator (backends/streams.py): the compute stream, the
read-back copy stream (vt/engine/worker/readback.py) and every graph, with side work as late as legal or in a
seeded random order. Same tokens as a plain run, and no race."""

from __future__ import annotations

import pytest

from backends.streams import in_order, seeded, side_streams_late
from seams.lanes import is_bypass_lane
from vt.engine.front.llm import LLM
from vt.engine.sample.params import SamplingParams
from vt.errors import StreamRace

PROMPTS = [{"prompt_token_ids": [5 + i, 17, 99, 3 * i + 1] * (2 + i % 3)} for i in range(12)]
PARAMS = [SamplingParams(max_tokens=6 + i % 5, temperature=0.0 if i % 2 else 0.8, seed=i, ignore_eos=True,
                         logprobs=2 if i == 3 else None) for i in range(12)]
# the compute stream is the host's program order (what it allocates and releases follows it): the seeded
# schedule shuffles and holds back the other streams around it
POLICIES = {"in order": lambda s: in_order, "side streams late": side_streams_late,
            "seeded 3": lambda s: seeded(3, primary=s)}


def _run(llm: LLM) -> list[list[int]]:
    out = []
    for i in range(0, len(PROMPTS), 3):  # in waves: the buckets come round again
        out += [o.outputs[0].token_ids for o in llm.generate(PROMPTS[i : i + 3], PARAMS[i : i + 3])]
    return out


@pytest.fixture(scope="module")
def plain() -> list[list[int]]:
    return _run(LLM("tiny-qwen3", max_model_len=128, num_blocks=64, max_num_batched_tokens=40))


@pytest.mark.parametrize("policy", list(POLICIES))
def test_the_engine_is_race_free_and_unchanged_under_every_schedule(policy: str, plain: list[list[int]]) -> None:
    llm = LLM("tiny-qwen3", max_model_len=128, num_blocks=64, max_num_batched_tokens=40)  # chunked prefills too
    runner = llm.engine.runner
    order = runner.backend.simulate_streams(POLICIES[policy](runner.stream))
    try:
        got = _run(llm)
    except StreamRace as race:
        pytest.fail(f"a race in the engine: {race}")
    assert got == plain, "the same tokens as without the simulator"
    copies = order.done.get(runner.decoder.readback.stream.id, 0)
    graphs = runner.decoder.num_replays > 0 and runner.decoder.num_prefill_replays > 0
    assert copies > 0 and (graphs or is_bypass_lane()), (
        "non-vacuity: the read-back stream carried copies, and decode and prefill graphs replayed")


def test_prefills_replay_piecewise_graphs_in_the_engine() -> None:
    """The engine's prefills go through the driver's token buckets: captured once per bucket, then replayed."""
    llm = LLM("tiny-qwen3", max_model_len=128, num_blocks=64, max_num_batched_tokens=40)
    assert _run(llm)
    d = llm.engine.runner.decoder
    if is_bypass_lane():  # no graphs without free lists to pre-grow: the buckets still run, eagerly
        assert d.num_prefill_eager > 0 and d.num_prefill_captures == 0
        return
    assert d.num_prefill_captures >= 1 and d.num_prefill_replays >= 1, (
        f"{d.num_prefill_captures} captures, {d.num_prefill_replays} replays of prefill buckets")
