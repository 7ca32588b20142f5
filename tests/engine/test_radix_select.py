"""The sampler's thresholds (top-k, top-p) are keys found by radix selection over histograms that each of the
CUDA kernel's SPLIT blocks per row counts for its share of the vocabulary, then merged: the NumPy reference
(vt/engine/sample/sampler.py) counts them the same way. Against the definitions by sorting, at a vocabulary wide
enough that every block holds tokens that matter."""

from __future__ import annotations

import numpy as np
import pytest

from vt.engine.sample.sampler import MASS_SCALE, SPLIT, keys, support

V = 6000


def by_sorting(x: np.ndarray, top_k: int, top_p: float) -> set[int]:
    k = keys(x).astype(np.int64)
    order = np.argsort(-k, kind="stable")
    idx = np.arange(V) if top_k == 0 else np.flatnonzero(k >= k[order[top_k - 1]])
    w = np.floor(np.exp(x[idx] - x.max()).astype(np.float32) * MASS_SCALE).astype(np.float64)
    if top_p < 1.0:
        target = np.floor(top_p * w.sum())
        desc = np.argsort(-k[idx], kind="stable")
        reach = int(np.searchsorted(np.cumsum(w[desc]), target, side="left"))
        idx = idx[k[idx] >= k[idx][desc[min(reach, desc.size - 1)]]]
    return set(idx.tolist())


@pytest.mark.parametrize("top_k, top_p", [(120, 1.0), (400, 1.0), (0, 0.5), (0, 0.9), (300, 0.8)])
def test_thresholds_merge_every_blocks_partial_histogram(top_k: int, top_p: float) -> None:
    rng = np.random.default_rng(top_k + int(top_p * 100))
    x = (rng.standard_normal(V) * 1.5).astype(np.float32)
    idx, w = support(x, top_k, top_p, 0.0)
    got = set(idx[w > 0].tolist())
    want = by_sorting(x, top_k, top_p)
    assert got == want, f"{len(got ^ want)} tokens differ"
    blocks = {t * SPLIT // V for t in want}
    assert len(blocks) == SPLIT, "non-vacuity: the kept tokens fall in every block of the vocabulary"
