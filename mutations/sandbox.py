"""Sandbox copies of the checkout, the sha256 manifest, and applying a mutation."""

from __future__ import annotations

import compileall
import difflib
import hashlib
import os
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

from mutations.model import Mutation

SHM_ROOM_BYTES = 4 << 30  # three sandboxes with their gates' temporaries, and room to spare for the gates' own use
SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis", ".mypy_cache",
             ".ruff_cache", ".vt-cache", "reports", ".benchmarks"}


def tracked_files(root: Path) -> list[str]:
    """The checkout as it is on disk, minus what git ignores: tracked files and untracked ones (a copied
    working tree can carry an older index than its files), or every file outside caches without git."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                             capture_output=True, check=True)
        files = sorted({f for f in out.stdout.decode().split("\0") if f})
        if files:
            return [f for f in files if (root / f).is_file()]
    except (OSError, subprocess.CalledProcessError):
        pass
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in filenames:
            found.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(found)


def manifest(root: Path) -> dict[str, str]:
    """sha256 of every file in the checkout (tracked or not, caches excluded)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in filenames:
            p = os.path.join(dirpath, name)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def sandbox_parent() -> str | None:
    """Where sandboxes are made: a RAM-backed /dev/shm where there is one with room (a mutant's ~900 files are written
    and deleted in milliseconds there, against ~0.5 s on a virtual disk mounted with discard), else the default."""
    shm = "/dev/shm"
    try:
        st = os.statvfs(shm)
    except OSError:
        return None
    return shm if os.access(shm, os.W_OK) and st.f_bavail * st.f_frsize >= SHM_ROOM_BYTES else None


def make_sandbox(root: Path, files: list[str], dest: Path) -> Path:
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)
    return dest


def seed_bytecode(sandbox: Path, gate_files: list[str], env: dict[str, str], pytest_args: list[str]) -> list[str]:
    """Compile a sandbox once for every mutant's copy of it: each module's bytecode, hash-checked (PEP 552: the
    mutated file's no longer matches its source and is compiled afresh), and pytest's assert-rewritten gate modules
    (which pytest checks by the source's hash too). A fresh sandbox compiled both in every mutant's pytest, since
    PYTHONDONTWRITEBYTECODE kept any from being written. Returns the bytecode files, relative to the sandbox."""
    compileall.compile_dir(str(sandbox), quiet=2, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    collect_env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    # a collection writes the rewritten modules; a gate file that fails to collect is the baseline's to report
    subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *pytest_args, *gate_files], cwd=sandbox,
                   env=collect_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600, check=False)
    return sorted(str(p.relative_to(sandbox)) for p in sandbox.rglob("__pycache__/*.pyc"))


def apply(m: Mutation, sandbox: Path) -> tuple[bool, str, str]:
    """Apply m in the sandbox. Returns (applied, diff or reason, original text)."""
    path = sandbox / m.file
    if not path.is_file():
        return False, f"file {m.file} does not exist", ""
    text = path.read_text()
    found = text.count(m.old)
    if found != m.count:
        return False, f"anchor matched {found} place(s), declared {m.count}", text
    mutated = text.replace(m.old, m.new)
    path.write_text(mutated)
    diff = "".join(difflib.unified_diff(text.splitlines(True), mutated.splitlines(True),
                                        f"a/{m.file}", f"b/{m.file}", n=2))
    return True, diff, text


def anchor_location(text: str, old: str) -> tuple[int, int, int, int]:
    """1-based (line, column) of the first match's start and (exclusive) end."""
    i = max(text.find(old), 0)
    start_line = text.count("\n", 0, i) + 1
    start_col = i - (text.rfind("\n", 0, i) + 1) + 1
    j = i + len(old)
    end_line = text.count("\n", 0, j) + 1
    end_col = j - (text.rfind("\n", 0, j) + 1) + 1
    return start_line, start_col, end_line, end_col
