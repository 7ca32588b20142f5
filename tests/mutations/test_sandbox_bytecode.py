"""A mutant's sandbox starts with the checkout's compiled bytecode (mutations/sandbox.compile_bytecode), so its
pytest does not compile every module again; the mutated file's bytecode is never run: its source no longer matches
the hash the bytecode was checked against, however alike the two files' sizes and times."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from mutations.sandbox import compile_bytecode, make_sandbox

FILES = ["pkg/__init__.py", "pkg/m.py", "pkg/other.py"]


def checkout(root: Path) -> None:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg/__init__.py").write_text("")
    (root / "pkg/m.py").write_text("VALUE = 1\n")
    (root / "pkg/other.py").write_text("NAME = 'other'\n")


def imported(sandbox: Path, expr: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(sandbox), "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run([sys.executable, "-c", f"import pkg.m, pkg.other; print({expr})"], env=env,
                         capture_output=True, text=True, timeout=60, cwd=sandbox)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_mutated_files_bytecode_is_never_run_however_alike_the_files(tmp_path: Path) -> None:
    root, store, sandbox = tmp_path / "root", tmp_path / "store", tmp_path / "sandbox"
    checkout(root)
    make_sandbox(root, FILES, sandbox, compile_bytecode(root, FILES, store))
    pyc = sandbox / importlib.util.cache_from_source("pkg/m.py")
    assert pyc.is_file() and (sandbox / importlib.util.cache_from_source("pkg/other.py")).is_file(), (
        "non-vacuity: the sandbox holds the checkout's bytecode")
    source = sandbox / "pkg/m.py"
    stat = source.stat()
    source.write_text("VALUE = 2\n")  # the same size and, below, the same time: only the content tells them apart
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert imported(sandbox, "pkg.m.VALUE, pkg.other.NAME") == "2 other", "the mutated source ran, not its bytecode"
