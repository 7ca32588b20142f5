"""The CUDA split sampler's blocks per row follow each step's batch (vt/engine/sample/sampler.py's split_blocks): the
driver holds one scratch at the most blocks a row takes, and each slot views its share at its own rows' count. The
launch reads a row's blocks from the partials' shape, so this is what the kernels run (no draw depends on it: the
GPU lane's tests/engine/test_split_sampler.py runs 2, 16 and 64 blocks a row)."""

from __future__ import annotations

from models.loader import load_checkpoint, resolve_model
from models.registry import load_model
from vt.engine.sample.sampler import SPLIT_MAX, split_blocks
from vt.engine.worker.graph_driver import GraphDriver, split_scratch
from vt.registry import make_backend


def test_each_slot_runs_the_blocks_a_row_its_own_batch_gets() -> None:
    backend = make_backend("cpu")
    model = load_model(load_checkpoint(resolve_model("tiny-qwen3")), backend, "float32")
    kv = model.make_kv_cache(num_blocks=64, block_size=16)
    driver = GraphDriver(model, kv, max_num_seqs=256)
    driver.split = split_scratch(backend, driver.logits.shape[0], SPLIT_MAX)  # as the CUDA driver allocates it
    blocks = {}
    for rows in (1, 32, 64, 256):
        parts, psum, state, counters = driver._slot((rows, 1, False, driver.min_width, False, False)).split
        blocks[rows] = parts.shape[1]
        assert parts.shape == (rows, split_blocks(rows), 256) and psum.shape == (rows, split_blocks(rows))
        assert state.shape == (rows, 8) and counters.shape == (rows,)
    assert blocks[1] > blocks[64] > blocks[256], f"non-vacuity: fewer blocks a row as the batch grows: {blocks}"
