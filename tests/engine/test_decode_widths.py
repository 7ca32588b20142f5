"""The graph driver's narrowest block-table width follows the decode attention's partition floor
(VT_DECODE_MIN_PARTITION): a one-row step over a context within the floor pads to a graph whose decode launch is
one partition, no reduce. Under the default floor's width a 128-key floor would split a step over 128 keys or
fewer in two, its second partition empty, plus the reduce launch."""

from __future__ import annotations

import pytest

from backends.kernels import decode_attention
from models.loader import load_checkpoint, resolve_model
from models.registry import load_model
from tests.helpers import flag_set
from vt.engine.worker.graph_driver import GraphDriver, width_bucket
from vt.registry import make_backend

BLOCK = 16


@pytest.mark.parametrize("floor", ["256", "128", "64"])
def test_a_one_row_step_within_the_partition_floor_runs_one_partition(floor: str) -> None:
    model = load_model(load_checkpoint(resolve_model("tiny-qwen3")), make_backend("cpu"), "float32")
    kv = model.make_kv_cache(num_blocks=256, block_size=BLOCK)
    nkv = model.cfg.num_key_value_heads
    with flag_set("VT_DECODE_MIN_PARTITION", floor):
        driver = GraphDriver(model, kv, max_num_seqs=1)
        within = -(-int(floor) // BLOCK)  # blocks of the longest context the floor keeps whole
        parts = {blocks: decode_attention.num_partitions(1, nkv, width_bucket(blocks, driver.min_width), BLOCK)
                 for blocks in (1, within, within + 1)}
    assert parts[1] == parts[within] == 1, f"VT_DECODE_MIN_PARTITION={floor}: partitions by table blocks {parts}"
    assert parts[within + 1] > 1, f"non-vacuity: a context past the {floor}-key floor splits: {parts}"
