"""A stream's outputs are cumulative, so a consumer that falls behind reads the newest one and skips the rest,
as vLLM's output collector merges them: under load the server sends fewer, larger chunks instead of a backlog,
and nothing is lost (the last output holds every token; the finished one always arrives)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from vt import LLM, SamplingParams
from vt.engine.config import EngineConfig
from vt.server.async_llm import AsyncLLM, _deliver

KW = dict(model="tiny-qwen3", backend="cpu", max_model_len=128, num_blocks=64)
PROMPT = [5, 6, 7, 8, 9]
N = 24


def test_a_lagging_consumer_reads_merged_outputs_and_loses_nothing() -> None:
    """The consumer takes its first output, then holds the event loop until the engine thread has queued the
    finished output: every output between reaches its stream while no one reads it. No timing decides this."""
    params = SamplingParams(temperature=0, max_tokens=N, ignore_eos=True)
    llm = AsyncLLM(EngineConfig(**KW))
    finished_queued = threading.Event()

    async def consume() -> list:
        loop = asyncio.get_running_loop()
        schedule = loop.call_soon_threadsafe

        def watch(callback: Any, *args: Any) -> asyncio.Handle:
            handle = schedule(callback, *args)
            if callback is _deliver and any(getattr(out, "finished", False) for _, out in args[0]):
                finished_queued.set()
            return handle

        loop.call_soon_threadsafe = watch  # type: ignore[method-assign, assignment]
        outs = []
        async for out in llm.generate(PROMPT, params, "lagging"):
            outs.append(out)
            if len(outs) == 1:
                finished_queued.wait(timeout=8)  # holds the event loop: the engine steps to the end meanwhile
        return outs

    outs = None
    try:
        outs = asyncio.run(asyncio.wait_for(consume(), timeout=5))
    except TimeoutError:
        pass
    finally:
        llm.shutdown()
    if outs is None:  # failed outside the except block: the report names this, not the cancelled wait
        pytest.fail("the finished output never reached the consumer")
    want = LLM(KW["model"], backend="cpu", max_model_len=128, num_blocks=64).generate([PROMPT], params)[0].token_ids
    assert finished_queued.is_set(), "non-vacuity: the engine queued the finished output while the loop was held"
    assert outs[-1].finished and outs[-1].token_ids == want, "the last output holds every token, in order"
    assert len(outs) == 2 and not outs[0].finished, \
        f"the outputs queued behind the first merged into the finished one ({len(outs)} read for {N} tokens)"


def test_outputs_delivered_while_the_consumer_is_away_leave_only_the_newest() -> None:
    """The merge itself, with no timing in it: three steps' outputs reach a stream before its consumer takes one;
    the consumer then reads the newest (the finished one), once."""
    from vt.server.async_llm import _Stream

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
