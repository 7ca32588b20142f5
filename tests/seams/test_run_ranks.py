"""The rank launcher of the tensor-parallel lanes (seams/ranks.py) ends in bounded time whatever a rank does: a
rank that writes more than a pipe holds before its collective, a rank that hangs, a rank that fails while the
others wait for it. Ranks here are small Python programs; a "collective" is a file each waits for."""

from __future__ import annotations

import sys
import time

from seams.ranks import first_failure, run_ranks

# rank r writes `noise` bytes to stderr, then marks itself arrived and waits until every rank has
RANK = """
import os, sys, time
d, r, size, noise = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
sys.stderr.write("w" * noise); sys.stderr.flush()
open(os.path.join(d, f"arrived{r}"), "w").close()
while not all(os.path.exists(os.path.join(d, f"arrived{k}")) for k in range(size)):
    time.sleep(0.01)
print("{\\"rank\\": %d}" % r)
"""


def ranks(tmp_path, noise: list[int]) -> list[list[str]]:
    return [[sys.executable, "-c", RANK, str(tmp_path), str(r), str(len(noise)), str(n)] for r, n in enumerate(noise)]


def test_ranks_that_write_more_than_a_pipe_holds_before_their_collective_all_finish(tmp_path) -> None:
    t0 = time.monotonic()
    results = run_ranks(ranks(tmp_path, [200_000, 1_000_000]), timeout=12)
    assert all(r.ok for r in results), first_failure(results)
    assert [len(r.stderr) for r in results] == [200_000, 1_000_000], "non-vacuity: each wrote past a pipe's 64 KiB"
    assert [r.stdout.strip() for r in results] == ['{"rank": 0}', '{"rank": 1}']
    assert time.monotonic() - t0 < 12


def test_a_rank_that_never_arrives_is_ended_at_the_deadline_with_every_other(tmp_path) -> None:
    argvs = ranks(tmp_path, [0, 0])
    argvs[1] = [sys.executable, "-c", "import time; time.sleep(600)"]
    t0 = time.monotonic()
    results = run_ranks(argvs, timeout=3)
    took = time.monotonic() - t0
    assert 3 <= took < 20, f"bounded by the deadline: {took:.1f} s"
    assert [r.ok for r in results] == [False, False]
    assert all("deadline of 3 s" in (r.ended or "") for r in results), results


def test_a_rank_that_fails_ends_the_ranks_waiting_for_it_at_once(tmp_path) -> None:
    argvs = ranks(tmp_path, [0, 0])
    argvs[1] = [sys.executable, "-c", "import sys; sys.stderr.write('rank 1 broke'); sys.exit(3)"]
    t0 = time.monotonic()
    results = run_ranks(argvs, timeout=10)
    assert time.monotonic() - t0 < 6, "rank 0 was left waiting for the failed rank's collective"
    assert results[1].returncode == 3 and results[1].ended is None
    assert results[0].ended == "ended: rank 1 failed first (exit 3)"
    assert first_failure(results).startswith("rank 1: exit 3") and "rank 1 broke" in first_failure(results)
