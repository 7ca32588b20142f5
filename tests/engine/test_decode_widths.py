"""The graph driver's narrowest block-table width follows the decode attention's partition floor
(VT_DECODE_MIN_PARTITION): a one-row step over a context within the floor replays a graph of the floor's width,
whose decode launch is one partition, no reduce. Under the default floor's width a 128-key floor would split a step
over 128 keys or fewer in two, its second partition empty, plus the reduce launch."""

from __future__ import annotations

import pytest

from backends.kernels import decode_attention
from seams.harness import SeamHarness
from tests.helpers import flag_set

BLOCK = 16


def step_width(context: int) -> tuple[int, int]:
    """(keys, partitions) of the graph a one-row decode step over `context` keys replayed."""
    h = SeamHarness("tiny-qwen3", block_size=BLOCK)
    h.start(1, prompt_len=context - 1)  # the prompt, then its greedy token: the step's query is key `context`
    h.step()
    assert h.driver.last_slot is not None  # the slot of its (rows, width) key: its cold step, then its graph
    width = h.driver.last_slot.width
    return width * BLOCK, decode_attention.num_partitions(1, h.model.cfg.num_key_value_heads, width, BLOCK)


@pytest.mark.parametrize("floor", ["256", "128", "64"])
def test_a_one_row_step_within_the_partition_floor_runs_one_partition(floor: str) -> None:
    with flag_set("VT_DECODE_MIN_PARTITION", floor):
        within, past = step_width(int(floor)), step_width(int(floor) + 1)
    assert within == (int(floor), 1), f"VT_DECODE_MIN_PARTITION={floor}: a {floor}-key step replayed (keys, " \
                                      f"partitions) {within}"
    assert past[1] > 1, f"non-vacuity: a context past the {floor}-key floor splits: {past}"
