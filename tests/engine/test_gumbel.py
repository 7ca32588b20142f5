"""A row of temperature alone draws by Gumbel-max (vt/engine/sample/sampler.py, issue 29): the largest tempered logit
plus its token's Gumbel noise. The noise is built from correctly rounded float32 operations only (`log_f32`), so the
CUDA kernel's copy computes the same bits; these tests hold the twin to a float32 log and to the Gumbel
distribution, and the noise to its row's key and its token alone. (The draws' distribution: test_filters.py's
chi-square, `plain` case; the kernel against the twin: test_split_sampler.py in the GPU lane.)"""

from __future__ import annotations

import numpy as np

from vt.engine.sample.sampler import gumbel_noise, log_f32, row_hash

ULP_BOUND = 2.5e-7  # float32's epsilon is 1.19e-7: two units in the last place, relative


def _sweep() -> np.ndarray:
    """Positive normal float32s: every binade from 2**-126 to 2**127, both sides of sqrt(2) within one (the
    mantissa's two branches), and the uniforms next to 1 whose log is the noise's steepest part."""
    wide = np.geomspace(np.finfo(np.float32).tiny, np.finfo(np.float32).max / 2, 400_001).astype(np.float32)
    binade = np.linspace(0.5, 2.0, 100_001, dtype=np.float32)
    near_one = (1.0 - np.arange(1, 4096) * 2.0**-24).astype(np.float32)
    return np.concatenate([wide, binade, near_one])


def test_log_f32_is_the_float32_log() -> None:
    y = _sweep()
    ref = np.log(y.astype(np.float64))
    got = log_f32(y).astype(np.float64)
    rel = np.abs(got - ref) / np.maximum(np.abs(ref), np.finfo(np.float32).tiny)
    worst = int(np.argmax(rel))
    assert rel.max() <= ULP_BOUND, f"log_f32({y[worst]!r}) = {got[worst]!r}, log = {ref[worst]!r}"
    mant = y.view(np.uint32) & 0x7FFFFF | 0x3F800000
    assert (mant > 0x3FB504F3).any() and (mant <= 0x3FB504F3).any(), "non-vacuity: both halves of a binade"
    assert np.ptp(np.log2(y)) > 250 and (np.abs(ref) < 1e-6).any(), "non-vacuity: the exponents and y next to 1"


def test_the_noise_follows_the_gumbel_distribution() -> None:
    """1.28 M tokens' noise (64 rows' keys): Kolmogorov-Smirnov against exp(-exp(-g)) below its p = 0.001 bound; the
    same statistic tells a Gumbel shifted by 0.01 apart (non-vacuity)."""
    keys = row_hash(np.arange(64) * 7919 + 3, np.arange(64))
    g = np.sort(gumbel_noise(keys, 20_000).ravel().astype(np.float64))
    n = g.size
    bound = 1.95 / np.sqrt(n)

    def ks(loc: float) -> float:
        cdf = np.exp(-np.exp(-(g - loc)))
        return float(max((np.arange(1, n + 1) / n - cdf).max(), (cdf - np.arange(n) / n).max()))

    assert ks(0.0) < bound, f"KS {ks(0.0):.5f} against {bound:.5f}"
    assert ks(0.01) > bound, "non-vacuity: the statistic tells a shift of 0.01"
    assert abs(g.mean() - np.euler_gamma) < 0.01 and abs(g.var() - np.pi**2 / 6) < 0.02


def test_a_tokens_noise_is_its_rows_key_and_its_index_alone() -> None:
    """The same noise whatever the vocabulary's length and whatever rows are beside it (a seeded draw depends on no
    neighbour); tokens and rows uncorrelated."""
    keys = row_hash(np.array([11, 12, 13]), np.array([0, 0, 5]))
    both = gumbel_noise(keys, 4096)
    assert np.array_equal(gumbel_noise(keys[1:2], 1000)[0], both[1, :1000])
    assert np.array_equal(gumbel_noise(keys[::-1], 4096)[::-1], both)
    assert abs(np.corrcoef(both[0, :-1], both[0, 1:])[0, 1]) < 0.05, "neighbouring tokens"
    assert abs(np.corrcoef(both[0], both[2])[0, 1]) < 0.05, "two rows' noise"
    assert len(np.unique(both)) > 0.99 * both.size, "non-vacuity: the noise is not a few repeated values"


def test_the_float64_noise_bounds_the_exact_noise_for_every_uniform() -> None:
    """gumbel_argmax scores exactly only the tokens whose float64 noise plus NOISE_SLACK can reach the row's best
    float64 noise less it: exact only if the two float32 bounds hold the exact noise, for all 2**23 uniforms."""
    from vt.engine.sample.sampler import NOISE_SLACK

    u = ((np.arange(1 << 23, dtype=np.uint32) | np.uint32(0x3F800000)).view(np.float32) - np.float32(1)
         + np.float32(2.0**-24))
    exact = -log_f32(-log_f32(u))
    g = -np.log(-np.log(u.astype(np.float64)))
    lower, upper = (g - NOISE_SLACK).astype(np.float32), (g + NOISE_SLACK).astype(np.float32)
    assert np.count_nonzero(lower > exact) == 0, "uniforms whose lower bound is above their exact noise"
    assert np.count_nonzero(upper < exact) == 0, "uniforms whose upper bound is below their exact noise"
    assert float(np.abs(g - exact).max()) < 1e-5, "the float64 noise is within 1e-5 of the exact"


def test_the_pruned_argmax_is_the_argmax_of_every_exact_score() -> None:
    """gumbel_argmax against argmax(x + gumbel_noise) over rows of every kind the sampler meets: wide and narrow
    logits, all negative, huge (a low temperature), -inf bans, ties of the logits."""
    from vt.engine.sample.sampler import gumbel_argmax

    rng = np.random.default_rng(35)
    V = 50_000
    rows = [rng.standard_normal(V) * s + c for s, c in ((3, 0), (0.01, 0), (2, -40), (300, 5_000), (1, 0))]
    rows[4][rng.integers(0, V, V // 2)] = -np.inf
    rows.append(np.zeros(V))  # every logit equal: the noise alone decides
    x = np.stack(rows).astype(np.float32)
    keys = row_hash(np.arange(100, 100 + len(rows)), np.arange(len(rows)))
    with np.errstate(invalid="ignore"):
        want = np.argmax(x + gumbel_noise(keys, V), axis=1)
    assert gumbel_argmax(x, keys).tolist() == want.tolist()
    assert len(set(want.tolist())) == len(rows), "non-vacuity: every row draws its own token"
