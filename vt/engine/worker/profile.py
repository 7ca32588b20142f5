"""The profile run behind --gpu-memory-utilization: what the engine holds on the device besides the KV cache.

With the weights loaded, a throwaway driver over a small KV cache runs the largest steps the configuration
allows, eagerly: the largest prefill bucket and a prefill of max_num_batched_tokens tokens (eager, unsplit, as the
engine runs a step past the buckets) and a decode of max_num_seqs rows with the
sampler. Their temporaries stay in vt's pool afterwards (the engine reuses them); the throwaway KV cache and
driver are freed. So the device memory in use after the run is the weights plus the largest step's peak:
vLLM's profile run, with the pool's high-water mark standing for torch's peak statistics.
"""

from __future__ import annotations

from typing import Any

from vt.backend import Tensor


def profile_non_kv_bytes(model: Any, block_size: int, max_num_seqs: int, max_num_batched_tokens: int,
                         max_model_len: int, used_now: Any) -> int:
    """Device bytes in use after the largest steps, the throwaway KV cache and driver freed. used_now() reads
    the device's bytes in use (total - free)."""
    from vt.engine.worker.graph_driver import GraphDriver

    b = model.backend
    blocks = -(-min(max_model_len, max_num_batched_tokens) // block_size) + 1
    kv = model.make_kv_cache(blocks, block_size)
    driver = GraphDriver(model, kv, max_num_seqs, enabled=False, max_num_batched_tokens=max_num_batched_tokens,
                         max_model_len=max_model_len)
    driver._dummy_prefill(driver._bucket(driver.token_ladder[-1]))
    if max_num_batched_tokens > driver.token_ladder[-1]:  # a step past the largest bucket runs eagerly
        driver.dummy_eager_prefill(max_num_batched_tokens)
    key = (driver.ladder[-1], 1, False, driver.max_width, False, False)
    driver.step(driver._dummy_decode(key))
    b.synchronize()
    throwaway = [*kv.k, *kv.v, driver.logits, driver.hidden, driver.hist, driver.hist_raw, *driver.bias,
                 driver.token_mask, *driver.split,
                 driver.last_sampled,
                 *(t for slot in driver.slots.values() for t in slot.buffers()),
                 *(t for bucket in driver.buckets.values() for t in (bucket.inputs, bucket.token_row, bucket.tiles,
                                                                     bucket.tables) if t is not None),
                 *driver.carry.values()]
    # its pinned staging (host memory: the CPU backend's own buffers, CUDA's freed with their arrays)
    pinned = [*(x for bufs in driver.uploads.spare.values() for x in bufs), *(x for _, _, x in driver.uploads.busy),
              *(x for bufs in driver.readback.spare.values() for x in bufs)]
    throwaway += [x for x in pinned if isinstance(x, Tensor)]
    for buf in {id(t.buffer): t.buffer for t in throwaway}.values():
        b.free(buf)
    b.synchronize()
    return int(used_now())
