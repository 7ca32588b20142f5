"""A tensor-parallel worker killed mid-generation fails the engine within a bounded time, by name. Apart
from test_tensor_parallel.py, whose TP runs take a minute."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from vt.engine.front.llm import LLM
from vt.engine.sample.params import SamplingParams
from vt.errors import EngineDeadError, WorkerDied

pytest.importorskip("torch.distributed")


def test_a_killed_worker_fails_the_engine_within_bounded_time_by_name() -> None:
    llm = LLM("tiny-qwen3", tensor_parallel_size=2, max_model_len=2048, num_blocks=256)
    worker = llm.engine.workers.procs[0]
    long = SamplingParams(max_tokens=1500, temperature=0.0, ignore_eos=True)
    caught: dict[str, BaseException] = {}
    started = threading.Event()

    def run() -> None:
        started.set()
        try:
            llm.generate([{"prompt_token_ids": [5, 6, 7]}], long)
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            caught["e"] = e

    t = threading.Thread(target=run)
    t.start()
    assert started.wait(10)
    deadline = time.monotonic() + 30  # mid-generation: a few steps in, however slow the machine
    while llm.engine.num_steps < 4 and t.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert t.is_alive(), "non-vacuity: the request is still generating when the worker dies"
    os.kill(worker.pid, signal.SIGKILL)
    killed = time.monotonic()
    t.join(30)
    took = time.monotonic() - killed
    assert not t.is_alive(), "the engine noticed: no hang"
    assert isinstance(caught.get("e"), WorkerDied), f"a WorkerDied, not {caught.get('e')!r}"
    assert "rank 1" in str(caught["e"]) and "exit code -9" in str(caught["e"])
    assert took < 15, f"found after {took:.1f} s"
    with pytest.raises(WorkerDied):  # and the engine stays refused: no step runs without the shard
        llm.engine.step() if llm.engine.has_unfinished() else llm.engine.workers.check_alive()
    with pytest.raises(EngineDeadError, match="WorkerDied: tensor-parallel rank 1"):  # the LLM too, by its cause
        llm.generate([{"prompt_token_ids": [5, 6, 7]}], SamplingParams(max_tokens=2))
    llm.engine.close()
