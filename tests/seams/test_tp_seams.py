"""The seam test on every rank of a TP = 2 group, across real processes (seams/tp.py): a capture that is
the group's first collective allocates nothing (the pre-grow's warm-up set every kind up outside it), and
the decode capture after a drain allocates nothing, with non-vacuity guards on each rank."""

from __future__ import annotations

import json
import sys

import pytest

from seams.lanes import GRAPHS_REASON, guarantee
from seams.ranks import first_failure, run_ranks
from vt.parallel import host_store

pytest.importorskip("torch.distributed")


@pytest.fixture(scope="module")
def ranks(request: pytest.FixtureRequest) -> list[dict]:
    store, model = host_store(2, 60.0), request.param  # held here until both ranks are done
    results = run_ranks([[sys.executable, "-m", "seams.tp", model, str(r), "2", str(store.port)] for r in range(2)],
                        timeout=240)
    assert all(r.ok for r in results), f"a rank failed: {first_failure(results)}"
    return [json.loads(r.stdout.strip().splitlines()[-1]) for r in results]


MODELS = [guarantee(m, id=m, reason=GRAPHS_REASON) for m in ("tiny-qwen3", "tiny-qwen3-moe")]


@pytest.mark.parametrize("ranks", MODELS, indirect=True)
def test_a_capture_that_is_the_groups_first_collective_allocates_nothing(ranks: list[dict]) -> None:
    for r in ranks:
        first = r["first_collectives"]
        assert first["failed"] is None and first["allocs_in_capture"] == 0, (
            f"rank {r['rank']}: the capture allocated: {first}")
        assert r["lazy_setups_before_capture"] >= 2, (
            f"rank {r['rank']}: non-vacuity: the pre-grow set both kinds of collective up, outside the capture")


@pytest.mark.parametrize("ranks", MODELS, indirect=True)
def test_the_decode_capture_allocates_nothing_after_drain_on_every_rank(ranks: list[dict]) -> None:
    for r in ranks:
        assert r["capture_error"] is None, f"rank {r['rank']}: the capture failed: {r['capture_error']}"
        assert not r["cold_captured"] and r["freed"] > 0, f"rank {r['rank']}: precondition: cold step, real drain"
        assert r["captured"] and r["allocs_in_step"] > 0, f"rank {r['rank']}: non-vacuity: the pre-grow allocated"
        assert r["allocs_in_capture"] == 0, f"rank {r['rank']}: {r['allocs_in_capture']} allocation(s) in capture"
