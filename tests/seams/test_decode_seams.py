"""Seam tests for the one graph driver over every model: dense and MoE (and the draft), several shapes
(padded ones included). DESIGN.md's pattern: cold step, drain (freed > 0), reset counters,
capture step, allocs_in_step > 0 (the pre-grow really ran, outside the capture), allocs_in_capture == 0.
"""

from __future__ import annotations

import numpy as np
import pytest

from backends.kernels.decode_attention import MIN_PARTITION
from models.base import prefill
from seams.harness import SeamHarness
from seams.lanes import GRAPHS_REASON, guarantee, is_bypass_lane
from vt.errors import CaptureUnsupported

MODELS = ["tiny-qwen3", "tiny-qwen3-moe"]
SHAPES = [1, 3, 8, 13]  # 3 and 13 pad up to the ladder's 4 and 16


GRAPH_MODELS = [guarantee(m, id=m, reason=GRAPHS_REASON) for m in MODELS]


SEAM_CASES = [guarantee(m, S, id=f"{m}-B{S}") for m in MODELS for S in SHAPES]


@pytest.mark.parametrize("model, batch", SEAM_CASES)
def test_G1_capture_allocates_nothing_after_drain(model: str, batch: int) -> None:
    h = SeamHarness(model)
    h.start(batch)
    h.step()
    assert not h.is_captured, "a slot's first step is eager"
    freed = h.pool.drain()
    assert freed > 0, "precondition: the drain really emptied the free lists"
    h.backend.reset_counters()
    h.step()
    assert h.is_captured, "this step captured"
    needed = sum(h.driver.last_slot.demand.values())  # type: ignore[union-attr]
    assert h.backend.allocs_in_step >= needed > 0, (
        f"non-vacuity: the step did allocate: {h.backend.allocs_in_step} driver allocations for a profile of "
        f"{needed} blocks (the pre-grow refills the drained free lists, outside the capture)")
    assert h.backend.allocs_in_capture == 0, f"{h.backend.allocs_in_capture} driver allocation(s) inside the capture"


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("model", [guarantee(m, id=m) for m in MODELS])
def test_G1_without_the_pregrow_the_capture_dies_as_on_the_gpu(model: str, backend: str, monkeypatch) -> None:
    """The production failure, predicted on the CPU and met for real on the GPU: no pre-grow, global
    mode, the first allocation is refused with CUDA's own error."""
    h = SeamHarness(model, backend)
    h.start(4)
    h.step()
    assert h.pool.drain() > 0
    monkeypatch.setattr(h.pool, "pregrow_for_capture", lambda demand: 0)
    h.backend.reset_counters()
    with pytest.raises(CaptureUnsupported, match="cudaErrorStreamCaptureUnsupported: operation not permitted "
                                                 "when stream is capturing"):
        h.step()
    assert h.backend.allocs_in_capture == 1, "refused at the first allocation inside the capture"


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
    # 254-255 tokens: 16 blocks, the driver's narrowest bucket (one attention partition); the 17th block
    # comes at token 257 and moves the step to the next bucket
    graphs.start(2, prompt_len=253)
    eager.start(2, prompt_len=253)
    widths, want, captures = [], [], []
    for _ in range(8):
        # the narrowest graph that holds the table: one attention partition's blocks at least, never twice as wide
        want.append(max(graphs.inputs().block_tables.shape[1], -(-MIN_PARTITION // graphs.block_size)))
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


@pytest.mark.parametrize("model", [guarantee(m, id=m) for m in MODELS])
def test_G7_drain_never_frees_a_live_graphs_temporaries(model: str) -> None:
    """Aliasing rule: a graph replays over its temporaries; a drain must not hand them back to the
    driver while the graph lives. The sanitizer would name the freed buffer on replay."""
    from backends.cpu import CpuBackend
    from vt.errors import IllegalMemoryAccess

    h = SeamHarness(model, backend_obj=CpuBackend(sanitize=True))
    h.start(2)
    h.step()
    h.step()  # captured
    assert h.is_captured and h.pool.stats()["pinned_blocks"] > 0
    h.pool.drain()
    h.step()  # replay: every temporary must still be live memory
    assert h.driver.num_replays >= 1
    slot = h.driver.last_slot
    assert slot is not None
    h.pool.unpin(slot.pinned)  # non-vacuity: without the pins the same drain is a use-after-free
    assert h.pool.drain() > 0, "the unpinned temporaries are freed now"
    with pytest.raises(IllegalMemoryAccess, match="freed"):
        h.step()


SPEC_CASES = [guarantee(m, q, S, id=f"{m}-q{q}-B{S}")
              for m in (*MODELS, "tiny-qwen3-draft") for q in (1, 5) for S in (1, 3, 8)]


@pytest.mark.parametrize("model, q, batch", SPEC_CASES)
def test_G8_spec_keys_capture_nothing(model: str, q: int, batch: int) -> None:
    """Speculative steps (draft q=1 and target verify q=k+1) go through the same driver and get the same
    seam pattern."""
    h = SeamHarness(model)
    h.start(batch, prompt_len=40)  # 41-48 tokens + lookahead stay inside one width bucket (4 blocks)
    h.step(q=q, spec=True)
    key = h.driver.last_slot.key  # type: ignore[union-attr]
    assert key[1:3] == (q, True) and not h.driver.slots[key].is_captured, "a spec key's first step is cold"
    assert h.pool.drain() > 0, "precondition: the drain really emptied the free lists"
    h.backend.reset_counters()
    h.step(q=q, spec=True)
    needed = sum(h.driver.last_slot.demand.values())  # type: ignore[union-attr]
    assert h.is_captured and h.backend.allocs_in_step >= needed > 0, "non-vacuity: the pre-grow refilled"
    assert h.backend.allocs_in_capture == 0, f"{h.backend.allocs_in_capture} allocation(s) in the capture"


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
    with pytest.raises(GraphInputMismatch, match=field):
        h.driver.step(inp)
    assert h.driver.step(h.inputs()) is not None, "the driver still serves well-formed steps"


@pytest.mark.parametrize("model", [guarantee(m, id=m) for m in MODELS])
def test_G7_retiring_one_of_two_graphs_keeps_the_pins_the_other_holds(model: str) -> None:
    """Two live graphs share pinned temporaries; pins are counted, so retiring one and draining frees only
    what no live graph uses, and the other still replays over live memory (the sanitizer would name it)."""
    from backends.cpu import CpuBackend
    from vt.errors import IllegalMemoryAccess

    h = SeamHarness(model, backend_obj=CpuBackend(sanitize=True))
    h.start(8, prompt_len=40)  # two keys of one shape (plain and speculative): their temporaries are alike
    h.step()
    h.step()
    first = h.driver.last_slot
    h.step(spec=True)
    h.step(spec=True)
    second = h.driver.last_slot
    assert first is not None and second is not None and first.is_captured and second.is_captured
    assert first.pinned & second.pinned, "non-vacuity: the two graphs share pinned blocks"
    h.driver._retire(first)
    del h.driver.slots[first.key]
    assert h.pool.drain() > 0, "non-vacuity: retiring the first graph released blocks only it used"
    try:
        h.step(spec=True)
    except IllegalMemoryAccess as e:
        pytest.fail(f"the surviving graph replayed over blocks the drain freed: {e}".splitlines()[0])
    assert h.driver.last_slot is second and second.num_replays == 1, "non-vacuity: the survivor really replayed"


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
