"""The GEMM tuner's picks kept across processes (VT_GEMM_PLAN_CACHE, on by default), as CUBINs are kept.

The tuner (backends/cublaslt.py) times every candidate of a decode shape at start-up and keeps the fastest. Two
candidates within a few percent of each other trade places from process to process, and one such swap put 30 us on
a one-row 30B-A3B-8L graph's qkv GEMMs under ncu (each kernel timed alone; H100, session 38): the same engine on
the same machine can run at two speeds across restarts, and an A/B between two processes measures the tuner as much
as the change. A pick written
here is taken untimed by the next process, so a machine runs one plan per shape until something that could change
the ranking changes.

A file holds one machine's picks: its name is a digest of the GPU (name, compute capability, SM count), the CUDA
runtime and driver, cuBLASLt's version and the tuner's and the skinny kernels' sources. A pick is reused only where
the shape's candidates are the ones it was timed among, fingerprint for fingerprint (cuBLASLt's algorithm is an
opaque 64-byte struct that its documentation allows to be serialized and reused with the same library version): a
different heuristic offer, or a changed configuration list, times the shape again. A file that cannot be read is
said once and ignored; the tuner then times every shape, and its picks replace the file. Writes go through a temporary
file and a rename, merged with what another process (a tensor-parallel rank) wrote meanwhile."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger("vt")

FORMAT = 1  # the file's layout; a file of another is set aside


def machine_tag(parts: dict[str, Any], sources: list[Path]) -> str:
    """The file name's stem: a readable GPU name, then a digest of every part and source that could change a
    ranking (so no two machines or builds share a file)."""
    h = hashlib.sha256(json.dumps(parts, sort_keys=True).encode())
    for src in sources:
        h.update(src.name.encode())
        h.update(src.read_bytes())
    gpu = "".join(ch if ch.isalnum() else "-" for ch in str(parts.get("gpu", "gpu"))).strip("-").lower()
    return f"{gpu or 'gpu'}-{h.hexdigest()[:16]}"


def plan_key(dtype: int, m: int, n: int, k: int, epilogue: str) -> str:
    return f"{dtype}:{m}x{n}x{k}:{epilogue or 'plain'}"


class PlanCache:
    """One machine's picks, read once at start, written once when start-up's tuning ends (`save`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.plans: dict[str, dict[str, Any]] = self._read()
        self.new: dict[str, dict[str, Any]] = {}  # picks this process timed, to write
        self.hits = 0

    def _read(self, quiet: bool = False) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError, ValueError) as e:
            if not quiet:
                log.warning("GEMM plan cache %s unreadable (%s): every shape is timed again", self.path, e)
            return {}
        if not (isinstance(data, dict) and data.get("format") == FORMAT and isinstance(data.get("plans"), dict)):
            if not quiet:
                log.warning("GEMM plan cache %s is not a format-%d plan file: every shape is timed again",
                            self.path, FORMAT)
            return {}
        return {k: v for k, v in data["plans"].items() if _well_formed(v)}

    def pick(self, key: str, candidates: list[str]) -> int | None:
        """The index in `candidates` of the pick stored for this shape, where it was timed among exactly these
        candidates; else None (time it)."""
        entry = self.plans.get(key)
        if entry is None or entry["candidates"] != candidates:
            return None
        self.hits += 1
        return candidates.index(entry["pick"])

    def times_us(self, key: str) -> list[float]:
        return list(self.plans[key]["times_us"])

    def record(self, key: str, candidates: list[str], best: int, times_us: list[float]) -> None:
        entry = {"candidates": list(candidates), "pick": candidates[best], "times_us": list(times_us)}
        self.plans[key] = self.new[key] = entry

    def save(self) -> None:
        """Writes this process's new picks over what the file holds now (another process may have added its own),
        atomically. Nothing new, nothing written. A failure to write is said, never raised: the picks are a
        cache."""
        if not self.new:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            merged = {**self._read(quiet=True), **self.new}  # its state was said when this process read it
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump({"format": FORMAT, "plans": merged}, f, indent=0, sort_keys=True)
            os.replace(tmp, self.path)
            self.new = {}
        except OSError as e:
            log.warning("GEMM plan cache %s not written (%s): the next process times its shapes again", self.path, e)


def _well_formed(entry: Any) -> bool:
    """An entry this version can use: its candidates a list of strings holding its pick, its times numbers."""
    return (isinstance(entry, dict) and isinstance(entry.get("candidates"), list)
            and all(isinstance(c, str) for c in entry["candidates"]) and entry.get("pick") in entry["candidates"]
            and isinstance(entry.get("times_us"), list)
            and all(isinstance(t, int | float) for t in entry["times_us"]))
