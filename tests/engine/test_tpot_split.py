"""scripts/tpot-split: a request's TPOT window is the steps after its first token up to its last, and the prefill
steps inside it are other prompts' (its own prefill made its first token, so it lies before the window)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import load_script

ROOT = Path(__file__).resolve().parents[2]



def test_a_requests_window_holds_the_later_prompts_prefill_steps_and_not_its_own() -> None:
    # two prompts prefilled in steps 0 and 1 (100 and 60 ms), then decode steps of 5 ms; 4 tokens each:
    # A's tokens come at steps 0, 2, 3, 4 (its window: steps 1-4), B's at steps 1, 2, 3, 5 (window: steps 2-5)
    steps = [(0.100, True), (0.060, True), (0.005, False), (0.005, False), (0.005, False), (0.005, False)]
    row = load_script("tpot-split").split(steps, {0: 0, 1: 1}, {0: 4, 1: 5}, out_len=4)
    assert row["per_request_tpot_ms"] == pytest.approx([(60 + 15) / 3, 20 / 3], abs=1e-3)  # printed to 1 us
    assert row["of_it_prefill_steps_ms"] == pytest.approx((60 / 3 + 0) / 2)  # B's prefill is in A's window only
    assert row["mean_tpot_ms"] == pytest.approx(((60 + 15) / 3 + 20 / 3) / 2)
    assert row["prefill_steps_ms"] == [100.0, 60.0] and row["decode_step_median_ms"] == pytest.approx(5.0)


def test_the_script_runs_on_the_cpu_and_refuses_bad_input_in_one_line() -> None:
    run = [sys.executable, str(ROOT / "scripts" / "tpot-split"), "--model", "tiny-qwen3", "--backend", "cpu"]
    p = subprocess.run([*run, "--prompts", "2", "--prompt-len", "40", "--output-len", "4", "--rounds", "1"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    row = [line for line in p.stdout.splitlines() if line.startswith("| 0 |")]
    assert len(row) == 1 and float(row[0].split("|")[4]) > 0, p.stdout  # a mean TPOT was measured
    bad = subprocess.run([*run, "--output-len", "1"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("tpot-split: error: --prompts")


def test_the_profiled_step_is_the_one_asked_for_and_the_cpu_refuses_it() -> None:
    """--profile-step N: timed_steps enters the profiler's context around step N alone, and the step's own work runs
    inside it (a profiler started around nothing would show no kernels); the CPU backend has no profiler: exit 2."""
    import contextlib
    from types import SimpleNamespace

    log: list[str] = []

    class Engine:
        scheduler = SimpleNamespace(prefill_tokens=0)
        left = 4

        def has_unfinished(self) -> bool:
            return self.left > 0

        def step(self) -> None:
            log.append(f"step {4 - self.left}")
            self.left -= 1

    @contextlib.contextmanager
    def recorder(i: int):
        log.append(f"enter {i}")
        yield
        log.append(f"exit {i}")

    want = 2
    steps, _, _ = load_script("tpot-split").timed_steps(
        Engine(), lambda: None, [], lambda i: recorder(i) if i == want else contextlib.nullcontext())
    assert len(steps) == 4, "non-vacuity: every step ran"
    assert log == ["step 0", "step 1", "enter 2", "step 2", "exit 2", "step 3"], log
    bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "tpot-split"), "--model", "tiny-qwen3", "--backend",
                          "cpu", "--profile-step", "1"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert bad.returncode == 2 and "--profile-step" in bad.stderr.strip().splitlines()[-1], bad.stderr[-500:]
