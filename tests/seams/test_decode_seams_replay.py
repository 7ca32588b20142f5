"""Seam tests for the graph driver's replayed steps: replayed logits equal eager ones bit for bit, padding rows
write no request's KV, a slot's demand profile is its own step's, inputs of another shape are refused by name,
the slots share one logits buffer. Apart from test_decode_seams.py (the capture guarantees): each mutant runs its
gate files whole, and these need few of each other's cases."""

from __future__ import annotations

import numpy as np
import pytest

from models.base import prefill
from seams.harness import SeamHarness
from seams.lanes import GRAPHS_REASON, guarantee, is_bypass_lane
from tests.helpers import guarding

MODELS = ["tiny-qwen3", "tiny-qwen3-moe"]
GRAPH_MODELS = [guarantee(m, id=m, reason=GRAPHS_REASON) for m in MODELS]


@pytest.mark.parametrize("model", GRAPH_MODELS)
def test_G2_replayed_logits_equal_eager_logits_bit_for_bit(model: str) -> None:
    graphs, eager = SeamHarness(model), SeamHarness(model, graphs=False)
    graphs.start(5)
    eager.start(5)
    for step in range(6):
        a, b = graphs.step(), eager.step()
        assert np.array_equal(a, b), f"step {step}: replayed logits differ from eager"
    assert graphs.driver.num_replays >= 2 and eager.driver.num_captures == 0, "non-vacuity: both paths ran"


@pytest.mark.parametrize("model", MODELS)
def test_G3_padding_rows_leave_every_other_requests_kv_untouched(model: str) -> None:
    h = SeamHarness(model)
    h.start(3)  # pads to 4: one padding row
    for _ in range(3):  # cold, capture (+replay), replay
        written = {h.slot_of(s, len(s.ids) - 1) for s in h.seqs}
        before = h.kv_snapshot()
        h.step()
        after = h.kv_snapshot()
        trash = h.kv.trash_slot
        for b, a in zip(before, after):
            bf, af = b.reshape(-1, *b.shape[2:]), a.reshape(-1, *a.shape[2:])
            changed = {int(i) for i in np.nonzero((bf != af).any(axis=(1, 2)))[0]}
            assert changed - {trash} <= written, f"KV slots {sorted(changed - written - {trash})} were written"
            assert written <= changed, "non-vacuity: the real rows did write their KV"
    assert h.driver.last_slot is not None and h.driver.last_slot.key[0] == 4
    assert h.is_captured != is_bypass_lane(), "the last step replayed a graph (eager on the bypass lane)"


@pytest.mark.parametrize("model", MODELS)
def test_G5_demand_profile_is_the_decode_steps_own(model: str) -> None:
    """The profile is measured from the step boundary: a big prefill just before the step leaves no
    trace. Same sequences, same width; one harness also prefills a 300-token prompt first."""
    plain, after_prefill = SeamHarness(model), SeamHarness(model)
    plain.start(4, prompt_len=8)
    after_prefill.start(4, prompt_len=8)
    after_prefill.pool.mark_step_boundary()
    prefill(after_prefill.model, [(list(range(3, 303)), list(range(200, 219)))], after_prefill.kv)
    prefill_profile = after_prefill.pool.step_demand_profile()
    plain.step()
    after_prefill.step()
    d_plain, d_after = plain.driver.last_slot.demand, after_prefill.driver.last_slot.demand  # type: ignore[union-attr]
    assert d_plain and d_plain == d_after, f"{d_plain} != {d_after}"
    assert max(prefill_profile) > max(d_plain), "non-vacuity: the prefill needed classes the step does not"


@pytest.mark.parametrize("field, bad", [("tokens", np.zeros(3, np.int64)), ("positions", np.zeros(4, np.float32)),
                                        ("block_tables", np.zeros(4, np.int64))],
                         ids=["tokens", "positions", "block_tables"])
def test_G9_inputs_of_another_shape_or_dtype_are_refused_by_name(field: str, bad: np.ndarray) -> None:
    from vt.errors import GraphInputMismatch

    h = SeamHarness("tiny-qwen3")
    h.start(4)
    h.step()
    h.step()  # captured: a replay is next
    inp = h.inputs()
    setattr(inp, field, bad)
    with guarding(f"a {field} of another shape or dtype is a GraphInputMismatch before the replay", Exception):
        with pytest.raises(GraphInputMismatch, match=field):
            h.driver.step(inp)
    assert h.driver.step(h.inputs()) is not None, "the driver still serves well-formed steps"


def test_the_graph_slots_share_one_logits_buffer() -> None:
    """A ladder of slots holds one [max rows, vocab] logits buffer (the driver's), not one per slot: at
    Qwen3's vocabulary and 256 rows that is 155 MB once instead of per slot."""
    h = SeamHarness("tiny-qwen3")
    for batch in (1, 3, 8):
        h.start(batch)
        h.step()
    slots = list(h.driver.slots.values())
    assert len(slots) == 3, "non-vacuity: three slots of three shapes"
    assert {s.logits.buffer for s in slots} == {h.driver.logits.buffer}
    vocab_bytes = h.model.cfg.vocab_size * 4
    assert all(sum(t.nbytes for t in s.buffers()) < vocab_bytes * s.key[0] for s in slots), (
        "no slot holds logits of its own")
