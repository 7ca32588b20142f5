"""The batched sampler (vt/engine/sample/sampler.py), run as the engine runs it: one launch over many rows on a
backend (the CPU's NumPy kernel; the CUDA kernel in the GPU lane). top-k, top-p and min-p keep exactly
the tokens their definitions name; draws come only from those, at their renormalized probabilities (a
chi-square test against the NumPy reference distribution); ties, bans and non-finite rows."""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine.sampler_rig import BACKENDS, chi_square_critical, run_sampler
from vt.engine.sample.sampler import RowSpec, support

P = np.array([0.07, 0.3, 0.01, 0.15, 0.05, 0.2, 0.08, 0.03, 0.1, 0.01])  # one distribution, shuffled ranks
LOGITS = np.log(P).astype(np.float32)
DESC = sorted(range(P.size), key=lambda i: -P[i])  # token ids, most likely first
NUM_DRAWS = 20_000


def kept(**kw) -> set[int]:
    idx, w = support(LOGITS, kw.get("top_k", 0), kw.get("top_p", 1.0), kw.get("min_p", 0.0))
    return {int(i) for i in idx[w > 0]}


def by_definition(top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0) -> list[int]:
    """The filters' definitions applied by hand to P: top-k, then min-p (against the top probability),
    then top-p over the survivors renormalized."""
    keep = [t for t in (DESC[:top_k] if top_k else DESC) if P[t] >= min_p * P.max()]
    return sorted(smallest_set_reaching(top_p, keep) if top_p < 1.0 else keep)


def smallest_set_reaching(p: float, among: list[int]) -> set[int]:
    mass = P[among] / P[among].sum()
    out, total = [], 0.0
    for t, m in zip(among, mass):
        out.append(t)
        total += m
        if total >= p - 1e-9:
            break
    return set(out)


@pytest.mark.parametrize("k", [1, 3, 7])
def test_top_k_keeps_the_k_most_likely(k: int) -> None:
    assert kept(top_k=k) == set(DESC[:k])


@pytest.mark.parametrize("p", [0.3, 0.5, 0.6, 0.9])
def test_top_p_keeps_the_smallest_set_reaching_p(p: float) -> None:
    want = smallest_set_reaching(p, DESC)
    assert kept(top_p=p) == want and len(want) < P.size, (p, sorted(want))


@pytest.mark.parametrize("m", [0.3, 0.6])  # no token sits exactly on a boundary
def test_min_p_keeps_tokens_at_least_min_p_times_the_top(m: float) -> None:
    assert kept(min_p=m) == {t for t in range(P.size) if P[t] >= m * P.max()}


def test_top_p_applies_to_the_top_k_survivors() -> None:
    """top-k first, then top-p over the renormalized survivors (as vLLM composes them)."""
    want = smallest_set_reaching(0.45, DESC[:3])
    assert kept(top_k=3, top_p=0.45) == want and want != smallest_set_reaching(0.45, DESC), "non-vacuity"


def _draws(backend: str, spec: RowSpec, n: int = NUM_DRAWS) -> np.ndarray:
    """n draws of one row: the same logits in every row, each row its own output position."""
    specs = [RowSpec(**{**_fields(spec), "counter": i}) for i in range(n)]
    return run_sampler(backend, np.tile(LOGITS, (n, 1)), specs).ids


def _fields(spec: RowSpec) -> dict:
    return {f: getattr(spec, f) for f in spec.__slots__}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kw", [{}, {"top_k": 5}, {"top_p": 0.8}, {"min_p": 0.3}, {"top_k": 5, "top_p": 0.9,
                                                                                  "min_p": 0.2}],
                         ids=["plain", "top_k", "top_p", "min_p", "all"])
def test_draws_follow_the_renormalized_support_chi_square(backend: str, kw: dict) -> None:
    """Against the reference distribution (the definitions applied to P by hand, renormalized); chi-square
    at p = 1e-4."""
    keep = by_definition(**kw)
    assert keep == sorted(kept(**kw)), "the NumPy reference agrees with the definitions"
    ids = _draws(backend, RowSpec(temperature=1.0, seed=7, **kw))
    counts = np.bincount(ids, minlength=P.size)
    assert set(np.flatnonzero(counts)) == set(keep), "draws only from the support, and from all of it"
    expected = P[keep] / P[keep].sum() * NUM_DRAWS
    stat = float(((counts[keep] - expected) ** 2 / expected).sum())
    assert stat < chi_square_critical(len(keep) - 1), f"chi-square {stat:.1f} over {len(keep) - 1} dof"
    if len(keep) > 1:
        uniform = np.full(len(keep), NUM_DRAWS / len(keep))
        assert ((counts[keep] - uniform) ** 2 / uniform).sum() > chi_square_critical(len(keep) - 1), (
            "non-vacuity: the test tells these probabilities from uniform ones")


@pytest.mark.parametrize("backend", BACKENDS)
def test_temperature_sharpens_and_zero_is_argmax_with_the_lowest_index_on_ties(backend: str) -> None:
    tied = np.array([[0.5, 2.0, 1.0, 2.0]], np.float32)
    assert run_sampler(backend, tied, [RowSpec(temperature=0.0)]).ids.tolist() == [1]
    cold = np.bincount(_draws(backend, RowSpec(temperature=0.25, seed=3), 4000), minlength=P.size)
    hot = np.bincount(_draws(backend, RowSpec(temperature=1.0, seed=3), 4000), minlength=P.size)
    assert cold[DESC[0]] > hot[DESC[0]] + 500, "a low temperature concentrates the draws on the top token"


@pytest.mark.parametrize("backend", BACKENDS)
def test_banned_tokens_are_never_drawn_and_non_finite_rows_fail_alone(backend: str) -> None:
    logits = np.tile(LOGITS, (4, 1))
    logits[1, 4] = logits[3, 6] = np.nan
    specs = [RowSpec(temperature=0.0, banned=(DESC[0], DESC[1])), RowSpec(temperature=1.0),
             RowSpec(temperature=0.0), RowSpec(temperature=0.0)]
    ids = run_sampler(backend, logits, specs).ids.tolist()
    assert ids == [DESC[2], -1, DESC[0], -1]
    draws = _draws(backend, RowSpec(temperature=1.0, seed=1, banned=(DESC[0],)), 2000)
    assert DESC[0] not in set(draws.tolist()) and len(set(draws.tolist())) > 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_row_whose_penalty_overflows_samples_minus_one_beside_rows_that_draw(backend: str) -> None:
    """repetition 1e-39 divides a positive logit of the row's history past float32's range: the tempered row's
    largest value is +inf and its masses are NaN. The row samples -1 under each of the sampler's draws (the plain
    mass, top-k's candidates, top-p's general passes, min-p; greedy takes the argmax, +inf), as the reference
    does; the same rows without the penalty draw what the reference draws."""
    logits = np.tile(LOGITS + 5.0, (10, 1))  # every logit positive: the penalty divides it
    kinds = [{}, {"top_k": 5}, {"top_p": 0.8}, {"min_p": 0.3}]
    over = [RowSpec(temperature=1.0, seed=9, repetition=1e-39, history=np.array([DESC[4]]), num_prompt=1, **k)
            for k in kinds]
    clean = [RowSpec(temperature=1.0, seed=9, **k) for k in kinds]
    greedy = [RowSpec(temperature=0.0, repetition=1e-39, history=np.array([DESC[4]]), num_prompt=1),
              RowSpec(temperature=0.0)]
    specs = [*over, *clean, *greedy]
    want = run_sampler("cpu", logits, specs).ids.tolist()
    assert want[:4] == [-1] * 4 and min(want[4:]) >= 0, want  # the reference's own rule
    assert want[8] == DESC[4] and want[9] == DESC[0], "non-vacuity: greedy takes the overflowed token"
    assert run_sampler(backend, logits, specs).ids.tolist() == want


@pytest.mark.gpu
def test_the_cuda_sampler_draws_what_the_numpy_reference_draws_at_a_real_vocabulary() -> None:
    """32 rows of a 151,936-token vocabulary, each with other parameters (greedy, temperature, Qwen3's
    top-k 20 + top-p 0.95, min-p, top-p alone, penalties, logprobs): the same tokens on both backends
    (a 1-ulp difference between expf and NumPy's exp may move a draw that sits on a boundary: at most one
    row of 32), and the same top logprobs."""
    V, rng = 151_936, np.random.default_rng(5)
    logits = (rng.standard_normal((32, V)) * 3).astype(np.float32)
    kinds = [dict(temperature=0.0), dict(temperature=0.7), dict(temperature=0.6, top_k=20, top_p=0.95),
             dict(temperature=1.0, min_p=0.05), dict(temperature=1.0, top_p=0.9),
             dict(temperature=0.8, repetition=1.3, presence=0.5, frequency=0.2), dict(temperature=0.0, repetition=2.0),
             dict(temperature=1.0, num_logprobs=6)]
    hist = rng.integers(0, V, 300)
    specs = [RowSpec(**kinds[i % len(kinds)], seed=1000 + i, counter=i, history=hist, num_prompt=200)
             for i in range(32)]
    cpu, gpu = run_sampler("cpu", logits, specs), run_sampler("cuda", logits, specs)
    same = cpu.ids == gpu.ids
    assert same.sum() >= 31, f"rows that differ: {np.flatnonzero(~same).tolist()} {cpu.ids[~same]} vs {gpu.ids[~same]}"
    lp_rows = [i for i, s in enumerate(specs) if s.num_logprobs]
    assert lp_rows, "non-vacuity: some rows asked for logprobs"
    for i in lp_rows:
        assert cpu.lp_ids[i, :5].tolist() == gpu.lp_ids[i, :5].tolist()
        np.testing.assert_allclose(gpu.lp_vals[i, :5], cpu.lp_vals[i, :5], atol=1e-4)
    assert len(set(cpu.ids.tolist())) > 16, "non-vacuity: the rows drew different tokens"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_top_p_too_small_for_one_unit_of_mass_keeps_the_top_token(backend: str) -> None:
    """top_p * total mass < 1 (top_p of 1e-13): the nucleus is the top token, never nothing (which drew the last
    token of the vocabulary on CUDA)."""
    ids = _draws(backend, RowSpec(temperature=1.0, top_p=1e-13, seed=2), 500)
    assert set(ids.tolist()) == {DESC[0]}
    wide = _draws(backend, RowSpec(temperature=1.0, top_p=0.5, seed=2), 500)
    assert len(set(wide.tolist())) > 1, "non-vacuity: a usual top_p keeps more than the top token"
