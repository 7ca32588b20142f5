"""The `vt` command run as a process: flag values in any case, an unwritable cache directory, progress lines
off a terminal, a ladder whose requests fail. Apart from test_cli.py (in-process) so a mutant gated here
runs these few processes, not the whole command suite."""

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


def test_an_unwritable_cache_dir_is_one_typed_line(tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a directory cannot be made under a file
    cmd = [sys.executable, "-m", "vt.cli", "generate", "--model", "tiny-qwen3", "--prompt", "hi", *SMALL]
    proc = subprocess.run(cmd, env={**os.environ, "VT_CACHE_DIR": str(blocker / "cache")}, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-1500:]
    assert "vt: error: ConfigError: VT_CACHE_DIR: cannot write the built-in checkpoint" in proc.stderr


def test_long_work_shows_progress_as_plain_lines_off_a_terminal() -> None:
    """Loading, each graph capture and each ladder rung print a line when stderr is no terminal (CI logs)."""
    cmd = [sys.executable, "-m", "vt.cli", "ladder", "--model", "tiny-qwen3", "--concurrency", "1,2",
           "--num-prompts", "2", "--input-len", "4", "--output-len", "3", *SMALL]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr
    assert "vt: loading tiny-qwen3" in err and "vt: loaded tiny-qwen3 in" in err
    from seams.lanes import is_bypass_lane

    assert "vt: captured a graph for 1 rows" in err or is_bypass_lane(), "captures show (no graphs on the bypass lane)"
    assert "vt ladder: c=1 done: 2 requests" in err and "vt ladder: c=2 done: 2 requests" in err


def test_a_ladder_with_failed_requests_says_why() -> None:
    cmd = [sys.executable, "-m", "vt.cli", "ladder", "--model", "tiny-qwen3", "--concurrency", "2", "--num-prompts",
           "2", "--input-len", "40", "--output-len", "2", "--max-model-len", "32", "--num-blocks", "8"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, "a rung with failed requests is no success"
    assert "vt: c=2: 2 request(s) failed: prompt has 40 tokens; max_model_len=32" in proc.stderr, proc.stderr
