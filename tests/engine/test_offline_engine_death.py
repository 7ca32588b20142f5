"""The offline LLM's engine core process dying: mid-batch it fails the batch with EngineDeadError instead of a
hang; while starting (a script without a main guard) it is a typed error that names the guard. Apart from
test_offline_engine_process.py (the outputs, a refused prompt)."""

from __future__ import annotations

import os
import signal
import threading
import time

from tests.helpers import ends_within
from vt import LLM, SamplingParams
from vt.errors import EngineDeadError

KW = dict(model="tiny-qwen3", backend="cpu", max_model_len=256, num_blocks=128)


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
