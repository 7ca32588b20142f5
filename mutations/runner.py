"""The runner: baseline, sandboxed mutants in parallel, a verdict cache, the manifest check."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutations.forkserver import ForkServer
from mutations.judge import (
    PYTEST_ARGS,
    Outcome,
    file_seconds,
    gate_env,
    internal_error_line,
    is_internal_error,
    judge,
    parse_junit,
    run_files,
    run_gates,
)
from mutations.model import Mutation, Result, Verdict
from mutations.sandbox import apply, make_sandbox, manifest, sandbox_parent, seed_bytecode, tracked_files

CACHE_SHARED = ("tests", "seams")  # helper modules here (not test_*.py) may back any gate file
# Gate files whose GPU tests size the KV cache to the device (gpu_memory_utilization, as vLLM does): on the GPU lane
# they run with nothing else on the device. Beside other gates (xdist workers, parallel mutants) they take 0.9 of
# it and the others run out of memory: the H200 run of session 28 had 26 baseline tests fail so, at --jobs 8.
WHOLE_DEVICE_FILES = frozenset({"tests/engine/test_memory_check.py"})
STARTUP_S = 5.0  # what a gate run spends before its first test (interpreter, imports, collection)


def _covers(gate: str, ids: set[str]) -> bool:
    return any(p == gate or p.startswith((gate + "[", gate + "::")) for p in ids)


class BaselineError(RuntimeError):
    """The gates are red or empty with no mutation applied: no verdict would mean anything."""


class CheckoutChanged(RuntimeError):
    """The checkout's sha256 manifest differs after the run: the runner must never edit it."""


@dataclass(slots=True)
class RunConfig:
    root: Path
    jobs: int = os.cpu_count() or 1
    timeout_factor: float = 5.0  # a mutant gets k x its gates' baseline time ...
    # ... and never less than this: a killed mutant whose gate fails slowly (hypothesis shrinking its
    # counterexample) took 32-51 s at two mutants a time and 60 s at three; a hang is caught all the same
    timeout_floor: float = 120.0
    baseline_timeout: float = 1200.0  # unmutated gates that run longer are a hang: the run stops, saying whose
    cache_dir: Path | None = None
    # A JUnit report of the test suite over this very tree, no VT_* flags set (CI's test lane, just run): the
    # baseline of the mutants without an env is read from it instead of run again.
    baseline_junit: Path | None = None
    # The GPU lane's WHOLE_DEVICE_FILES: their baseline and their mutants run alone (the CPU lane has none)
    whole_device_files: frozenset[str] = frozenset()
    # A mutant's gate files run whole, not its gates alone: an unnamed test of theirs that also fails reads as
    # Overreach (the registry's gate lists checked for completeness). Off in CI: it ran every gate file once per
    # mutant, 1,131 of CI's 1,803 s on 2026-12-05.
    whole_files: bool = False
    # Each mutant's pytest forked from one warm interpreter (mutations/forkserver_main.py), not started afresh
    fork_server: bool = True
    # Each sandbox copied from one compiled once (sandbox.seed_bytecode), not from the checkout's sources alone
    seed_bytecode: bool = True


class Runner:
    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.files = tracked_files(cfg.root)
        self.baseline: dict[tuple, float] = {}  # (gate files, env) -> seconds
        self._lock = threading.Lock()
        self._server: ForkServer | None = None
        self._source, self._source_files = cfg.root, self.files  # what each sandbox is copied from

    def run(self, entries: list[Mutation]) -> list[Result]:
        before = manifest(self.cfg.root)
        to_run = [m for m in entries if self._cache_get(self._cache_key(m), m) is None]
        with tempfile.TemporaryDirectory(prefix="vt-mut-seeded-", dir=sandbox_parent()) as seeded:
            if self.cfg.seed_bytecode and to_run:
                self._seed(Path(seeded), to_run)
            try:
                results = self._run_all(entries, to_run)
            finally:
                self._source, self._source_files = self.cfg.root, self.files
        if manifest(self.cfg.root) != before:
            raise CheckoutChanged("the checkout's sha256 manifest changed during the mutation run")
        return results

    def _seed(self, dest: Path, to_run: list[Mutation]) -> None:
        make_sandbox(self.cfg.root, self.files, dest)
        gate_files = sorted({f for m in to_run for f in m.gate_files})
        pyc = seed_bytecode(dest, gate_files, gate_env(dest), list(PYTEST_ARGS))
        self._source, self._source_files = dest, [*self.files, *pyc]

    def _run_all(self, entries: list[Mutation], to_run: list[Mutation]) -> list[Result]:
        # Baselines only for the gates of mutants that will run: a cached mutant's gates were green then.
        self._check_baselines(to_run)
        done = [0]

        def one(m: Mutation) -> Result:
            r = self._run_one(m)
            with self._lock:  # one plain line per mutant as it ends: progress a log file can show too
                done[0] += 1
                print(f"[{done[0]}/{len(entries)}] {m.id}: {r.verdict.value} ({r.seconds:.1f}s"
                      f"{', cached' if r.is_cached else ''})", file=sys.stderr, flush=True)
            return r

        alone = [m for m in entries if self._takes_the_device(m.gate_files)]
        together = [m for m in entries if m not in alone]
        if self.cfg.fork_server and to_run:
            self._server = ForkServer(gate_env(None))
        try:
            with ThreadPoolExecutor(max_workers=max(1, self.cfg.jobs)) as ex:
                by_id = dict(zip((m.id for m in together), ex.map(one, together)))
            by_id.update((m.id, one(m)) for m in alone)  # after the others, one at a time
        finally:
            if self._server is not None:
                self._server.close()
                self._server = None
        return [by_id[m.id] for m in entries]

    def _takes_the_device(self, files: tuple[str, ...]) -> bool:
        return any(f in self.cfg.whole_device_files for f in files)

    # ---- baseline ---------------------------------------------------------------------------
    def _check_baselines(self, entries: list[Mutation]) -> None:
        """One run of the union of the gate files per environment (xdist over the cores), then each mutant's
        gates checked in it: a gate file shared by fifty mutants runs once, not once per gate set."""
        by_env: dict[tuple, list[Mutation]] = {}
        for m in entries:
            by_env.setdefault(m.env, []).append(m)
        for env, ms in by_env.items():
            files = tuple(sorted({f for m in ms for f in m.gate_files}))
            out = self._baseline_from_junit(files) if not env else None
            source = f"from {self.cfg.baseline_junit}" if out is not None else "run"
            out = out or self._baseline_files(files, env)
            print(f"baseline: {len(files)} gate file(s) of {len(ms)} mutant(s)"
                  f"{' ' + ' '.join(f'{k}={v}' for k, v in env) if env else ''}, {source}: "
                  f"rc={out.rc} ({out.seconds:.1f}s)", file=sys.stderr, flush=True)
            for m in ms:
                self._check_baseline(m, out)

    def _check_baseline(self, m: Mutation, out: Outcome) -> None:
        def mine(ids: Any) -> set[str]:
            return {t for t in ids if t.split("::")[0] in m.gate_files}

        passed, skipped = mine(out.passed), mine(out.skipped)
        bad = sorted(mine(out.failed) | mine(out.errors))
        if bad or not (passed or skipped):
            raise BaselineError(
                f"unmutated gates are {'empty' if not (passed or bad) else 'red'} for {m.id} "
                f"({', '.join(m.gate_files)}): {bad[:5]} rc={out.rc}\n{out.log[-2000:]}")
        seen = (skipped | passed) if m.baseline_skipped else passed
        missing = [g for g in m.gates if not _covers(g, seen)]
        if m.baseline_skipped and not any(_covers(g, skipped) for g in m.gates):
            raise BaselineError(f"{m.id} declares a skipped baseline, but none of its gates was skipped")
        if missing:
            raise BaselineError(f"gate(s) of {m.id} collected nothing or did not pass unmutated: {missing}")
        # a pytest start-up beside the files' own test time: the base of the mutant's time limit
        self.baseline[(m.gate_files, m.env, m.baseline_skipped)] = STARTUP_S + sum(
            out.file_seconds.get(f, 0.0) for f in m.gate_files)

    def _baseline_from_junit(self, files: tuple[str, ...]) -> Outcome | None:
        """The given report as the baseline of these gate files, when it is of this tree (written after every
        file the sandbox copies last changed) and ran every one of them; else None (the baseline is run)."""
        path = self.cfg.baseline_junit
        if path is None or not path.is_file():
            return None
        newest = max((self.cfg.root / f).stat().st_mtime for f in self.files if (self.cfg.root / f).is_file())
        if path.stat().st_mtime < newest:
            print(f"baseline: {path} is older than the tree: running the baseline", file=sys.stderr)
            return None
        out = Outcome(rc=0, seconds=0.0)
        out.passed, out.failed, out.errors, out.skipped = parse_junit(path, set(files))
        out.file_seconds = file_seconds(path, set(files))
        ran = {t.split("::")[0] for t in (*out.passed, *out.failed, *out.errors, *out.skipped)}
        if not set(files) <= ran:
            print(f"baseline: {path} lacks {sorted(set(files) - ran)[:3]}: running the baseline", file=sys.stderr)
            return None
        out.rc = 1 if out.failed or out.errors else 0
        return out

    def _baseline_files(self, files: tuple[str, ...], env: tuple) -> Outcome:
        alone = tuple(f for f in files if self._takes_the_device((f,)))
        rest = tuple(f for f in files if f not in alone)
        with tempfile.TemporaryDirectory(prefix="vt-mut-base-", dir=sandbox_parent()) as d:
            sandbox = make_sandbox(self._source, self._source_files, Path(d))
            outs: list[Outcome] = []
            # the whole-device files after the rest, in a pytest of their own without xdist workers
            for group, workers in ((rest, self.cfg.jobs), (alone, 1)):
                if group:
                    outs.append(self._baseline_group(sandbox, group, env, workers))
                    if outs[-1].is_timeout:  # a hang: the next group would only wait out its own limit too
                        raise BaselineError(f"unmutated gates ({', '.join(group)}) ran past "
                                            f"{self.cfg.baseline_timeout:.0f}s: a hang\n{outs[-1].log[-3000:]}")
            return merged(outs)

    def _baseline_group(self, sandbox: Path, group: tuple[str, ...], env: tuple, workers: int) -> Outcome:
        """One pytest run of these gate files, once more where pytest itself failed it."""

        def gates() -> Outcome:
            return run_files(sandbox, group, env, timeout=self.cfg.baseline_timeout, workers=workers)

        out = gates()
        if is_internal_error(out):  # pytest's own failure, as a mutant's: once more, said
            first = internal_error_line(out)
            print(f"baseline of {', '.join(group)}: pytest internal error ({first}): running it again",
                  file=sys.stderr, flush=True)
            out = gates()
        if is_internal_error(out):  # twice: no baseline to judge by, whatever its gates said
            raise BaselineError(f"unmutated gates ({', '.join(group)}) end in a pytest internal error twice: "
                                f"{internal_error_line(out)}")
        return out

    # ---- one mutant -------------------------------------------------------------------------
    def _run_one(self, m: Mutation) -> Result:
        key = self._cache_key(m)
        cached = self._cache_get(key, m)
        if cached is not None:
            return cached
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"vt-mut-{m.id}-", dir=sandbox_parent()) as d:
            sandbox = make_sandbox(self._source, self._source_files, Path(d))
            applied, diff, _ = apply(m, sandbox)
            if not applied:
                return Result(m, Verdict.NOT_APPLIED, time.monotonic() - t0, diff)
            base = self.baseline[(m.gate_files, m.env, m.baseline_skipped)]
            limit = max(self.cfg.timeout_floor, self.cfg.timeout_factor * base)
            out = run_gates(sandbox, m, timeout=limit, whole_files=self.cfg.whole_files, server=self._server)
            first_error = internal_error_line(out) if is_internal_error(out) else None
            if first_error is not None:  # pytest's own failure says nothing of the mutant: once more, said
                out = run_gates(sandbox, m, timeout=limit, whole_files=self.cfg.whole_files, server=self._server)
        verdict, reason, failed_gates, others = judge(m, out)
        res = Result(m, verdict, time.monotonic() - t0, reason, failed_gates, others, diff,
                     rerun_because=first_error or "")
        self._cache_put(key, res)
        return res

    # ---- cache ------------------------------------------------------------------------------
    def _cache_key(self, m: Mutation) -> str:
        # the gates alone and the files whole judge differently (Overreach): each mode's verdicts are its own, and
        # the key of the files whole is the one every verdict had before the gates-alone default
        h = hashlib.sha256(m.fingerprint().encode() + (b"" if self.cfg.whole_files else b"\0gates-alone"))
        helpers = {str(p.relative_to(self.cfg.root)) for d in CACHE_SHARED for p in (self.cfg.root / d).rglob("*.py")
                   if not p.name.startswith("test_")}
        for rel in sorted({m.file, *m.gate_files, *helpers}):
            p = self.cfg.root / rel
            h.update(rel.encode() + b"\0" + (p.read_bytes() if p.is_file() else b"<missing>"))
        return h.hexdigest()

    def _cache_get(self, key: str, m: Mutation) -> Result | None:
        if self.cfg.cache_dir is None:
            return None
        p = self.cfg.cache_dir / f"{key}.json"
        if not p.is_file():
            return None
        d = json.loads(p.read_text())
        return Result(m, Verdict(d["verdict"]), d["seconds"], d["reason"], d["failed_gates"],
                      d["failed_others"], d["diff"], is_cached=True,
                      rerun_because=d.get("rerun_because", ""))

    def _cache_put(self, key: str, res: Result) -> None:
        if self.cfg.cache_dir is None or res.verdict in (Verdict.TIMEOUT, Verdict.ERROR) or res.rerun_because:
            return
        self.cfg.cache_dir.mkdir(parents=True, exist_ok=True)
        (self.cfg.cache_dir / f"{key}.json").write_text(json.dumps(res.to_json()))


def merged(outs: list[Outcome]) -> Outcome:
    """One baseline of pytest runs over disjoint gate files, each already checked for pytest's own failure and a
    hang: the first failing exit code, every test's result, each run's log tail."""
    out = Outcome(rc=next((o.rc for o in outs if o.rc), 0), seconds=sum(o.seconds for o in outs),
                  log="\n".join(o.log[-3000:] for o in outs))
    for o in outs:
        out.passed |= o.passed
        out.skipped |= o.skipped
        out.failed.update(o.failed)
        out.errors.update(o.errors)
        out.file_seconds.update(o.file_seconds)
    return out
