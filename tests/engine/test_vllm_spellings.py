"""vLLM's spellings of engine options: dtype "half" / "float" (its ModelDType) are float16 / float32, and
trust_remote_code is taken and said to change nothing (vt runs no checkpoint code); an option vt does not have is
one ConfigError naming it, never a raw TypeError."""

from __future__ import annotations

import logging

import pytest

from tests.helpers import guarding
from vt import LLM, SamplingParams
from vt.engine.config import EngineConfig
from vt.errors import ConfigError

SMALL = dict(backend="cpu", max_model_len=64, num_blocks=16)


@pytest.mark.parametrize("spelling, dtype", [("half", "float16"), ("float", "float32"), ("torch.float16", "float16"),
                                             ("torch.float32", "float32")])
def test_vllms_dtype_spellings_run_as_the_dtype_they_name(spelling: str, dtype: str) -> None:
    """vLLM's ModelDType spellings, and a torch.dtype as vLLM's LLM takes it."""
    greedy = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    given: object = spelling
    if spelling.startswith("torch."):
        import torch

        given = getattr(torch, spelling.removeprefix("torch."))
    with guarding(f"dtype={given!r} is vLLM's spelling of {dtype}", ConfigError):
        got = LLM("tiny-qwen3", dtype=given, **SMALL)
    assert got.engine.cfg.dtype == dtype
    want = LLM("tiny-qwen3", dtype=dtype, **SMALL).generate("Hello", greedy)[0].outputs[0].token_ids
    assert len(want) == 4, "non-vacuity: tokens were generated"
    assert got.generate("Hello", greedy)[0].outputs[0].token_ids == want


def test_a_dtype_of_neither_spelling_is_refused_naming_both() -> None:
    with pytest.raises(ConfigError, match=r"dtype='int8': must be one of .*float32, half, float"):
        EngineConfig(model="tiny-qwen3", backend="cpu", dtype="int8")


def test_a_torch_dtype_vt_does_not_run_is_refused_in_one_line() -> None:
    import torch

    with pytest.raises(ConfigError, match=r"^dtype='int8': must be one of .*float32, half, float$"):
        EngineConfig(model="tiny-qwen3", backend="cpu", dtype=torch.int8)


def test_trust_remote_code_is_taken_and_said_to_change_nothing(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="vt"), guarding("trust_remote_code is vLLM's option", TypeError):
        llm = LLM("tiny-qwen3", trust_remote_code=True, **SMALL)
    assert llm.generate("Hi", SamplingParams(max_tokens=2))[0].outputs[0].token_ids, "non-vacuity: it runs"
    said = [r.getMessage() for r in caplog.records if "trust_remote_code" in r.getMessage()]
    assert len(said) >= 1 and "never runs code from a checkpoint" in said[0], said


@pytest.mark.parametrize("kw, names", [({"trust_remote_code": "yes"}, "trust_remote_code='yes'"),
                                       ({"no_such_option": 1}, "no_such_option=1")])
def test_an_option_vt_lacks_or_a_bad_value_is_one_config_error(kw: dict, names: str) -> None:
    with guarding(f"{names}: a typed refusal", TypeError), pytest.raises(ConfigError, match=names):
        LLM("tiny-qwen3", **SMALL, **kw)
