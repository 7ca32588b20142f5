"""scripts/replay-ab and scripts/gpu-idle refuse an option they cannot honour (--kernels off CUDA, a --modes entry
they do not know): exit 2 and a line naming it, before any model or device. Apart from test_lane_scripts.py's
model and shape refusals, whose fourteen subprocesses the mutants gated here would otherwise pay where their gate
files run whole (the mutation runner's --whole-files)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_replay_ab_refuses_kernel_times_without_a_gpu_backend() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "replay-ab"), "--kernels", "--backend", "cpu",
                        "--model", "tiny-qwen3"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "--kernels needs --backend cuda" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr


def test_gpu_idle_refuses_a_mode_it_does_not_know() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu-idle"), "--modes", "on,sometimes"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "--modes 'on,sometimes'" in r.stderr, r.stderr[-2000:]
