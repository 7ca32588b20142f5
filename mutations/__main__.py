"""python -m mutations run [--only ID ...] [--jobs N] [--report-dir DIR] | python -m mutations list"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from mutations.forkserver import ForkServerError
from mutations.model import Verdict
from mutations.registry import ENTRIES
from mutations.reports import summary, write_all
from mutations.runner import WHOLE_DEVICE_FILES, BaselineError, CheckoutChanged, RunConfig, Runner


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mutations")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list registered mutations")
    r = sub.add_parser("run", help="run mutants in sandboxes and write the reports")
    r.add_argument("--only", nargs="+", metavar="ID")
    r.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    r.add_argument("--report-dir", type=Path, default=Path("reports/mutations"))
    r.add_argument("--root", type=Path, default=Path.cwd())
    r.add_argument("--no-cache", action="store_true")
    r.add_argument("--baseline-junit", type=Path, metavar="XML",
                   help="a JUnit report of the suite over this tree with no VT_* flags (CI's test lane): the "
                        "baseline of the mutants without an env is read from it, not run again")
    r.add_argument("--since", metavar="REF", help="run only the mutants a diff against REF touches (their file, "
                                                  "gate files, or a shared test helper)")
    r.add_argument("--lane", choices=["auto", "cpu", "gpu"], default="auto",
                   help="gpu runs the needs_gpu entries too; auto picks gpu when CuPy sees a GPU")
    r.add_argument("--whole-files", action="store_true",
                   help="run each mutant's gate files whole, not its gates alone: an unnamed test of theirs that "
                        "also fails reads as Overreach (a gate list found short)")
    r.add_argument("--fresh-interpreters", action="store_true",
                   help="start each mutant's pytest in a fresh interpreter from uncompiled sources, not forked from "
                        "the warm fork server into a sandbox compiled once (a verdict that differs between the two "
                        "is a defect of the runner's)")
    args = p.parse_args(argv)
    if args.cmd == "list":
        for m in ENTRIES:
            lane = "gpu" if m.needs_gpu else "cpu"
            print(f"{m.id}\t{lane}\t{m.kind.value}\t{m.file}\t{m.description}\tgates: {len(m.gates)} "
                  f"({m.gates[0]}{', ...' if len(m.gates) > 1 else ''})")
        return 0
    entries = ENTRIES
    lane = args.lane if args.lane != "auto" else ("gpu" if _has_gpu() else "cpu")
    if lane == "cpu":
        gpu_only = [m.id for m in entries if m.needs_gpu]
        entries = [m for m in entries if not m.needs_gpu]
        if gpu_only:
            print(f"cpu lane: {len(gpu_only)} GPU-lane mutation(s) not run here (scripts/gpu-lane runs them): "
                  f"{', '.join(gpu_only)}")
    if args.only:
        unknown = set(args.only) - {m.id for m in ENTRIES}
        if unknown:
            print(f"unknown mutation id(s): {sorted(unknown)}", file=sys.stderr)
            return 2
        entries = [m for m in entries if m.id in args.only]
    root = args.root.resolve()
    if args.since:
        try:
            entries = touched_since(entries, root, args.since)
        except ValueError as e:
            print(f"--since {args.since}: {e}", file=sys.stderr)
            return 2
        print(f"--since {args.since}: {len(entries)} mutant(s) touched by the diff")
    cache = None if args.no_cache else root / ".vt-cache" / "mutations"
    t0 = time.monotonic()
    try:
        cfg = RunConfig(root=root, jobs=args.jobs, cache_dir=cache, baseline_junit=args.baseline_junit,
                        whole_device_files=WHOLE_DEVICE_FILES if lane == "gpu" else frozenset(),
                        whole_files=args.whole_files, fork_server=not args.fresh_interpreters,
                        seed_bytecode=not args.fresh_interpreters)
        results = Runner(cfg).run(entries)
    except (BaselineError, CheckoutChanged, ForkServerError) as e:
        print(f"mutation run aborted: {e}", file=sys.stderr)
        return 2
    paths = write_all(results, root, args.report_dir)
    print(summary(results))
    print(f"wall time {time.monotonic() - t0:.1f}s; reports: {', '.join(str(p) for p in paths)}")
    return 0 if all(r.verdict is Verdict.KILLED for r in results) else 1


def touched_since(entries: list, root: Path, ref: str) -> list:
    """The entries whose mutated file or gate files differ from REF (committed, staged, unstaged or new); all
    of them when a shared helper (tests/ or seams/ outside a test_*.py) or the registry changed."""
    import subprocess

    def git(*a: str) -> list[str]:
        proc = subprocess.run(["git", *a], cwd=root, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ValueError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "git failed")
        return proc.stdout.split()

    changed = set(git("diff", "--name-only", ref)) | set(git("ls-files", "--others", "--exclude-standard"))
    shared = {c for c in changed if c.startswith(("tests/", "seams/")) and not Path(c).name.startswith("test_")}
    if any(c.startswith("mutations/registry/") for c in changed):  # an area's entries, or the gate ids they share
        return entries
    # mutations/registry.py is the registry before it became a package (a diff against a REF from then names it);
    # the entry since-ignores-shared-helpers mutates this line as it is.
    if shared or "mutations/registry.py" in changed:
        return entries
    return [m for m in entries if {m.file, *m.gate_files} & changed]


def _has_gpu() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device: the CPU lane
        return False


if __name__ == "__main__":
    sys.exit(main())
