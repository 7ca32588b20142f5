"""A seed is any int64, as vLLM's protocol takes it (torch.long's range): a negative seed is reproducible, draws
apart from every other seed (its two's-complement uint64 is hashed, on the CPU and in the CUDA sampler's packed
rows alike), and a value outside int64 is refused with one typed line naming the field."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from tests.helpers import guarding
from vt import SamplingParams
from vt.engine.config import EngineConfig
from vt.engine.front.llm_engine import LLMEngine
from vt.engine.sample.sampler import RowSpec, pack, row_hash
from vt.errors import ConfigError

LOW, HIGH = -(2**63), 2**63 - 1
PROMPT = list(range(60, 85))


@cache
def engine() -> LLMEngine:
    return LLMEngine(EngineConfig(model="tiny-qwen3", max_model_len=128, num_blocks=64, max_num_seqs=8))


def draws(seed: int, n: int = 1) -> list[list[int]]:
    """The tokens of each sample of one request seeded `seed` (a flat distribution: another key, other tokens)."""
    e = engine()
    head = e.add_request(PROMPT, SamplingParams(temperature=1.5, top_k=200, max_tokens=16, seed=seed, n=n,
                                                ignore_eos=True))
    while e.has_unfinished():
        e.step()
    return [s.output_ids for s in (head.siblings or [head])]


@pytest.mark.parametrize("seed", [LOW, -1, 0, HIGH])
def test_every_int64_seed_is_a_sampling_seed(seed: int) -> None:
    with guarding(f"seed={seed} is an int64, which vLLM's protocol takes", ConfigError):
        assert SamplingParams(seed=seed).seed == seed
        assert EngineConfig(model="tiny-qwen3", backend="cpu", seed=seed).seed == seed


@pytest.mark.parametrize("seed", [LOW - 1, HIGH + 1, 2**64 - 1, 1.5, True])
def test_a_seed_outside_int64_is_refused_naming_the_range(seed: object) -> None:
    with pytest.raises(ConfigError, match=r"seed=.*\[-2\*\*63, 2\*\*63\)"):
        SamplingParams(seed=seed)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"seed="):  # a bool is named as such there
        EngineConfig(model="tiny-qwen3", backend="cpu", seed=seed)  # type: ignore[arg-type]


def test_a_negative_seed_draws_the_same_tokens_twice_and_apart_from_other_seeds() -> None:
    first = draws(-1)[0]
    assert len(first) == 16, "non-vacuity: the request generated its tokens"
    assert draws(-1)[0] == first, "a seed's draws are reproducible"
    # HIGH is where the old `% 2**63` folded -1; 1 its magnitude; LOW the smallest int64
    for other in (HIGH, 1, LOW):
        assert draws(other)[0] != first, f"seed -1 draws as seed {other} does"


def test_the_samples_of_the_largest_seed_wrap_within_int64() -> None:
    """Sample k draws with seed + k wrapped as int64: HIGH's second sample is LOW's first, not an overflow of the
    packed row or a fold onto seed 0."""
    high = draws(HIGH, n=2)
    assert high[0] != high[1], "non-vacuity: the two samples drew apart"
    assert high[1] == draws(LOW)[0], "sample 1 of HIGH is seed HIGH + 1, which is LOW as an int64"
    assert high[1] != draws(0)[0], "sample 1 of HIGH folded onto seed 0"


def test_the_packed_row_holds_a_negative_seed_as_its_uint64_twin() -> None:
    """The CUDA sampler reads the seed as (u64)ip[0]; the NumPy reference hashes ip[:, 0].astype(uint64): both see
    the two's complement, so -1 hashes as 2**64-1 would and apart from every other int64."""
    rows = pack([RowSpec(temperature=1.0, seed=-1), RowSpec(temperature=1.0, seed=HIGH),
                 RowSpec(temperature=1.0, seed=LOW)], 3, 0)
    seeds = rows.iparams[:3, 0]
    assert seeds.tolist() == [-1, HIGH, LOW]
    assert seeds.astype(np.uint64).tolist() == [2**64 - 1, HIGH, 2**63]
    keys = row_hash(seeds, np.zeros(3, np.int64))
    assert len(set(keys.tolist())) == 3, "three seeds, three keys"
    assert keys[0] == row_hash(np.array([2**64 - 1], np.uint64), np.zeros(1, np.int64))[0]
