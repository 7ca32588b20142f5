"""The GPU lane's measurement scripts that build a model (scripts/gpu-idle, tpot-split, replay-ab, c1-anatomy,
prefix-ttft, largest-step, profile-step) refuse an unknown model or shape as vt's CLI does: exit 2 and one line
naming the problem, never a traceback. No GPU needed: each refusal comes before any device. The lane scripts'
other refusals and behaviour are in the test_lane_*.py files beside this one, apart by script: the mutation
runner's --whole-files mode runs a mutant's gate files whole."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CASES = {  # name: (arguments, what the line must name)
    "unknown-model": (["--model", "/nonexistent/ckpt", "--backend", "cpu"], "CheckpointError: unknown model"),
    "unknown-shape": (["--shape", "9B", "--backend", "cpu"], "invalid choice: '9B'"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("script", ["gpu-idle", "tpot-split", "replay-ab", "c1-anatomy", "prefix-ttft", "largest-step",
                                    "profile-step"])
def test_a_lane_script_refuses_bad_input_with_one_typed_line(script: str, case: str) -> None:
    args, names = CASES[case]
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / script), *args], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith("usage:") and not x.startswith("  ")]
    assert (r.returncode, "Traceback" in r.stderr) == (2, False), r.stderr[-2000:]
    assert len(lines) == 1 and names in lines[0], r.stderr
