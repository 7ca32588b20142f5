"""A stream's outputs are cumulative, so a consumer that falls behind reads the newest one and skips the rest,
as vLLM's output collector merges them: under load the server sends fewer, larger chunks instead of a backlog,
and nothing is lost (the last output holds every token; the finished one always arrives)."""

from __future__ import annotations

import asyncio
import time

import pytest

from vt import LLM, SamplingParams
from vt.engine.config import EngineConfig
from vt.server.async_llm import AsyncLLM

KW = dict(model="tiny-qwen3", backend="cpu", max_model_len=128, num_blocks=64)
PROMPT = [5, 6, 7, 8, 9]
N = 24


def test_a_lagging_consumer_reads_merged_outputs_and_loses_nothing() -> None:
    params = SamplingParams(temperature=0, max_tokens=N, ignore_eos=True)
    llm = AsyncLLM(EngineConfig(**KW))

    async def consume() -> list:
        outs = []
        async for out in llm.generate(PROMPT, params, "lagging"):
            outs.append(out)
            time.sleep(0.02)  # holds the event loop: the engine thread steps on meanwhile
        return outs

    try:
        outs = asyncio.run(asyncio.wait_for(consume(), timeout=8))
    except TimeoutError:
        pytest.fail("the finished output never reached the consumer")
    finally:
        llm.shutdown()
    want = LLM(KW["model"], backend="cpu", max_model_len=128, num_blocks=64).generate([PROMPT], params)[0].token_ids
    assert outs[-1].finished and outs[-1].token_ids == want, "the last output holds every token, in order"
    assert all(a.token_ids == outs[-1].token_ids[: len(a.token_ids)] for a in outs), "each output is a prefix"
    assert [len(o.token_ids) for o in outs] == sorted({len(o.token_ids) for o in outs}), "never an older output"
    assert len(outs) < N, f"a consumer that fell behind read merged outputs ({len(outs)} for {N} tokens)"


def test_outputs_delivered_while_the_consumer_is_away_leave_only_the_newest() -> None:
    """The merge itself, with no timing in it: three steps' outputs reach a stream before its consumer takes one;
    the consumer then reads the newest (the finished one), once."""
    from vt.server.async_llm import _deliver, _Stream

    async def run() -> list:
        stream = _Stream(asyncio.get_running_loop())
        outs = [LLM(KW["model"], backend="cpu", max_model_len=128, num_blocks=64).generate(
            [PROMPT], SamplingParams(temperature=0, max_tokens=k, ignore_eos=True))[0] for k in (1, 2, 3)]
        for out in outs:
            _deliver([(stream, out)])
        return [outs, stream.take(), stream.take()]

    outs, first, second = asyncio.run(run())
    assert first is outs[-1], "the newest output replaced the ones not taken"
    assert second is None, "and it is read once"
    assert len({len(o.outputs[0].token_ids) for o in outs}) == 3, "non-vacuity: three different outputs"
