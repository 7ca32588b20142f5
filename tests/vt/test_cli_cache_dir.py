"""The `vt` command run as a process with an unwritable cache directory: one typed line. Apart from
test_cli_runs.py: its mutant runs this one process, not the others'."""

from __future__ import annotations

import os
import subprocess
import sys

SMALL = ["--max-model-len", "64", "--num-blocks", "16"]


def test_an_unwritable_cache_dir_is_one_typed_line(tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a directory cannot be made under a file
    cmd = [sys.executable, "-m", "vt.cli", "generate", "--model", "tiny-qwen3", "--prompt", "hi", *SMALL]
    proc = subprocess.run(cmd, env={**os.environ, "VT_CACHE_DIR": str(blocker / "cache")}, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-1500:]
    assert "vt: error: ConfigError: VT_CACHE_DIR: cannot write the built-in checkpoint" in proc.stderr
