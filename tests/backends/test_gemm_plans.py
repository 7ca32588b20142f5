"""The GEMM tuner's picks kept across processes (backends/gemm_plans.py): a pick one process timed is the next
process's among the same candidates, and only there; a damaged or unwritable file costs a re-timing and one line,
never a failure; two processes writing one file keep both's picks; the file is named by what could change a
ranking, and by nothing else."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from backends.gemm_plans import PlanCache, entry_key, machine_tag, plan_key

CANDIDATES = ["cuBLASLt:" + "0" * 127 + "1", "cuBLASLt:" + "0" * 127 + "2", "skinny_gemm[tc8 u4 x2]"]
KEY = plan_key(14, 1, 4096, 1024, "norm_in")


def test_a_pick_timed_by_one_process_is_the_next_ones_among_the_same_candidates(tmp_path: Path) -> None:
    path = tmp_path / "gpu-0123.json"
    first = PlanCache(path)
    assert first.pick(KEY, CANDIDATES) is None, "non-vacuity: nothing is known before a process timed the shape"
    first.record(KEY, CANDIDATES, 2, [9.1, 8.7, 6.2])
    first.save()
    second = PlanCache(path)
    assert second.pick(KEY, CANDIDATES) == 2 and second.times_us(KEY, CANDIDATES) == [9.1, 8.7, 6.2]
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


def test_one_shapes_picks_among_two_candidate_sets_are_both_kept(tmp_path: Path) -> None:
    """An A/B of VT_SKINNY_MMA (which adds candidates) alternates processes: each side's pick stays, neither
    overwrites the other's, so neither side times again."""
    more = [*CANDIDATES, "skinny_mma[nt8 s4 x2]"]
    first = PlanCache(tmp_path / "p.json")
    first.record(KEY, CANDIDATES, 1, [5.0, 4.0, 6.0])
    first.save()
    second = PlanCache(tmp_path / "p.json")
    assert second.pick(KEY, more) is None, "non-vacuity: the larger set was never timed"
    second.record(KEY, more, 3, [5.0, 4.0, 6.0, 3.0])
    second.save()
    third = PlanCache(tmp_path / "p.json")
    assert (third.pick(KEY, CANDIDATES), third.pick(KEY, more)) == (1, 3), (tmp_path / "p.json").read_text()[:400]


def test_retime_takes_nothing_stored_and_overwrites_it(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    first = PlanCache(path)
    first.record(KEY, CANDIDATES, 0, [1.0, 2.0, 3.0])
    first.save()
    retimed = PlanCache(path, retime=True)
    assert retimed.pick(KEY, CANDIDATES) is None and retimed.hits == 0, "retime times a stored shape again"
    retimed.record(KEY, CANDIDATES, 2, [3.0, 2.0, 1.0])
    retimed.save()
    assert PlanCache(path).pick(KEY, CANDIDATES) == 2, "the new timing replaced the stored pick"


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


def test_a_save_waits_for_another_writers_lock(tmp_path: Path) -> None:
    """Tensor-parallel ranks end start-up together: a rank's save (read, merge, rename) waits while another holds
    the file's lock, so neither's rename drops the other's picks."""
    import fcntl
    import threading
    import time

    path = tmp_path / "p.json"
    cache = PlanCache(path)
    cache.record(KEY, CANDIDATES, 0, [1.0, 2.0, 3.0])
    with open(path.with_name(path.name + ".lock"), "a") as other_writer:
        fcntl.flock(other_writer, fcntl.LOCK_EX)
        saving = threading.Thread(target=cache.save)
        saving.start()
        time.sleep(0.3)
        waited = saving.is_alive() and not path.exists()
        fcntl.flock(other_writer, fcntl.LOCK_UN)
    saving.join(timeout=10)
    assert waited, "the save went ahead while another writer held the lock"
    assert PlanCache(path).pick(KEY, CANDIDATES) == 0, "non-vacuity: once the lock was free, the save wrote"


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
    bad = [{"candidates": CANDIDATES, "pick": "cuBLASLt:gone", "times_us": [1.0, 1.0, 1.0]},
           {"candidates": "cuBLASLt", "pick": "c", "times_us": []}, {"candidates": CANDIDATES, "pick": CANDIDATES[0]},
           {"candidates": CANDIDATES, "pick": CANDIDATES[0], "times_us": [1.0]}]
    shapes = [plan_key(14, 1, 64 * i, 1024, "") for i in range(1, len(bad) + 2)]
    plans = {entry_key(shapes[0], CANDIDATES): good} | {entry_key(k, CANDIDATES): b for k, b in zip(shapes[1:], bad)}
    path.write_text(json.dumps({"format": 2, "plans": plans}))
    cache = PlanCache(path)
    assert cache.pick(shapes[0], CANDIDATES) == 1, "non-vacuity: the well-formed entry is taken"
    assert [cache.pick(k, CANDIDATES) for k in shapes[1:]] == [None] * len(bad)


def test_a_file_that_cannot_be_written_is_said_and_not_raised(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "gemm-plans"
    blocker.write_text("a file where the directory would be")
    cache = PlanCache(blocker / "p.json")
    cache.record(KEY, CANDIDATES, 0, [1.0, 2.0, 3.0])
    with caplog.at_level(logging.WARNING, logger="vt"):
        cache.save()
    assert any("not written" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_the_machine_tag_changes_with_any_part_or_source_and_only_then() -> None:
    sources = [("skinny_gemm.cu", "__global__ void k() {}"), ("cublaslt.py", "CHAIN = 8")]
    parts = {"gpu": "NVIDIA H200", "cc": "9.0", "sms": 132, "runtime": 13000, "driver_cuda_api": 13000,
             "nvrtc": [13, 0], "cupy": "14.0.0", "cublaslt": 130100, "pdl": True, "skinny_cluster": False}
    tag = machine_tag(parts, sources)
    assert tag == machine_tag(dict(parts), list(sources)) and tag.startswith("nvidia-h200-"), tag
    for field, other in [("gpu", "NVIDIA H100 80GB HBM3"), ("sms", 114), ("cublaslt", 130000), ("pdl", False),
                         ("cupy", "14.1.0")]:
        assert machine_tag({**parts, field: other}, sources) != tag, f"{field} changed, the file did not"
    assert machine_tag(parts, [sources[0], ("cublaslt.py", "CHAIN = 16")]) != tag, "a source changed, the file did not"


def test_the_ranking_sources_are_the_gemm_kernels_headers_included_and_no_other_kernel(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What names the plan file: every kernel a plan's candidates and consumers compile (their instances' files),
    with the headers they include, so a header edit times again; not the decode attention, whose edits leave the
    GEMMs' rankings (and an A/B's shared picks) where they were."""
    import shutil

    from backends import cublaslt
    from backends.kernels import activation, build, norm, skinny_gemm, skinny_mma

    names = {name for name, _ in cublaslt.ranking_sources()}
    files = {i.file for m in (skinny_gemm, skinny_mma, norm, activation) for i in m.CI_INSTANCES}
    assert files <= names and {"cublaslt.py", "launch.py", "build.py"} <= names, sorted(names)
    assert "decode_attention.cu" not in names, sorted(names)
    copy = tmp_path / "kernels"
    shutil.copytree(build.KERNEL_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(build, "KERNEL_DIR", copy)
    before = cublaslt.ranking_sources()
    (copy / "decode_attention.cu").write_text((copy / "decode_attention.cu").read_text() + "\n// an edit\n")
    assert cublaslt.ranking_sources() == before, "an attention kernel's edit moved the GEMM plan file"
    (copy / "common.cuh").write_text((copy / "common.cuh").read_text() + "\n// an edit\n")
    after = dict(cublaslt.ranking_sources())
    assert after["skinny_gemm.cu"] != dict(before)["skinny_gemm.cu"], "a header the skinny GEMM includes changed"


PROCESS = """
import json, sys
import numpy as np
import cupy
from backends import cublaslt
from backends.cuda import CudaBackend

backend = CudaBackend()
lt = backend.blas.lt
rng = np.random.default_rng(0)
a1, b1 = (cupy.asarray(rng.standard_normal(s).astype(np.float16)) for s in ((1, 1024), (1024, 4096)))
a2, b2 = (cupy.asarray(rng.standard_normal(s).astype(np.float16)) for s in ((1, 2048), (2048, 1024)))
c1, c2 = cupy.zeros((1, 4096), np.float32), cupy.zeros((1, 1024), np.float32)
x = cupy.asarray(rng.standard_normal((1, 1024)).astype(np.float32))
backend.xp.matmul(a1, b1, out=c1)  # a plain plan
x0 = x.copy()
assert backend.blas.gemm_add(a2, b2, c2, x)  # a plan with its consumer: x += a2 @ b2
plans = {f"{p.m}x{p.n}x{p.k}+{p.epilogue}": p for p in lt.plans.values()}
loaded = {k: cublaslt._loaded("float16", p.m, p.algo, p.epilogue) for k, p in plans.items()}
graph_x = x0.copy()
stream = backend.new_stream()
backend.begin_capture(stream)  # a capture after the pick: it runs the pick, whose module the cold run loaded
with stream.handle:
    backend.blas.gemm_add(a2, b2, c2, graph_x)
graph = backend.end_capture(stream)
graph.replay(stream)
cupy.cuda.Device().synchronize()
want = x0.get().astype(np.float64) + a2.get().astype(np.float64) @ b2.get().astype(np.float64)
lt.stop_tuning()
print(json.dumps({"picks": {k: cublaslt.fingerprint(p.algo) for k, p in plans.items()},
                  "times": {k: p.times_us for k, p in plans.items()}, "hits": lt.plan_cache.hits,
                  "loaded": loaded,
                  "kernel_library": [k for k, p in plans.items() if cublaslt.name(p.algo) != "cuBLASLt"],
                  "err": float(np.abs(graph_x.get() - want).max() / (1 + np.abs(want).max())),
                  "eager_err": float(np.abs(x.get() - want).max() / (1 + np.abs(want).max()))}))
"""


@pytest.mark.gpu
def test_cuda_a_second_process_takes_the_first_ones_picks_untimed_and_captures_them(tmp_path: Path) -> None:
    """Two processes in turn: the second times nothing (its times are the first's, float for float), runs each
    shape by the first's pick, has each pick's module loaded before its capture (the capture then runs the pick,
    not the heuristic's first), and its results are right."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "VT_CACHE_DIR": str(tmp_path), "VT_GEMM_PLAN_CACHE": "1"}
    root = Path(__file__).resolve().parents[2]
    runs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, "-c", PROCESS], cwd=root, env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert (first["hits"], second["hits"]) == (0, len(first["picks"])), "the first timed every shape, the second none"
    assert second["picks"] == first["picks"] and second["times"] == first["times"], runs
    assert all(second["loaded"].values()), f"a stored pick's module was not loaded before the capture: {second}"
    assert max(second["err"], second["eager_err"], first["err"]) < 1e-2, runs
    assert first["kernel_library"], f"non-vacuity: some pick is the kernel library's, whose module must load: {first}"
