"""Host time per decode step with the device stubbed out (issue 28's yardstick), as a ratio against another
revision measured in the same run.

The engine runs B greedy requests on the CPU backend; once they decode steadily, every graph replay does
nothing and every read-back hands back ids at once, so what is left per step is the host: scheduling, staging,
the update step, detokenization. The same measurement runs on REF (a git worktree of it, in a subprocess) and
on this checkout, alternating, so the ratio is taken under one machine load.

    .venv/bin/python benchmarks/host_step.py [--ref REF] [--rows 32 256] [--steps 40]

A last column measures this checkout with detokenize=False: the engine process's core, whose front makes the
text of every request without stop strings (vt/engine/core/proc.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

MEASURE = r"""
import json, sys, time
import numpy as np
from vt import LLM, SamplingParams

rows, steps, text = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "text"
llm = LLM(model="tiny-qwen3", max_model_len=1024, num_blocks=rows * 64 + 64, max_num_seqs=rows)
e = llm.engine
sp = SamplingParams(temperature=0, max_tokens=900, ignore_eos=True, **({} if text else {"detokenize": False}))
for i in range(rows):
    e.add_request([3 + i % 400, 5, 7, 9, 11], sp)
for _ in range(60):  # prefill, then decode past the first block-table widths
    e.step()
d = e.runner.decoder
mod = sys.modules[type(d).__module__]
import backends.cpu
backends.cpu.CpuGraph._replay = lambda self, stream: None  # the device's work: nothing
d._read = lambda slot, n, logprobs: (lambda: mod.StepResult(np.full(n, 11, np.int64)))
for _ in range(5):
    e.step()
t = time.perf_counter()
for _ in range(steps):
    e.step()
print(json.dumps({"rows": rows, "ms_per_step": 1e3 * (time.perf_counter() - t) / steps}))
"""


def measure(root: str, rows: int, steps: int, text: bool = True) -> float:
    env = {**os.environ, "PYTHONPATH": root, "OPENBLAS_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-c", MEASURE, str(rows), str(steps), "text" if text else "ids"], cwd=root,
                       env=env,
                       capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"{root}: {p.stderr[-2000:]}")
    return float(json.loads(p.stdout.strip().splitlines()[-1])["ms_per_step"])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", default="HEAD~0", help="the revision to compare against (a worktree is made)")
    ap.add_argument("--rows", type=int, nargs="+", default=[32, 256])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if min(args.rows + [args.steps, args.repeats]) < 1:
        ap.error("--rows, --steps and --repeats take positive ints")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as tmp:
        ref_root = os.path.join(tmp, "ref")
        subprocess.run(["git", "worktree", "add", "--detach", ref_root, args.ref], cwd=here, check=True,
                       capture_output=True)
        try:
            print(f"| rows | {args.ref} ms/step | this checkout ms/step | ratio | this checkout, no text |\n"
                  f"|---|---|---|---|---|")
            for rows in args.rows:
                ref, now, ids = [], [], []
                for _ in range(args.repeats):  # alternate, so all see the same load
                    ref.append(measure(ref_root, rows, args.steps))
                    now.append(measure(here, rows, args.steps))
                    ids.append(measure(here, rows, args.steps, text=False))
                r, n = min(ref), min(now)
                print(f"| {rows} | {r:.3f} | {n:.3f} | {r / n:.2f}x | {min(ids):.3f} |", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", ref_root], cwd=here, capture_output=True)
    return 0


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    print(f"wall {time.time() - t0:.0f} s")
    sys.exit(rc)
