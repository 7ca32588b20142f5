"""The race draw (VT_TEMPERATURE_DRAW=race, issue 29): a temperature-only row draws the token of its largest tempered
logit plus Gumbel noise, one pass over the vocabulary where the mass draw makes two (its noise reaches 28.4, so a
token up to ~31 nats below the max can win, past the mass draw's 22.2). Its noise is float32
arithmetic that the NumPy reference and the CUDA kernels repeat one operation for one, so both backends draw the
same token; the draws follow softmax(logits / temperature) (chi-square against the distribution itself), depend on
a row's own seed and output position only, and a row that overflows fails alone, as under the mass draw."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import vt.env
from tests.engine.sampler_rig import BACKENDS, chi_square_critical, run_sampler
from vt.engine.sample.sampler import RowSpec, gumbel_of_hash, ln_f32
from vt.engine.sample.sampler import race as race_winner

P = np.array([0.07, 0.3, 0.01, 0.15, 0.05, 0.2, 0.08, 0.03, 0.1, 0.01])
LOGITS = np.log(P).astype(np.float32)
NUM_DRAWS = 20_000


@pytest.fixture
def race(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's process draws temperature-only rows by the race (flags are read once a process: patched here)."""
    raced = dataclasses.replace(vt.env.flags(), temperature_draw="race")
    monkeypatch.setattr(vt.env, "flags", lambda: raced)


def _draws(backend: str, temperature: float, n: int = NUM_DRAWS, seed: int = 7) -> np.ndarray:
    specs = [RowSpec(temperature=temperature, seed=seed, counter=i) for i in range(n)]
    return run_sampler(backend, np.tile(LOGITS, (n, 1)), specs).ids


def test_ln_f32_is_the_natural_log_within_its_bound() -> None:
    """Over the noise's whole domain (1 - W from 2^-24 to just below 1; E from 2^-41 to 16.7): within 5e-7 plus 2e-7
    of the log's size (a few float32 roundings)."""
    x = np.geomspace(2.0**-41, 40.0, 40_000).astype(np.float32)
    want = np.log(x.astype(np.float64))
    err = np.abs(ln_f32(x).astype(np.float64) - want)
    assert (err <= 5e-7 + 2e-7 * np.abs(want)).all(), f"max error {err.max():.3g}"
    assert ln_f32(np.float32([1.0 - 2.0**-24]))[0] < 0, "just below 1: a negative log, so E = -ln(1 - W) > 0"


def test_the_noise_is_gumbel_out_to_a_tail_past_the_mass_draws_cutoff() -> None:
    """exp(-noise) is Exp(1): its CDF at 1 and its tail below e^-10 within five standard errors over 2^20 hashes; and
    the noise reaches past 22.2 + 2.9 nats (a token 22.2 nats below a row's max, where the mass draw's 2^-32 masses
    stop, can still win), the lowest noise being -2.9."""
    z = np.random.default_rng(12).integers(0, 2**63, 2**20, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    e = np.exp(-gumbel_of_hash(z).astype(np.float64))
    n = e.size
    for at in (1.0, np.exp(-10.0)):
        p = 1 - np.exp(-at)
        got = (e < at).mean()
        assert abs(got - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1 / n, f"P(E < {at:.3g}) = {got:.3g}, want {p:.3g}"
    highest = gumbel_of_hash(np.array([1], np.uint64))[0]  # W: mantissa 0, the lowest exponent
    lowest = gumbel_of_hash(np.array([2**64 - 1], np.uint64))[0]
    assert highest > 22.2 + 2.9 and -3.0 < lowest < -2.8, (highest, lowest)


@pytest.mark.parametrize("temperature", [1.0, 0.5])
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_race_draws_each_token_at_its_tempered_softmax_probability(race: None, backend: str,
                                                                       temperature: float) -> None:
    """Chi-square at p = 1e-4 against softmax(log P / temperature), over 20,000 output positions of one row."""
    counts = np.bincount(_draws(backend, temperature), minlength=P.size)
    want = P ** (1 / temperature) / (P ** (1 / temperature)).sum() * NUM_DRAWS
    stat = float(((counts - want) ** 2 / want).sum())
    assert stat < chi_square_critical(P.size - 1), f"chi-square {stat:.1f} over {P.size - 1} dof"
    other = P ** (2 / temperature) / (P ** (2 / temperature)).sum() * NUM_DRAWS
    assert ((counts - other) ** 2 / other).sum() > chi_square_critical(P.size - 1), (
        "non-vacuity: the test tells this temperature from half of it")


def test_a_race_depends_on_its_rows_seed_and_position_alone(race: None) -> None:
    """The same row drawn alone, among other rows at another batch position, and beside greedy, filtered and
    penalised neighbours: the same token; another seed or output position: another token somewhere."""
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((6, 4096)) * 0.5).astype(np.float32)
    mine = RowSpec(temperature=0.8, seed=11, counter=5)
    alone = run_sampler("cpu", logits[:1], [mine]).ids[0]
    crowd = [RowSpec(temperature=0.0), RowSpec(temperature=0.7, top_k=5, seed=1), RowSpec(temperature=1.0, seed=2),
             mine, RowSpec(temperature=0.9, min_p=0.1, seed=4), RowSpec(temperature=0.8, seed=11, counter=6)]
    rows = np.concatenate([logits[1:4], logits[:1], logits[4:6]])
    got = run_sampler("cpu", rows, crowd).ids
    assert got[3] == alone, "the row's token among other rows"
    tokens = {int(run_sampler("cpu", logits[:1], [RowSpec(temperature=0.8, seed=s, counter=c)]).ids[0])
              for s in (11, 12, 13) for c in (5, 6, 7)}
    assert len(tokens) > 3, "non-vacuity: seeds and positions move the draw"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_racing_row_whose_penalty_overflows_samples_minus_one_beside_rows_that_race(race: None,
                                                                                     backend: str) -> None:
    logits = np.tile(LOGITS + 5.0, (3, 1))
    top = int(np.argmax(P))
    specs = [RowSpec(temperature=1.0, seed=9, repetition=1e-39, history=np.array([top]), num_prompt=1),
             RowSpec(temperature=1.0, seed=9), RowSpec(temperature=1.0, seed=9, counter=1)]
    ids = run_sampler(backend, logits, specs).ids.tolist()
    assert ids[0] == -1 and min(ids[1:]) >= 0, ids


@pytest.mark.gpu
@pytest.mark.parametrize("blocks", [None, 2, 16, 64])
def test_the_cuda_race_draws_what_the_numpy_reference_draws(race: None, blocks: int | None) -> None:
    """32 temperature-only rows of a 151,936-token vocabulary (some with logprobs, penalties or a bias, which the row
    kernel applies first), beside greedy and filtered rows: every row's token equal on the CPU, on the one-block
    kernel (blocks None) and on the split kernels at 2, 16 and 64 blocks a row."""
    V, rng = 151_936, np.random.default_rng(6)
    logits = (rng.standard_normal((32, V)) * 3).astype(np.float32)
    hist = rng.integers(0, V, 100)
    kinds = [dict(temperature=0.7), dict(temperature=1.0, num_logprobs=4), dict(temperature=0.0),
             dict(temperature=0.9, repetition=1.3, history=hist, num_prompt=50),
             dict(temperature=0.6, top_k=20, top_p=0.95), dict(temperature=1.2, bias=((int(rng.integers(V)), 5.0),))]
    specs = [RowSpec(**kinds[i % len(kinds)], seed=500 + i, counter=i) for i in range(32)]
    cpu = run_sampler("cpu", logits, specs)
    gpu = run_sampler("cuda-split" if blocks else "cuda", logits, specs, blocks=blocks)
    differ = np.flatnonzero(cpu.ids != gpu.ids)
    assert differ.size == 0, f"rows that differ: {differ.tolist()} {cpu.ids[differ]} vs {gpu.ids[differ]}"
    raced = [i for i, s in enumerate(specs) if s.temperature and not s.top_k]
    assert len(set(cpu.ids[raced].tolist())) > 8, "non-vacuity: the racing rows drew different tokens"


def test_the_flag_moves_temperature_only_rows_to_the_race_and_no_other_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same rows under each draw: temperature-only rows (with or without logprobs or penalties) draw other tokens
    at some positions; greedy, top-k, top-p and min-p rows draw the same ones."""
    rng = np.random.default_rng(4)
    logits = (rng.standard_normal((48, 512)) * 2).astype(np.float32)
    kinds = [dict(temperature=0.8), dict(temperature=1.0, num_logprobs=3), dict(temperature=0.0),
             dict(temperature=0.7, top_k=9), dict(temperature=1.0, top_p=0.9), dict(temperature=1.0, min_p=0.05)]
    specs = [RowSpec(**kinds[i % len(kinds)], seed=40 + i, counter=i) for i in range(48)]
    mass = run_sampler("cpu", logits, specs).ids
    monkeypatch.setattr(vt.env, "flags", lambda: dataclasses.replace(vt.env.Flags.from_environ(),
                                                                     temperature_draw="race"))
    raced = run_sampler("cpu", logits, specs).ids
    plain = np.array([i % len(kinds) < 2 for i in range(48)])
    assert np.array_equal(mass[~plain], raced[~plain]), "rows with a filter or none to draw keep their draw"
    assert (mass[plain] != raced[plain]).sum() >= 4, "temperature-only rows race: other tokens at some positions"
    for i in np.flatnonzero(plain):  # each the race's winner over its own tempered logits
        x = (logits[i] / np.float32(specs[i].temperature)).astype(np.float32)
        assert raced[i] == race_winner(x, specs[i].seed, specs[i].counter), f"row {i}"
