"""The offline LLM with its engine core in a process of its own (`LLM(engine_process=True)`, vLLM's default for
its offline LLM): the outputs of the in-process engine, a refused prompt refuses its batch and loses nothing
after it, and a core that dies fails the batch with EngineDeadError instead of a hang."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tests.helpers import ends_within
from vt import LLM, SamplingParams
from vt.errors import ConfigError, EngineDeadError, RequestError

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


def test_a_core_that_dies_fails_the_batch_instead_of_a_hang() -> None:
    llm = LLM(**KW, engine_process=True)
    proc = llm.engine.core.proc
    killed_mid_batch: list[bool] = []

    def kill_once_the_batch_steps() -> None:
        deadline = time.monotonic() + 30
        while llm.engine.num_steps < 1 and time.monotonic() < deadline:  # the batch is in the core's steps
            time.sleep(0.005)
        killed_mid_batch.append(llm.engine.num_steps >= 1)
        os.kill(proc.pid, signal.SIGKILL)

    threading.Thread(target=kill_once_the_batch_steps, daemon=True).start()
    box = ends_within(lambda: llm.generate(["a b c"] * 4, SamplingParams(temperature=0, max_tokens=240,
                                                                           ignore_eos=True)), 8)
    assert killed_mid_batch == [True], "non-vacuity: the core was killed mid-batch"
    assert isinstance(box.get("error"), EngineDeadError), box


def test_engine_process_must_be_a_bool() -> None:
    with pytest.raises(ConfigError, match="engine_process"):
        LLM(**KW, engine_process="yes")  # type: ignore[arg-type]


def test_a_core_that_dies_while_starting_is_a_typed_error_that_names_the_main_guard(tmp_path) -> None:
    """A script without `if __name__ == "__main__":` makes the spawned core re-run it and die while starting."""
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "no_guard.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
                      "from vt import LLM\nLLM('tiny-qwen3', backend='cpu', engine_process=True, max_model_len=128, "
                      "num_blocks=32)\n")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    last = p.stderr.strip().splitlines()[-1]
    assert p.returncode != 0, "non-vacuity: the core could not start"
    assert last.startswith("vt.errors.WorkerDied: the engine core process exited") and "__main__" in last, last
