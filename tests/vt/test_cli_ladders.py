"""`vt ladder` run as a process: progress lines off a terminal, and a ladder whose requests fail says why. Apart
from test_cli_runs.py: their mutants run these two processes, not the others'."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SMALL = ["--max-model-len", "64", "--num-blocks", "16"]


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


def _nan_checkpoint(tmp_path: Path) -> Path:
    """tiny-qwen3 with a final norm of NaN: every request's logits are NaN, and it fails alone at its first token."""
    from safetensors.numpy import load_file, save_file

    from models.loader import resolve_model

    d = tmp_path / "nan-norm"
    shutil.copytree(resolve_model("tiny-qwen3"), d)
    w = load_file(str(d / "model.safetensors"))
    w["model.norm.weight"] = np.full_like(w["model.norm.weight"], np.nan)
    save_file(w, str(d / "model.safetensors"))
    return d


@pytest.mark.parametrize("json_out", [False, True], ids=["table", "json"])
def test_a_ladder_with_failed_requests_says_why(json_out: bool, tmp_path: Path) -> None:
    """In both forms: exit 1 and each reason once on stderr; --json's row counts the failures too. (The requests
    fail at run time: a prompt too long for max_model_len is refused before the ladder runs.)"""
    cmd = [sys.executable, "-m", "vt.cli", "ladder", "--model", str(_nan_checkpoint(tmp_path)), "--backend", "cpu",
           "--concurrency", "2", "--num-prompts", "2", "--input-len", "8", "--output-len", "2", "--max-model-len",
           "32", "--num-blocks", "8", *(["--json"] if json_out else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, "a rung with failed requests is no success"
    assert "vt: c=2: 2 request(s) failed: non-finite logits" in proc.stderr, proc.stderr
    if json_out:
        rows = json.loads(proc.stdout.splitlines()[-1])
        assert [(r["c"], r["failed"]) for r in rows] == [(2, 2)], rows
