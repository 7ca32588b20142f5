"""Speculative verification as one pure function, for every proposer.

Greedy: the longest prefix of the proposals the target agrees with, plus the target's own token.
Sampling: standard speculative sampling (accept draft token d with min(1, p(d)/q(d)), else draw from
the residual max(p - q, 0)), which preserves the target's distribution exactly. A proposer without a
distribution (n-gram) proposes deterministically: q is one-hot at its token.
"""

from __future__ import annotations

import numpy as np

from vt.engine.sampler import _filter
from vt.engine.sampling import ResolvedParams


def probs(logits: np.ndarray, params: ResolvedParams) -> np.ndarray:
    """The distribution the sampler draws from: temperature and the top-k / top-p / min-p filters."""
    x = _filter(logits, params)
    p = np.exp(x - x.max())
    return p / p.sum()


def draw(p: np.ndarray, rng: np.random.Generator) -> int:
    cdf = np.cumsum(p)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), p.size - 1))


def one_hot(token: int, size: int) -> np.ndarray:
    q = np.zeros(size)
    q[token] = 1.0
    return q


def rejection_sample(target: np.ndarray, proposals: list[int], draft_probs: list[np.ndarray] | None,
                     params: ResolvedParams, rng: np.random.Generator | None) -> list[int]:
    """target: [k+1, vocab] logits at the verified positions. Returns the accepted proposals and one
    more token (the correction at the first rejection, or the bonus after a full accept)."""
    out: list[int] = []
    if params.is_greedy:
        for i, d in enumerate(proposals):
            g = int(np.argmax(target[i]))
            if d != g:
                return [*out, g]
            out.append(d)
        return [*out, int(np.argmax(target[len(proposals)]))]
    if rng is None:
        raise ValueError("speculative sampling needs the request's generator")
    for i, d in enumerate(proposals):
        p = probs(target[i], params)
        q = draft_probs[i] if draft_probs is not None else one_hot(d, p.size)
        if rng.random() < min(1.0, p[d] / max(q[d], 1e-30)):
            out.append(d)
            continue
        residual = np.maximum(p - q, 0.0)
        return [*out, draw(residual if residual.sum() > 0 else p, rng)]
    return [*out, draw(probs(target[len(proposals)], params), rng)]
