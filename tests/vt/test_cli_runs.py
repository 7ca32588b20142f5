"""The `vt` command run as a process: flag values in any case. Apart from test_cli.py (in-process) so a mutant
gated here runs these few processes, not the whole command suite; an unwritable cache directory
(test_cli_cache_dir.py) and the ladder's progress and failures (test_cli_ladders.py) apart again, one file per
mutant's need."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SMALL = ["--max-model-len", "64", "--num-blocks", "16"]


@pytest.mark.parametrize("value, ok", [("True", True), ("OFF", True), ("maybe", False)])
def test_flag_values_are_read_in_any_case_and_bad_ones_named(value: str, ok: bool) -> None:
    cmd = [sys.executable, "-m", "vt.cli", "generate", "--model", "tiny-qwen3", "--prompt", "hi", "--max-tokens",
           "2", *SMALL]
    proc = subprocess.run(cmd, env={**os.environ, "VT_CUDAGRAPH": value}, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    if ok:
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode == 2 and f"VT_CUDAGRAPH='{value}'" in proc.stderr, proc.stderr
