"""The GEMM tuner's picks kept across processes (VT_GEMM_PLAN_CACHE, on by default), as CUBINs are kept.

The tuner (backends/cublaslt.py) times every candidate of a decode shape at start-up and keeps the fastest.
Candidates within a few percent of each other trade places from process to process, and one such swap put 30 us on
a one-row 30B-A3B-8L graph's qkv GEMMs under ncu (each kernel timed alone; H100, session 38): the same engine on
the same machine can run at two speeds across restarts, and an A/B between two processes measures the tuner as much
as the change. A pick written here is taken untimed by the next process, so a machine runs one plan per shape until
something that could change the ranking changes, or VT_GEMM_PLAN_CACHE=retime times every shape again and
overwrites the picks.

A file holds one machine's picks: its name is a digest of the GPU, the CUDA runtime, NVRTC, CuPy and cuBLASLt, the
launch flags, and the source of every kernel a candidate or a consumer runs and of the code that launches and times
them (backends/cublaslt.py's `ranking_sources`). A pick is stored under its shape and the digest of the candidates
it was timed among, fingerprint for fingerprint (cuBLASLt's algorithm is an opaque 64-byte struct that its
documentation allows to be serialized and reused with the same library version): another heuristic offer or
configuration list (VT_SKINNY_MMA=1 adds candidates) is timed and stored beside it. A stored pick only chooses among
the candidates this process built, so a stale one can cost speed, never a wrong result. A file that cannot be read
is said once and ignored; its shapes are timed, and the picks replace it. Writes hold a lock, merge with what other
processes (tensor-parallel ranks) wrote, and go through a temporary file and a rename."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vt.files import replace_whole

log = logging.getLogger("vt")

FORMAT = 2  # the file's layout; a file of another is ignored (2: entries keyed by their candidates too)


def machine_tag(parts: dict[str, Any], sources: list[tuple[str, str]]) -> str:
    """The file name's stem: a readable GPU name, then a digest of every part and (name, text) source that could
    change a ranking (so no two machines or builds share a file)."""
    h = hashlib.sha256(json.dumps(parts, sort_keys=True).encode())
    for name, text in sources:
        h.update(f"\0{name}\0".encode())
        h.update(text.encode())
    gpu = "".join(ch if ch.isalnum() else "-" for ch in str(parts.get("gpu", "gpu"))).strip("-").lower()
    return f"{gpu or 'gpu'}-{h.hexdigest()[:16]}"


def plan_key(dtype: int, m: int, n: int, k: int, epilogue: str) -> str:
    return f"{dtype}:{m}x{n}x{k}:{epilogue or 'plain'}"


def entry_key(key: str, candidates: list[str]) -> str:
    """Where a shape's pick among these candidates is stored: the shape, then a digest of the candidates in order."""
    return f"{key}:{hashlib.sha256(chr(0).join(candidates).encode()).hexdigest()[:16]}"


class PlanCache:
    """One machine's picks, read once at start, written once when start-up's tuning ends (`save`). With `retime`,
    nothing stored is taken, and every pick this process times is written."""

    def __init__(self, path: Path, retime: bool = False) -> None:
        self.path, self.retime = path, retime
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
        """The index in `candidates` of the pick stored for this shape among exactly these candidates; else None
        (time it)."""
        entry = None if self.retime else self.plans.get(entry_key(key, candidates))
        if entry is None or entry["pick"] not in candidates:  # the latter: a file edited by hand
            return None
        self.hits += 1
        return candidates.index(entry["pick"])

    def times_us(self, key: str, candidates: list[str]) -> list[float]:
        return list(self.plans[entry_key(key, candidates)]["times_us"])

    def record(self, key: str, candidates: list[str], best: int, times_us: list[float]) -> None:
        entry = {"candidates": list(candidates), "pick": candidates[best], "times_us": list(times_us)}
        at = entry_key(key, candidates)
        self.plans[at] = self.new[at] = entry

    def save(self) -> None:
        """Writes this process's new picks over what the file holds now, under the file's lock (tensor-parallel
        ranks end start-up together: without it, two could read before either wrote, and the last rename would drop
        the other's picks), atomically. Nothing new, nothing written. A failure to write is said, never raised: the
        picks are a cache."""
        if not self.new:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._locked():
                merged = {**self._read(quiet=True), **self.new}  # its state was said when this process read it
                replace_whole(self.path, json.dumps({"format": FORMAT, "plans": merged}, indent=0, sort_keys=True)
                              .encode())
            self.new = {}
        except OSError as e:
            log.warning("GEMM plan cache %s not written (%s): the next process times its shapes again", self.path, e)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def _well_formed(entry: Any) -> bool:
    """An entry this version can use: its candidates a list of strings holding its pick, a time for each."""
    return (isinstance(entry, dict) and isinstance(entry.get("candidates"), list)
            and all(isinstance(c, str) for c in entry["candidates"]) and entry.get("pick") in entry["candidates"]
            and isinstance(entry.get("times_us"), list) and len(entry["times_us"]) == len(entry["candidates"])
            and all(isinstance(t, int | float) for t in entry["times_us"]))
