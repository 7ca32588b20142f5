"""Numerical oracle: our logits against HF transformers' for a prefill and several decode steps.

Nobody here wrote the oracle: the tiny checkpoints are loaded by `transformers` from the same
directory our loader reads, in float32, and every logit must agree within 1e-4.
"""

from __future__ import annotations

import numpy as np
import pytest

from backends.cpu import CpuBackend
from models.base import ForwardBatch, stage_prefill_meta
from models.loader import load_checkpoint, resolve_model
from models.registry import load_model
from seams.lanes import GRAPHS_REASON, guarantee
from vt.engine.worker.graph_driver import DecodeInputs, GraphDriver

TOL = 1e-4
PROMPT = [5, 77, 300, 12, 9, 400, 33, 250, 18, 101, 7, 64, 3, 222, 45, 90, 311, 17]  # 18 tokens: 2 blocks
NUM_DECODE = 6


def hf_logits(path, ids: list[int]) -> np.ndarray:
    import torch
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0].numpy()


def _dev(b: CpuBackend, a: np.ndarray):
    t = b.empty(a.shape, a.dtype)
    b.copy_h2d(t, a)
    return t


@pytest.mark.parametrize("graphs", [pytest.param(False, id="eager"), guarantee(True, id="graph", reason=GRAPHS_REASON)])
@pytest.mark.parametrize("name", ["tiny-qwen3", "tiny-qwen3-moe"])
def test_logits_match_hf_for_prefill_and_decode(name: str, graphs: bool) -> None:
    path = resolve_model(name)
    ck = load_checkpoint(path)
    b = CpuBackend()
    model = load_model(ck, b)
    kv = model.make_kv_cache(num_blocks=8, block_size=16)
    table = [3, 5]  # non-contiguous blocks: the block table is really read
    T = len(PROMPT)
    slots = np.array([table[p // 16] * 16 + p % 16 for p in range(T)], np.int64)
    fb = ForwardBatch(_dev(b, np.array(PROMPT, np.int64)), _dev(b, np.arange(T, dtype=np.int64)), _dev(b, slots),
                      True, logits_rows=_dev(b, np.arange(T, dtype=np.int64)))
    stage_prefill_meta(b, fb, [(0, T, 0, table)])
    logits = b.empty((T, ck.config.vocab_size), np.float32)
    model.forward(fb, kv, logits)
    ours = [b.copy_d2h(logits)]

    driver = GraphDriver(model, kv, max_num_seqs=4, enabled=graphs)
    ids = list(PROMPT)
    for _ in range(NUM_DECODE):
        ids.append(int(np.argmax(ours[-1][-1])))
        p = len(ids) - 1
        inp = DecodeInputs(np.array([ids[-1]]), np.array([p]), np.array([table[p // 16] * 16 + p % 16]),
                           np.array([table]))
        driver.step(inp)
        ours.append(driver.last_logits())
    if graphs:
        assert driver.num_replays > 0, "non-vacuity: the graph path really replayed"

    ref = hf_logits(path, ids)
    np.testing.assert_allclose(ours[0], ref[:T], atol=TOL, rtol=0, err_msg="prefill logits differ from HF")
    for j in range(1, NUM_DECODE + 1):
        np.testing.assert_allclose(ours[j][0], ref[T + j - 1], atol=TOL, rtol=0,
                                   err_msg=f"decode step {j} logits differ from HF")
