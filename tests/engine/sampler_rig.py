"""Runs the batched sampler kernel as the engine launches it: rows packed by `pack`, tensors on a backend,
one `launch` (tests for the sampler; not a test module)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from vt.engine.sample.sampler import NF, NI, NLP, RowSpec, pack, sample_general, sample_tokens
from vt.engine.worker.graph_driver import split_scratch
from vt.registry import make_backend

# cuda-split: the CUDA sampler with SPLIT blocks per row (issue 29), its draws the same as the one-block kernel's
BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu), pytest.param("cuda-split", marks=pytest.mark.gpu)]
_backends: dict[str, object] = {}


@dataclass(slots=True)
class Sampled:
    ids: np.ndarray
    logits: np.ndarray  # after the sampler's in-place penalties and bans
    lp_vals: np.ndarray
    lp_ids: np.ndarray


def run_sampler(backend: str, logits: np.ndarray, specs: list[RowSpec], general: str = "inline",
                blocks: int | None = None) -> Sampled:
    """general (cuda-split): "inline" runs the general passes in the same launch; "skipped" leaves their rows at -2
    (what a captured decode graph does); "after" runs them as a second launch (what its driver does next). blocks
    (cuda-split): a row's blocks, the engine's choice for the batch unless given."""
    b = _backends.setdefault(backend, make_backend(backend.removesuffix("-split")))
    n, V = logits.shape
    width = max([len(s.history) for s in specs if s.history is not None] or [1])
    rows = pack(specs, n, width)
    bw = rows.bias_ids.shape[1] if rows.bias_ids is not None else 1
    t = [b.empty(shape, dt) for shape, dt in (((n, V), np.float32), ((n, NF), np.float32), ((n, NI), np.int64),
                                               ((n, width), np.int64), ((n, width), np.float32), ((n, bw), np.int64),
                                               ((n, bw), np.float32), ((n, bw), np.float32), ((n,), np.int64),
                                               ((n, NLP), np.float32), ((n, NLP), np.int64))]
    b.copy_h2d(t[0], logits.astype(np.float32))
    b.copy_h2d(t[1], rows.fparams)
    b.copy_h2d(t[2], rows.iparams)
    b.copy_h2d(t[3], rows.hist if rows.hist is not None else np.zeros((n, width), np.int64))
    b.copy_h2d(t[5], rows.bias_ids if rows.bias_ids is not None else np.zeros((n, bw), np.int64))
    b.copy_h2d(t[6], rows.bias_vals if rows.bias_vals is not None else np.zeros((n, bw), np.float32))
    scratch = split_scratch(b, n, blocks) if backend.endswith("-split") else ()
    b.launch(sample_tokens, *t, *scratch, general=general == "inline")
    if general == "after":
        b.launch(sample_general, *t, *scratch)
    out = Sampled(*(b.copy_d2h(t[i]) for i in (8, 0, 9, 10)))
    for x in (*t, *scratch):
        b.free(x.buffer)
    return out


def chi_square_critical(dof: int, z: float = 3.719) -> float:
    """The chi-square quantile at one-sided normal z (3.719: p = 1e-4), by Wilson-Hilferty."""
    if dof == 0:
        return 1e-9
    h = 2.0 / (9.0 * dof)
    return dof * (1.0 - h + z * h**0.5) ** 3
