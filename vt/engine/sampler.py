"""Greedy argmax, and a seeded Gumbel-max draw for random sampling (same lowest-index tie rule)."""

from __future__ import annotations

import numpy as np

from vt.engine.sampling import ResolvedParams


def apply_penalties(logits: np.ndarray, p: ResolvedParams, prompt_ids: np.ndarray,
                    output_ids: np.ndarray) -> np.ndarray:
    """Penalties as vLLM applies them, before temperature: repetition as HF's RepetitionPenaltyLogitsProcessor
    (divide a positive logit, multiply a negative one, for every token of the prompt or the output); presence
    and frequency as OpenAI defines them (subtract, for tokens of the output only)."""
    if not p.has_penalties:
        return logits
    x = logits.astype(np.float64)
    if p.repetition_penalty != 1.0:
        seen = np.unique(np.concatenate([prompt_ids, output_ids]).astype(np.int64))
        x[seen] = np.where(x[seen] > 0, x[seen] / p.repetition_penalty, x[seen] * p.repetition_penalty)
    if output_ids.size and (p.presence_penalty or p.frequency_penalty):
        counts = np.bincount(output_ids.astype(np.int64), minlength=x.size)[: x.size]
        x -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0)
    return x


def _filter(logits: np.ndarray, p: ResolvedParams) -> np.ndarray:
    """Temperature-scaled logits with everything outside top_k / top_p / min_p set to -inf."""
    x = logits.astype(np.float64) / p.temperature
    if 0 < p.top_k < x.size:
        kth = np.partition(x, -p.top_k)[-p.top_k]
        x = np.where(x >= kth, x, -np.inf)
    if p.top_p < 1.0 or p.min_p > 0.0:
        probs = np.exp(x - x.max())
        probs /= probs.sum()
        if p.min_p > 0.0:
            x = np.where(probs >= p.min_p * probs.max(), x, -np.inf)
        if p.top_p < 1.0:  # sort the survivors only (after top-k: k of them, not the vocabulary)
            alive = np.flatnonzero(np.isfinite(x))
            order = alive[np.argsort(-probs[alive], kind="stable")]
            cum = np.cumsum(probs[order])
            keep = order[: int(np.searchsorted(cum, p.top_p)) + 1]  # smallest set reaching top_p
            mask = np.full(x.shape, -np.inf)
            mask[keep] = 0.0
            x = x + mask
    return x


def sample(logits: np.ndarray, p: ResolvedParams, rng: np.random.Generator | None) -> int:
    """One token from one row of logits. np.argmax takes the lowest index among ties, in both paths."""
    if p.is_greedy:
        return int(np.argmax(logits))
    assert rng is not None, "random sampling needs the request's generator"
    x = _filter(logits, p)
    u = rng.random(x.shape[0])
    gumbel = -np.log(-np.log(np.clip(u, 1e-300, 1.0 - 1e-16)))
    return int(np.argmax(x + gumbel))


def top_logprobs(logits: np.ndarray, n: int, token: int) -> dict[int, float]:
    """The model's log-probabilities (log-softmax of the raw logits, as vLLM returns by default) of the n
    most likely tokens and of the sampled one."""
    x = logits.astype(np.float64)
    lse = x.max() + np.log(np.exp(x - x.max()).sum())
    top = np.argpartition(-x, n)[:n] if 0 < n < x.size else np.arange(x.size if n else 0)
    return {int(t): float(x[t] - lse) for t in (*top, token)}
