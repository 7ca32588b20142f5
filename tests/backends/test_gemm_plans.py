"""The GEMM tuner's picks kept across processes (backends/gemm_plans.py): a pick one process timed is the next
process's among the same candidates, and only there; a damaged or unwritable file costs a re-timing and one line,
never a failure; two processes writing one file keep both's picks."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from backends.gemm_plans import PlanCache, machine_tag, plan_key
from tests.helpers import flag_set

CANDIDATES = ["cuBLASLt:" + "0" * 127 + "1", "cuBLASLt:" + "0" * 127 + "2", "skinny_gemm[tc8 u4 x2]"]
KEY = plan_key(14, 1, 4096, 1024, "norm_in")


def test_a_pick_timed_by_one_process_is_the_next_ones_among_the_same_candidates(tmp_path: Path) -> None:
    path = tmp_path / "gpu-0123.json"
    first = PlanCache(path)
    assert first.pick(KEY, CANDIDATES) is None, "non-vacuity: nothing is known before a process timed the shape"
    first.record(KEY, CANDIDATES, 2, [9.1, 8.7, 6.2])
    first.save()
    second = PlanCache(path)
    assert second.pick(KEY, CANDIDATES) == 2 and second.times_us(KEY) == [9.1, 8.7, 6.2]
    assert second.hits == 1
    assert second.pick(plan_key(14, 8, 4096, 1024, "norm_in"), CANDIDATES) is None, "another shape is its own"


@pytest.mark.parametrize("change", ["another algorithm", "one fewer", "reordered"])
def test_a_shape_whose_candidates_changed_is_timed_again(tmp_path: Path, change: str) -> None:
    cache = PlanCache(tmp_path / "p.json")
    cache.record(KEY, CANDIDATES, 0, [5.0, 6.0, 7.0])
    cache.save()
    now = {"another algorithm": ["cuBLASLt:" + "f" * 128, *CANDIDATES[1:]], "one fewer": CANDIDATES[:2],
           "reordered": CANDIDATES[::-1]}[change]
    later = PlanCache(tmp_path / "p.json")
    assert later.pick(KEY, now) is None, f"{change}: the stored ranking was not taken among these candidates"
    assert later.pick(KEY, CANDIDATES) == 0, "non-vacuity: the candidates it was timed among still take it"


def test_two_processes_writing_one_file_keep_both_picks(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    rank0, rank1 = PlanCache(path), PlanCache(path)  # both read it before either wrote (tensor-parallel ranks)
    other = plan_key(14, 1, 2048, 1024, "resid")
    rank0.record(KEY, CANDIDATES, 1, [3.0, 2.0, 4.0])
    rank0.save()
    rank1.record(other, CANDIDATES, 2, [3.0, 2.0, 1.0])
    rank1.save()
    merged = PlanCache(path)
    assert (merged.pick(KEY, CANDIDATES), merged.pick(other, CANDIDATES)) == (1, 2), path.read_text()[:300]


@pytest.mark.parametrize("content", [b"{not json", b'{"format": 99, "plans": {}}', b"[1, 2]", b"\xff\xfe{"],
                         ids=["not-json", "another-format", "not-an-object", "not-utf8"])
def test_an_unreadable_file_is_said_once_timed_again_and_replaced(tmp_path: Path, content: bytes,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "p.json"
    path.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="vt"):
        cache = PlanCache(path)
        assert cache.pick(KEY, CANDIDATES) is None
        cache.record(KEY, CANDIDATES, 0, [1.0, 2.0, 3.0])
        cache.save()
    said = [r.getMessage() for r in caplog.records if "GEMM plan cache" in r.getMessage()]
    assert len(said) == 1 and str(path) in said[0], said
    assert PlanCache(path).pick(KEY, CANDIDATES) == 0, "the process's own picks replaced the file"


def test_malformed_entries_are_dropped_and_the_rest_kept(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    good = {"candidates": CANDIDATES, "pick": CANDIDATES[1], "times_us": [2.0, 1.0, 3.0]}
    bad = [{"candidates": CANDIDATES, "pick": "cuBLASLt:gone", "times_us": [1.0]},
           {"candidates": "cuBLASLt", "pick": "c", "times_us": []}, {"candidates": CANDIDATES, "pick": CANDIDATES[0]}]
    path.write_text(json.dumps({"format": 1, "plans": {"good": good, **{f"bad{i}": b for i, b in enumerate(bad)}}}))
    cache = PlanCache(path)
    assert cache.pick("good", CANDIDATES) == 1
    assert [cache.pick(f"bad{i}", CANDIDATES) for i in range(len(bad))] == [None] * len(bad)


def test_a_file_that_cannot_be_written_is_said_and_not_raised(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "gemm-plans"
    blocker.write_text("a file where the directory would be")
    cache = PlanCache(blocker / "p.json")
    cache.record(KEY, CANDIDATES, 0, [1.0, 2.0, 3.0])
    with caplog.at_level(logging.WARNING, logger="vt"):
        cache.save()
    assert any("not written" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_the_machine_tag_changes_with_any_part_or_source_and_only_then(tmp_path: Path) -> None:
    src = tmp_path / "skinny_gemm.cu"
    src.write_text("__global__ void k() {}")
    parts = {"gpu": "NVIDIA H200", "cc": "9.0", "sms": 132, "runtime": 13000, "driver": 13000, "cublaslt": 130100,
             "pdl": True, "skinny_cluster": False}
    tag = machine_tag(parts, [src])
    assert tag == machine_tag(dict(parts), [src]) and tag.startswith("nvidia-h200-"), tag
    for field, other in [("gpu", "NVIDIA H100 80GB HBM3"), ("sms", 114), ("cublaslt", 130000), ("pdl", False)]:
        assert machine_tag({**parts, field: other}, [src]) != tag, f"{field} changed, the file did not"
    src.write_text("__global__ void k() { }")
    assert machine_tag(parts, [src]) != tag, "a kernel's source changed, the file did not"


@pytest.mark.gpu
def test_cuda_a_second_backend_takes_the_first_ones_picks_untimed(tmp_path: Path) -> None:
    """Two backends in turn, as two processes (each its own tuner): the second times nothing and runs each shape
    by the first's pick, right."""
    import cupy

    from backends.cuda import CudaBackend

    shapes = [(1, 4096, 1024), (1, 1024, 2048)]
    rng = np.random.default_rng(0)
    operands = {s: (cupy.asarray(rng.standard_normal((s[0], s[2])).astype(np.float16)),
                    cupy.asarray(rng.standard_normal((s[2], s[1])).astype(np.float16))) for s in shapes}
    picks, hits, timings = [], [], []
    with flag_set("VT_CACHE_DIR", str(tmp_path)), flag_set("VT_GEMM_PLAN_CACHE", "1"):
        for _ in range(2):
            backend = CudaBackend()
            lt = backend.blas.lt
            assert lt is not None and lt.plan_cache is not None
            outs = {}
            for s, (a, b) in operands.items():
                outs[s] = cupy.zeros((s[0], s[1]), np.float32)
                backend.xp.matmul(a, b, out=outs[s])
            plans = {(p.m, p.n, p.k): p for p in lt.plans.values()}
            picks.append({s: plans[s].picked + str(plans[s].candidates.index(plans[s].algo)) for s in shapes})
            hits.append(lt.plan_cache.hits)
            timings.append({s: plans[s].times_us for s in shapes})
            lt.stop_tuning()
            for s, (a, b) in operands.items():
                want = a.get().astype(np.float64) @ b.get().astype(np.float64)
                assert np.abs(outs[s].get() - want).max() <= 1e-2 * (1 + np.abs(want).max()), s
    assert hits == [0, len(shapes)], f"the first backend timed every shape, the second took each: hits {hits}"
    assert picks[0] == picks[1], f"the second ran the first's picks: {picks}"
    assert timings[0] == timings[1], f"the second timed nothing (its times are the first's, float for float): {timings}"
    assert list((tmp_path / "gemm-plans").glob("*.json")), "non-vacuity: the first wrote its plan file"
