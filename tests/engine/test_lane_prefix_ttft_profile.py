"""scripts/prefix-ttft --host-profile on the CPU backend (tiny-qwen3): the hits' cProfile in both orders, and the
row's record of whether the engine overlapped. Apart from test_lane_prefix_ttft_anatomy.py: no mutant gates this
test, and in its own file none pays its seconds where gate files run whole (the mutation runner's --whole-files)."""

from __future__ import annotations

from pathlib import Path

from tests.engine.lane_scripts_rig import prefix_ttft_row as _prefix_ttft_row


def test_prefix_ttft_profiles_the_hits_host_work(tmp_path: Path) -> None:
    """--host-profile N prints the hits' cProfile (the engine's step among the functions), in both orders; the row
    records whether the engine overlapped (on the CPU it never does, so --sync's effect on CUDA is the lane's)."""
    out, row = _prefix_ttft_row(tmp_path, "--host-profile", "5", "--sync")
    for order in ("cumulative", "tottime"):
        assert f"host profile of 3 hits, by {order} time" in out, out[-3000:]
    assert "llm_engine.py" in out and "(step)" in out, out[-3000:]
    assert row["async_scheduling"] is False and row["ttft_hit_ms"] > 0, row
