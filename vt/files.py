"""Files vt keeps between processes (compiled kernels, the GEMM tuner's picks) are written whole or not at all."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def replace_whole(path: Path, data: bytes) -> None:
    """path's content becomes data, or stays what it was: a temporary file beside it, synced, then renamed over it
    (a reader never sees half a file), readable as a file the user wrote (mkstemp's are 0600). An OSError is raised
    after the temporary file is removed."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
