"""scripts/prefix-ttft --anatomy on the CPU backend (tiny-qwen3): the prefix hit's TTFT split at its graph's launch,
the graphs the tail's then the decode step's; refused, in one line, where no graph is captured."""

from __future__ import annotations

from pathlib import Path

from tests.engine.lane_scripts_rig import prefix_ttft as _prefix_ttft
from tests.engine.lane_scripts_rig import prefix_ttft_row as _prefix_ttft_row


def test_prefix_ttft_splits_the_hits_ttft_at_its_graphs_launch(tmp_path: Path) -> None:
    """--anatomy: the host's part until the hit's graph launches lies inside its TTFT (a stamp at the decode step's
    staging, after the first token, does not), and the graphs are the tail's (16 rows, run whole) then the one-row
    decode step's (swapped, they fail here). The rest (TTFT less the other two) is not asserted: the graph's time is
    taken apart from the TTFT, at the run's end, and a loaded machine can make it the larger."""
    out, row = _prefix_ttft_row(tmp_path, "--anatomy")
    assert (row["hit_graph_rows"], row["decode_graph_rows"]) == (16, 1), row
    assert 0 < row["hit_prelaunch_ms"] < row["ttft_hit_ms"], row
    assert row["hit_graph_ms"] > 0 and row["decode_graph_ms"] > 0, row
    assert "hit anatomy (ms): host until its graph's launch" in out, out[-2000:]
    off = _prefix_ttft(tmp_path, "--anatomy", graphs="0")  # no graph to replay: refused before the engine is built
    lines = [x for x in off.stderr.splitlines() if x.strip() and not x.startswith(("usage:", " "))]
    assert (off.returncode, len(lines)) == (2, 1) and "needs graphs captured" in lines[0], off.stderr[-2000:]


def test_prefix_ttft_sends_the_prompt_again_whole_with_no_hit_tail(tmp_path: Path) -> None:
    """--hit-tail 0: each hit is its miss's prompt again, cached through its last token, so it computes that token
    alone (one prefill token a hit, where the default's hits compute a block each) and its first step's graph is
    one row."""
    _, row = _prefix_ttft_row(tmp_path, "--anatomy", "--hit-tail", "0")
    n, rounds = row["prompt_len"], row["rounds"]
    assert row["hit_tail"] == 0 and row["hit_graph_rows"] == 1, row
    assert row["prefill_tokens"] == (rounds + 1) * n + rounds, (
        f"{row['prefill_tokens']} prefill tokens: the warm-up and {rounds} misses of {n}, then a token a hit")
    assert row["cache_hits"] == rounds * (n - 1), row
