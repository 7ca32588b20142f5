"""Seam tests for graph pins against drain (the aliasing rule, under the CPU sanitizer): a drain never frees a live
graph's temporaries, and retiring one of two graphs keeps the pins the other holds. Apart from
test_decode_seams.py: their mutants need these cases alone."""

from __future__ import annotations

import pytest

from seams.harness import SeamHarness
from seams.lanes import guarantee
from tests.helpers import guarding

MODELS = ["tiny-qwen3", "tiny-qwen3-moe"]


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
    with guarding("the drain freed a live graph's temporaries: its replay read freed memory", IllegalMemoryAccess):
        h.step()  # replay: every temporary must still be live memory
    assert h.driver.num_replays >= 1
    slot = h.driver.last_slot
    assert slot is not None
    h.pool.unpin(slot.pinned)  # non-vacuity: without the pins the same drain is a use-after-free
    assert h.pool.drain() > 0, "the unpinned temporaries are freed now"
    with pytest.raises(IllegalMemoryAccess, match="freed"):
        h.step()


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
