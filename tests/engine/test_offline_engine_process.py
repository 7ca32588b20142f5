"""The offline LLM with its engine core in a process of its own (`LLM(engine_process=True)`, vLLM's default for
its offline LLM): the outputs of the in-process engine, and a refused prompt refuses its batch and loses nothing
after it. (A core that dies: test_offline_engine_death.py, apart so each mutant runs the engine processes its
gates start, not all five.)"""

from __future__ import annotations

import pytest

from tests.helpers import ends_within
from vt import LLM, SamplingParams
from vt.errors import ConfigError, RequestError

KW = dict(model="tiny-qwen3", backend="cpu", max_model_len=256, num_blocks=128)
PROMPTS = ["Hello there", [5, 17, 99, 3] * 3, "Once upon a time", "The cat"]
PARAMS = [SamplingParams(temperature=0, max_tokens=8),
          SamplingParams(temperature=0.8, seed=3, max_tokens=8, n=2, logprobs=2),
          SamplingParams(temperature=0, max_tokens=20, stop=["ain"], include_stop_str_in_output=True),
          SamplingParams(temperature=0, max_tokens=6, prompt_logprobs=1)]


def view(outs: list) -> list:
    return [(o.prompt, o.prompt_token_ids, o.prompt_logprobs,
             [(c.index, c.token_ids, c.text, c.finish_reason, c.stop_reason, c.cumulative_logprob, c.logprobs)
              for c in o.outputs]) for o in outs]


def test_through_the_engine_process_the_outputs_are_the_in_process_engines() -> None:
    llm = LLM(**KW, engine_process=True)
    try:
        got = view(llm.generate(PROMPTS, PARAMS))
        chat = llm.chat([{"role": "user", "content": "hi"}], SamplingParams(temperature=0, max_tokens=5))
    finally:
        llm.engine.close()
    local = LLM(**KW)
    want = view(local.generate(PROMPTS, PARAMS))
    assert got == want
    assert want[2][3][0][4] == "ain" and len(want[1][3]) == 2 and want[3][2], (
        "non-vacuity: a stop string, n = 2 and prompt logprobs are in the comparison")
    assert [c.token_ids for o in chat for c in o.outputs] == \
        [c.token_ids for o in local.chat([{"role": "user", "content": "hi"}],
                                          SamplingParams(temperature=0, max_tokens=5)) for c in o.outputs]


def test_an_offline_batch_reaches_the_core_in_one_message() -> None:
    """A generate call's requests arrive together, so the core's first step holds them all, as the in-process
    engine's does (one at a time, the core could step between them: another first batch, other GEMM shapes, other
    rounding, and a seeded sample drawing another token)."""
    llm = LLM(**KW, engine_process=True)
    sent: list[tuple] = []
    real = llm.engine.core.send
    llm.engine.core.send = lambda msg: (sent.append(msg), real(msg))[1]
    try:
        llm.generate(PROMPTS, PARAMS)
    finally:
        llm.engine.core.send = real
        llm.engine.close()
    adds = [m for m in sent if m[0] in ("add", "batch")]
    assert len(adds) == 1 and adds[0][0] == "batch", f"one message for the batch: {[m[0] for m in adds]}"
    assert [m[0] for m in adds[0][1]] == ["add"] * len(PROMPTS), "every request of the batch in it"


def test_a_refused_prompt_refuses_its_batch_and_loses_nothing_after_it() -> None:
    llm = LLM(**KW, engine_process=True)
    try:
        box = ends_within(lambda: llm.generate(["a b c", [7] * 300], SamplingParams(temperature=0, max_tokens=4)),
                          8)
        assert isinstance(box.get("error"), RequestError) and "300" in str(box["error"]), box
        again = llm.generate(["a b c"], SamplingParams(temperature=0, max_tokens=4))
        assert len(again[0].outputs[0].token_ids) == 4
    finally:
        llm.engine.close()


def test_engine_process_must_be_a_bool() -> None:
    with pytest.raises(ConfigError, match="engine_process"):
        LLM(**KW, engine_process="yes")  # type: ignore[arg-type]
