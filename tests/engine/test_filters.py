"""top-k, top-p and min-p keep exactly the tokens their definitions name, and sampling draws only from
those, at their renormalized probabilities (4 sigma per token)."""

from __future__ import annotations

import numpy as np
import pytest

from vt.engine.sampler import _filter, sample
from vt.engine.sampling import SamplingParams

P = np.array([0.07, 0.3, 0.01, 0.15, 0.05, 0.2, 0.08, 0.03, 0.1, 0.01])  # one distribution, shuffled ranks
LOGITS = np.log(P).astype(np.float32)
DESC = sorted(range(P.size), key=lambda i: -P[i])  # token ids, most likely first


def support(**kw) -> set[int]:
    x = _filter(LOGITS, SamplingParams(temperature=1.0, **kw).resolve({}))
    return {int(i) for i in np.flatnonzero(np.isfinite(x))}


def smallest_set_reaching(p: float) -> set[int]:
    out, total = [], 0.0
    for t in DESC:
        out.append(t)
        total += P[t]
        if total >= p - 1e-9:
            return set(out)
    return set(out)


@pytest.mark.parametrize("k", [1, 3, 7])
def test_top_k_keeps_the_k_most_likely(k: int) -> None:
    assert support(top_k=k) == set(DESC[:k])


@pytest.mark.parametrize("p", [0.3, 0.5, 0.6, 0.9])
def test_top_p_keeps_the_smallest_set_reaching_p(p: float) -> None:
    want = smallest_set_reaching(p)
    assert support(top_p=p) == want and len(want) < P.size, (p, sorted(want))


@pytest.mark.parametrize("m", [0.3, 0.6])  # no token sits exactly on a boundary
def test_min_p_keeps_tokens_at_least_min_p_times_the_top(m: float) -> None:
    assert support(min_p=m) == {t for t in range(P.size) if P[t] >= m * P.max()}


def test_top_p_applies_to_the_top_k_survivors() -> None:
    """top-k first, then top-p over the renormalized survivors (as vLLM composes them)."""
    top3 = DESC[:3]
    renorm = P[top3] / P[top3].sum()
    want = {top3[0]} if renorm[0] >= 0.45 else set(top3[:2])
    assert support(top_k=3, top_p=0.45) == want


def test_draws_land_in_the_support_at_its_renormalized_probabilities() -> None:
    params = SamplingParams(temperature=1.0, top_k=5, top_p=0.9, min_p=0.2).resolve({})
    top5 = DESC[:5]  # the definitions, applied by hand: top-k, then top-p and min-p on the renormalized five
    q5 = P[top5] / P[top5].sum()
    reach = int(np.searchsorted(np.cumsum(q5), 0.9 - 1e-9)) + 1
    keep = sorted(t for i, t in enumerate(top5) if i < reach and q5[i] >= 0.2 * q5.max())
    assert 1 < len(keep) < 5, "non-vacuity: each filter matters here"
    rng, n = np.random.default_rng(0), 20_000
    counts = np.bincount([sample(LOGITS, params, rng) for _ in range(n)], minlength=P.size)
    assert set(np.flatnonzero(counts)) == set(keep), "draws only from the support, and from all of it"
    q = P[keep] / P[keep].sum()
    sigma = np.sqrt(q * (1 - q) / n)
    assert (np.abs(counts[keep] / n - q) < 4 * sigma).all(), (counts[keep] / n, q)
