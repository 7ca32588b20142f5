"""vt/files.py: a file vt keeps between processes (a compiled kernel, the GEMM tuner's picks) is replaced whole or
not at all, and a failed write leaves no temporary file behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from vt.files import replace_whole


def test_a_write_replaces_the_file_whole_and_readable(tmp_path: Path) -> None:
    path = tmp_path / "picks.json"
    path.write_bytes(b"old")
    replace_whole(path, b"new content")
    assert path.read_bytes() == b"new content" and sorted(os.listdir(tmp_path)) == ["picks.json"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644, oct(path.stat().st_mode)


def test_a_failed_write_keeps_the_old_content_and_leaves_no_temporary(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "picks.json"
    path.write_bytes(b"old")

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        replace_whole(path, b"half a fil")
    assert path.read_bytes() == b"old", "the old content survives a failed write"
    assert sorted(os.listdir(tmp_path)) == ["picks.json"], f"a temporary was left: {os.listdir(tmp_path)}"
