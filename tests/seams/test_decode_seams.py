"""Seam tests for the one graph driver over every model: dense and MoE (and the draft), several shapes
(padded ones included). DESIGN.md's pattern: cold step, drain (freed > 0), reset counters,
capture step, allocs_in_step > 0 (the pre-grow really ran, outside the capture), allocs_in_capture == 0.
The driver's other guarantees sit beside this file, one file per group of mutants that needs them (each mutant
runs its gate files whole): replayed steps (test_decode_seams_replay.py), width buckets
(test_decode_seams_width.py), pins against drain (test_decode_seams_pins.py).
"""

from __future__ import annotations

import pytest

from seams.harness import SeamHarness
from seams.lanes import guarantee
from tests.helpers import guarding
from vt.errors import CaptureUnsupported

MODELS = ["tiny-qwen3", "tiny-qwen3-moe"]
SHAPES = [1, 3, 8, 13]  # 3 and 13 pad up to the ladder's 4 and 16


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
    with guarding("the capture allocated after the drain (the pre-grow left it short)", CaptureUnsupported):
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
    with guarding("the spec key's capture allocated after the drain (the pre-grow left it short)", CaptureUnsupported):
        h.step(q=q, spec=True)
    needed = sum(h.driver.last_slot.demand.values())  # type: ignore[union-attr]
    assert h.is_captured and h.backend.allocs_in_step >= needed > 0, "non-vacuity: the pre-grow refilled"
    assert h.backend.allocs_in_capture == 0, f"{h.backend.allocs_in_capture} allocation(s) in the capture"


