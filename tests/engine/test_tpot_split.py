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


class _Engine:
    """Steps `per_round` times a round (one prefill step, then decode steps), logging each step."""

    def __init__(self, log: list[str], per_round: int) -> None:
        from types import SimpleNamespace

        self.log, self.per_round, self.left, self.rounds = log, per_round, 0, 0
        self.scheduler = SimpleNamespace(prefill_tokens=0)

    def has_unfinished(self) -> bool:
        return self.left > 0

    def step(self) -> None:
        self.log.append(f"round {self.rounds - 1} step {self.per_round - self.left}")
        self.scheduler.prefill_tokens += self.left == self.per_round  # the round's first step prefills
        self.left -= 1

    def add_round(self) -> list:
        from types import SimpleNamespace

        self.left, self.rounds = self.per_round, self.rounds + 1
        return [SimpleNamespace(output_ids=[0], is_finished=True)]


def test_the_last_round_profiles_the_asked_step_and_no_other(monkeypatch: pytest.MonkeyPatch) -> None:
    """--profile-step N: run_rounds hands the profiler to the last round alone, timed_steps enters it around that
    round's step N alone with the step's work inside, and _profiler starts CuPy's profiler for step N only."""
    import contextlib
    import sys
    from types import ModuleType

    log: list[str] = []
    script = load_script("tpot-split")
    fake = ModuleType("cupyx.profiler")

    @contextlib.contextmanager
    def profile():
        log.append("start")
        yield
        log.append("stop")

    fake.profile = profile  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupyx.profiler", fake)
    monkeypatch.setitem(sys.modules, "cupyx", ModuleType("cupyx"))
    engine = _Engine(log, per_round=3)
    steps = script.run_rounds(engine, lambda: None, engine.add_round, 2, 4, script._profiler(1))
    assert steps == 3, "the last round's step count (main refuses a step past it)"
    assert log == ["round 0 step 0", "round 0 step 1", "round 0 step 2",
                   "round 1 step 0", "start", "round 1 step 1", "stop", "round 1 step 2"], log
    assert log.count("start") == 1, "non-vacuity: the profiler ran"


def test_a_profiled_step_is_refused_on_the_cpu() -> None:
    bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "tpot-split"), "--model", "tiny-qwen3", "--backend",
                          "cpu", "--profile-step", "1"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert bad.returncode == 2 and "--profile-step" in bad.stderr.strip().splitlines()[-1], bad.stderr[-500:]
