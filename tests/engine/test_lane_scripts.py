"""The GPU lane's measurement scripts (scripts/gpu-idle, tpot-split, replay-ab) refuse bad input as vt's CLI does:
exit 2 and one line naming the problem, never a traceback. No GPU needed: each refusal comes before any device."""

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
@pytest.mark.parametrize("script", ["gpu-idle", "tpot-split", "replay-ab"])
def test_a_lane_script_refuses_bad_input_with_one_typed_line(script: str, case: str) -> None:
    args, names = CASES[case]
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / script), *args], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith("usage:") and not x.startswith("  ")]
    assert (r.returncode, "Traceback" in r.stderr) == (2, False), r.stderr[-2000:]
    assert len(lines) == 1 and names in lines[0], r.stderr


def test_replay_ab_refuses_kernel_times_without_a_gpu_backend() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "replay-ab"), "--kernels", "--backend", "cpu",
                        "--model", "tiny-qwen3"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "--kernels needs --backend cuda" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr


def test_gpu_idle_refuses_a_mode_it_does_not_know() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu-idle"), "--modes", "on,sometimes"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "--modes 'on,sometimes'" in r.stderr, r.stderr[-2000:]
