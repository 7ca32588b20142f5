"""Tokens between steps on the device (tokens.cu), beside their NumPy twins: `feed_tokens` reads a decode step's
input tokens from the ids the step before sampled, `keep_sampled` stores a step's sampled ids by request slot, and
`mask_tokens` sets the tokens a structured output's grammar rules out to MASKED_LOGIT before the sampler reads a
row."""

from __future__ import annotations

from typing import Any

import numpy as np

from backends.kernels.build import Instance, function
from backends.kernels.fused import FusedKernel

CI_INSTANCES = [Instance("tokens.cu", "vt::feed_tokens"), Instance("tokens.cu", "vt::keep_sampled"),
                Instance("tokens.cu", "vt::mask_tokens")]
THREADS = 256
MASKED_LOGIT = np.float32(-1e30)  # tokens.cu's: a token a structured output's grammar rules out (finite: see there)


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


def token_bits(mask: np.ndarray, vocab: int) -> np.ndarray:
    """mask [n, words] int32 (token t is bit t % 32 of word t / 32) as [n, vocab] booleans: True where allowed."""
    bits = np.unpackbits(np.ascontiguousarray(mask).view(np.uint8), axis=1, bitorder="little")
    return bits[:, :vocab].astype(bool)


def _mask_twin(logits: np.ndarray, mask: np.ndarray) -> None:
    logits[~token_bits(mask, logits.shape[1])] = MASKED_LOGIT


def _mask_cuda(cp: Any, logits: Any, mask: Any) -> None:
    n, V = (int(d) for d in logits.shape)
    words = int(mask.shape[1])
    function(cp, Instance("tokens.cu", "vt::mask_tokens"))((max(1, -(-words // THREADS)), n), (THREADS,),
                                                           (logits, mask, np.int32(V), np.int32(words)))


mask_tokens = FusedKernel("mask_tokens", _mask_twin, _mask_cuda, writes=(0,))
