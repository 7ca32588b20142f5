"""Tokens between steps on the device (tokens.cu), beside their NumPy twins: `feed_tokens` reads a decode step's
input tokens from the ids the step before sampled, `keep_sampled` stores a step's sampled ids by request slot."""

from __future__ import annotations

from typing import Any

import numpy as np

from backends.kernels.build import Instance, function
from backends.kernels.fused import FusedKernel

CI_INSTANCES = [Instance("tokens.cu", "vt::feed_tokens"), Instance("tokens.cu", "vt::keep_sampled")]
THREADS = 256


def _feed_twin(tokens: np.ndarray, src: np.ndarray, last: np.ndarray) -> None:
    fed = src >= 0
    tokens[fed] = np.maximum(last[src[fed]], 0)  # a failed row's -1 reads as token 0 (tokens.cu)


def _keep_twin(ids: np.ndarray, dst: np.ndarray, last: np.ndarray) -> None:
    kept = dst >= 0
    last[dst[kept]] = ids[kept]


def _launch(cp: Any, name: str, a: Any, index: Any, last: Any) -> None:
    n = int(index.shape[0])
    function(cp, Instance("tokens.cu", f"vt::{name}"))((max(1, -(-n // THREADS)),), (THREADS,),
                                                       (a, index, last, np.int32(n)))


def _feed_cuda(cp: Any, tokens: Any, src: Any, last: Any) -> None:
    _launch(cp, "feed_tokens", tokens, src, last)


def _keep_cuda(cp: Any, ids: Any, dst: Any, last: Any) -> None:
    _launch(cp, "keep_sampled", ids, dst, last)


feed_tokens = FusedKernel("feed_tokens", _feed_twin, _feed_cuda, writes=(0,))
keep_sampled = FusedKernel("keep_sampled", _keep_twin, _keep_cuda, writes=(2,))
