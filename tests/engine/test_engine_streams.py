"""The engine's own streams under the CPU stream simulator (backends/streams.py): the compute stream, the
read-back copy stream (vt/engine/readback.py) and every graph, with side work as late as legal or in a
seeded random order. Same tokens as a plain run, and no race."""

from __future__ import annotations

import pytest

from backends.streams import in_order, seeded, side_streams_late
from vt.engine.api import LLM
from vt.engine.sampling import SamplingParams

PROMPTS = [{"prompt_token_ids": [5 + i, 17, 99, 3 * i + 1] * (3 + i)} for i in range(5)]
PARAMS = [SamplingParams(max_tokens=12, temperature=0.0 if i % 2 else 0.8, seed=i, ignore_eos=True,
                         logprobs=2 if i == 3 else None) for i in range(5)]
POLICIES = {"in order": lambda s: in_order, "side streams late": side_streams_late, "seeded 3": lambda s: seeded(3)}


def _run(llm: LLM) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate(PROMPTS, PARAMS)]


@pytest.fixture(scope="module")
def plain() -> list[list[int]]:
    return _run(LLM("tiny-qwen3", max_model_len=128, num_blocks=64, max_num_batched_tokens=40))


@pytest.mark.parametrize("policy", list(POLICIES))
def test_the_engine_is_race_free_and_unchanged_under_every_schedule(policy: str, plain: list[list[int]]) -> None:
    llm = LLM("tiny-qwen3", max_model_len=128, num_blocks=64, max_num_batched_tokens=40)  # chunked prefills too
    runner = llm.engine.runner
    order = runner.backend.simulate_streams(POLICIES[policy](runner.stream))
    assert _run(llm) == plain, "the same tokens as without the simulator"
    copies = order.done.get(runner.decoder.readback.stream.id, 0)
    assert not order.races and copies > 0 and runner.decoder.num_replays > 0, (
        "non-vacuity: the read-back stream carried copies and graphs replayed, and nothing raced")
