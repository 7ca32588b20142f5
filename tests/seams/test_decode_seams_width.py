"""Seam test for the graph driver's block-table width buckets: a graph is rebuilt, not reused, after the table's
width changes, and agrees with eager and with an independent forward. Apart from test_decode_seams.py and
test_decode_seams_replay.py: its ~2 s are needed by its own mutants only."""

from __future__ import annotations

import numpy as np
import pytest

from models.base import prefill
from seams.harness import SeamHarness
from seams.lanes import GRAPHS_REASON, guarantee
from vt.env import flags

MODELS = ["tiny-qwen3", "tiny-qwen3-moe"]
GRAPH_MODELS = [guarantee(m, id=m, reason=GRAPHS_REASON) for m in MODELS]


def _independent_logits(h: SeamHarness) -> np.ndarray:
    """Each sequence's last-step logits from a whole-sequence prefill into a scratch KV cache: no slot, no
    staging, no graph, another attention kernel. What the decode step computed must agree with it."""
    scratch = h.model.make_kv_cache(num_blocks=64, block_size=h.block_size)
    rows = []
    for s in h.seqs:
        toks = s.ids[:-1]  # the step's input is the token before the one it appended
        rows.append(prefill(h.model, [(toks, list(range(-(-len(toks) // h.block_size))))], scratch)[0])
    return np.stack(rows)


@pytest.mark.parametrize("model", GRAPH_MODELS)
def test_G4_graph_is_rebuilt_not_reused_after_the_block_table_width_changes(model: str) -> None:
    graphs, eager = SeamHarness(model), SeamHarness(model, graphs=False)
    # 254-255 tokens: 16 blocks, the driver's narrowest bucket at the default partition floor (one attention
    # partition); the 17th block comes at token 257 and moves the step to the next bucket
    graphs.start(2, prompt_len=253)
    eager.start(2, prompt_len=253)
    widths, want, captures = [], [], []
    for _ in range(8):
        # the narrowest graph that holds the table: one attention partition's blocks at least, never twice as wide
        want.append(max(graphs.inputs().block_tables.shape[1], -(-flags().decode_min_partition // graphs.block_size)))
        a, b = graphs.step(), eager.step()
        assert np.array_equal(a, b), "logits after a width change must match eager"
        err = float(np.abs(a - _independent_logits(graphs)).max())
        assert err < 1e-4, f"the graphed step disagrees with an independent forward by {err:.2e}"
        widths.append(graphs.driver.last_slot.width)  # type: ignore[union-attr]
        captures.append(graphs.driver.num_captures)
    assert all(n <= w < 2 * n for w, n in zip(widths, want)), (
        f"each step replays the graph of its own table's width bucket: {widths} for tables needing {want}")
    assert len(set(widths)) == 2, f"non-vacuity: the width really changed ({widths})"
    first_new = widths.index(widths[-1])
    assert captures[-1] > captures[first_new - 1], "a new capture after the width change"
