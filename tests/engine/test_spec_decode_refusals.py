"""Speculative decoding's refusals, apart from the lossless and row-move tests (tests/engine/test_spec_decode.py)
so that a mutant gated by one of them runs this small file alone: a draft context that no longer matches its row
raises, and a draft too short for max_model_len is refused at start-up."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from models.loader import resolve_model
from tests.engine.test_spec_decode import DRAFT, engine, greedy
from vt.errors import DraftPositionMismatch


def test_G4_a_broken_position_invariant_raises() -> None:
    e = engine()
    e.add_request("the keeper keeps going", greedy(30))
    for _ in range(3):
        e.step()
    ctx = next(iter(e.runner.proposer.contexts.values()))
    ctx.length -= 1  # a context that no longer matches its row
    with pytest.raises(DraftPositionMismatch, match="draft context holds"):
        e.step()


def test_a_draft_too_short_for_max_model_len_is_refused_at_startup(tmp_path: Path) -> None:
    import json

    from vt.errors import ConfigError

    d = tmp_path / "short-draft"
    shutil.copytree(resolve_model(DRAFT), d)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(cfg | {"max_position_embeddings": 64}))
    with pytest.raises(ConfigError, match="draft model's max_position_embeddings"):
        engine(draft=str(d), max_model_len=128)
    engine(draft=str(d), max_model_len=64)  # fits: the scheduler proposes only while num_tokens + k <= 64


@pytest.mark.parametrize("kw, says", [
    ({"num_speculative_tokens": 4}, "num_speculative_tokens=4: needs speculative_model"),
    ({"ngram_prompt_lookup_max": 5}, "ngram_prompt_lookup_max=5: needs speculative_model='[ngram]'"),
    ({"speculative_model": DRAFT, "num_speculative_tokens": 2, "ngram_prompt_lookup_max": 5},
     "ngram_prompt_lookup_max=5: needs speculative_model='[ngram]'"),
], ids=["draft-count-without-a-draft", "ngram-window-without-ngram", "ngram-window-with-a-draft-model"])
def test_a_speculation_option_without_its_speculation_is_refused_by_the_api_as_by_the_cli(kw: dict, says: str,
                                                                                          capsys) -> None:
    """The API built an engine without a proposer for num_speculative_tokens=4 alone, and ignored
    ngram_prompt_lookup_max without [ngram]; the CLI refused the first. One rule (EngineConfig) for both now."""
    from vt import LLM
    from vt.cli import main
    from vt.engine.config import EngineConfig
    from vt.errors import ConfigError

    EngineConfig(model="tiny-qwen3", backend="cpu", speculative_model="[ngram]", num_speculative_tokens=4,
                 ngram_prompt_lookup_max=5)  # non-vacuity: with their speculation both are taken
    with pytest.raises(ConfigError) as ei:
        LLM("tiny-qwen3", backend="cpu", max_model_len=64, num_blocks=16, **kw)
    assert says in str(ei.value), str(ei.value)
    if list(kw) == ["num_speculative_tokens"]:  # the CLI's flag: the same line
        rc = main(["generate", "--model", "tiny-qwen3", "--backend", "cpu", "--prompt", "hi", "--max-model-len", "64",
                   "--num-blocks", "16", "--num-speculative-tokens", "4"])
        assert rc == 2 and f"ConfigError: {ei.value}" in capsys.readouterr().err
