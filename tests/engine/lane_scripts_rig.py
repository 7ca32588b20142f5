"""Runs scripts/prefix-ttft on the CPU backend with tiny-qwen3, as test_lane_prefix_ttft_anatomy.py and
test_lane_prefix_ttft_profile.py do (not a test module)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def prefix_ttft(tmp_path: Path, *flags: str, graphs: str = "1") -> subprocess.CompletedProcess:
    # graphs on or off whatever the lane's own flags (the pool-bypass lane captures none)
    env = {**os.environ, "VT_CUDAGRAPH": graphs, "VT_POOL_BYPASS": "0"}
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "prefix-ttft"), "--model", "tiny-qwen3",
                           "--backend", "cpu", "--rounds", "3", *flags, "--out", str(tmp_path)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env=env)


def prefix_ttft_row(tmp_path: Path, *flags: str) -> tuple[str, dict]:
    r = prefix_ttft(tmp_path, *flags)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout, json.loads((tmp_path / "prefix-ttft.json").read_text())
