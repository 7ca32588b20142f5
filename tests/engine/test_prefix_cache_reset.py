"""LLM.reset_prefix_cache, vLLM's: every cached prefix forgotten (after new weights, or between benchmark runs), so a
prompt sent again is computed again; refused, with the cache as it was, while a request holds KV blocks. In this
process and through the engine core's process."""

from __future__ import annotations

import pytest

from vt import LLM, SamplingParams

PROMPT = list(range(20, 68))  # three whole blocks of 16
GREEDY = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)


@pytest.mark.parametrize("engine_process", [False, True], ids=["in-process", "engine-process"])
def test_after_a_reset_a_prompt_sent_again_is_computed_again(engine_process: bool) -> None:
    llm = LLM("tiny-qwen3", backend="cpu", max_model_len=256, num_blocks=64, engine_process=engine_process)
    try:
        served = [llm.generate([PROMPT], GREEDY)[0].num_cached_tokens for _ in range(2)]
        assert served == [0, len(PROMPT) - 1], f"non-vacuity: the cache serves the prompt sent again ({served})"
        assert llm.reset_prefix_cache() is True, "nothing runs: the reset is done"
        again = llm.generate([PROMPT], GREEDY)[0].num_cached_tokens
        assert again == 0, f"after the reset the cache served {again} prompt tokens"
    finally:
        if engine_process:
            llm.engine.close()


def test_a_reset_while_a_request_holds_blocks_is_refused_and_the_cache_kept() -> None:
    llm = LLM("tiny-qwen3", backend="cpu", max_model_len=256, num_blocks=64)
    engine = llm.engine
    llm.generate([PROMPT], GREEDY)
    engine.add_request(list(range(100, 140)), SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    engine.step()  # admitted: it holds blocks
    assert engine.kv_manager.tables, "non-vacuity: a request holds KV blocks"
    assert llm.reset_prefix_cache() is False, "a reset while a request holds blocks is refused"
    while engine.has_unfinished():
        engine.step()
    served = llm.generate([PROMPT], GREEDY)[0].num_cached_tokens
    assert served == len(PROMPT) - 1, f"the refused reset kept the cache: it served {served} prompt tokens"


def test_a_reset_through_the_core_takes_only_its_own_answer() -> None:
    """Each reset through the engine core is numbered and takes only its own answer: an answer an earlier call left
    (a caller that stopped waiting) is never read as a later call's. Here a stale refusal sits in the queue."""
    llm = LLM("tiny-qwen3", backend="cpu", max_model_len=256, num_blocks=64, engine_process=True)
    try:
        llm.generate([PROMPT], GREEDY)
        llm.engine.core._resets.put((0, False))  # call 0's refusal, never taken
        assert llm.reset_prefix_cache() is True, "an answer left by an earlier call was read as this one's"
        assert llm.generate([PROMPT], GREEDY)[0].num_cached_tokens == 0, "non-vacuity: the reset was done"
    finally:
        llm.engine.close()


def test_a_reset_waiting_on_a_core_that_dies_ends_in_engine_dead_error() -> None:
    """A core killed while the front waits on its answer (stopped first, so the reset is sent and waits; then
    killed): the reset raises EngineDeadError within seconds, never a wait on an answer that cannot come. Then a
    reset on the dead core fails the same way at once."""
    import os
    import signal
    import threading

    from vt.errors import EngineDeadError

    llm = LLM("tiny-qwen3", backend="cpu", max_model_len=256, num_blocks=64, engine_process=True)
    core = llm.engine.core
    try:
        os.kill(core.proc.pid, signal.SIGSTOP)
        raised: list[BaseException] = []

        def reset() -> None:
            try:
                core.reset_prefix_cache()
            except BaseException as e:  # noqa: BLE001 - what the call ended in, checked below
                raised.append(e)

        waiter = threading.Thread(target=reset, daemon=True)
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive(), "non-vacuity: the reset waits on the stopped core"
        os.kill(core.proc.pid, signal.SIGKILL)
        waiter.join(10)  # the reader sees the end of file within about a second
        assert not waiter.is_alive(), "the reset waited on a dead core"
        reset()
        assert [type(e) for e in raised] == [EngineDeadError, EngineDeadError], raised
    finally:
        llm.engine.close()
