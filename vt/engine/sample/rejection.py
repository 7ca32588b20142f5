"""Speculative verification as one pure function, for every proposer.

Proposals are deterministic (the draft model proposes its argmax; n-gram lookup its match), so the
draft's distribution is one-hot, and speculative sampling's rule (accept d with min(1, p(d)/q(d)), else
draw from the residual max(p - q, 0)) becomes: draw t from the target p and accept d when t == d; on a
mismatch, t itself is the residual draw (p restricted to tokens != d, renormalized). The target's
draws are the sampler's own, keyed by (seed, output position), so a request's tokens with speculation
are exactly its tokens without: greedy or sampled, seeded or not.
"""

from __future__ import annotations


def accept(sampled: list[int], proposals: list[int]) -> list[int]:
    """sampled: the target's token at each verified position (k+1 of them). Returns the accepted
    proposals and one more token: the target's own at the first mismatch, or the bonus after a full
    accept."""
    out: list[int] = []
    for d, t in zip(proposals, sampled):
        if d != t:
            return [*out, t]
        out.append(d)
    return [*out, sampled[len(out)]]
