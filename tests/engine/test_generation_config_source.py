"""vLLM's --generation-config and --override-generation-config: where a request's unset sampling fields come from.
auto is the checkpoint's generation_config.json (tiny-qwen3's samples at 0.6), vllm is nowhere (the neutral values),
a folder is that folder's file; the override's fields are laid over the source. Requests run through the engine as
the API server runs them (an unset field takes the default), and the offline LLM's defaults read the same. A bad
source or override is one ConfigError line, on the API and the CLI alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import through_the_engine
from vt import LLM, SamplingParams
from vt.cli import main
from vt.engine.config import EngineConfig
from vt.errors import ConfigError

PROMPTS = [f"prompt {i}" for i in range(4)]
UNSET = SamplingParams(max_tokens=12, ignore_eos=True)  # temperature and the filters left to the defaults
KW = {"model": "tiny-qwen3", "backend": "cpu", "max_model_len": 64, "num_blocks": 16}


def greedy_ids(llm: LLM) -> list[list[int]]:
    return [o.token_ids for o in llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))]


def test_vllm_takes_no_defaults_from_the_checkpoint() -> None:
    auto, none = LLM(**KW), LLM(**KW, generation_config="vllm")
    assert auto.get_default_sampling_params().temperature == 0.6, "non-vacuity: the checkpoint samples at 0.6"
    d = none.get_default_sampling_params()
    assert (d.temperature, d.top_p, d.top_k) == (1.0, 1.0, 0), d
    seeded = SamplingParams(max_tokens=12, ignore_eos=True, seed=7)
    neutral = SamplingParams(max_tokens=12, ignore_eos=True, seed=7, temperature=1.0, top_p=1.0, top_k=0)
    assert through_the_engine(none, PROMPTS, seeded) == through_the_engine(none, PROMPTS, neutral)


def test_a_folders_file_and_an_override_are_the_defaults_an_unset_request_runs(tmp_path: Path) -> None:
    folder = tmp_path / "gen"
    folder.mkdir()
    (folder / "generation_config.json").write_text(json.dumps({"temperature": 0}))
    from_folder = LLM(**KW, generation_config=str(folder))
    want = greedy_ids(from_folder)
    assert through_the_engine(from_folder, PROMPTS, UNSET) == want
    overridden = LLM(**KW, override_generation_config={"temperature": 0.0})
    assert through_the_engine(overridden, PROMPTS, UNSET) == want
    assert overridden.get_default_sampling_params().top_k == 20, "the override lays over the source, field by field"
    assert through_the_engine(LLM(**KW), PROMPTS, UNSET) != want, "non-vacuity: the checkpoint's 0.6 samples"


@pytest.mark.parametrize(("kw", "words"), [
    ({"generation_config": "no/such/folder"}, "no generation_config.json in a folder"),
    ({"override_generation_config": {"temprature": 0}}, "override_generation_config.temprature"),
    ({"override_generation_config": {"temperature": -1}}, "override_generation_config: temperature"),
    ({"override_generation_config": [1]}, "expected an object"),
], ids=["no-folder", "unknown-field", "bad-value", "not-an-object"])
def test_a_bad_source_or_override_is_one_config_error(kw: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words.replace(".", r"\.")):
        EngineConfig(**{**KW, **kw})


def test_the_cli_flags_reach_the_engine_and_a_bad_one_is_one_line_exit_2(capsys) -> None:
    code = main(["generate", "--model", "tiny-qwen3", "--backend", "cpu", "--prompt", "hi", "--max-tokens", "3",
                 "--override-generation-config", "{temperature: 0}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("vt: error: ConfigError: --override-generation-config"), err
    def generate(*flags: str) -> str:
        code = main(["generate", "--model", "tiny-qwen3", "--backend", "cpu", "--prompt", "prompt 1", "--max-tokens",
                     "12", "--ignore-eos", *flags])
        out = capsys.readouterr()
        assert code == 0, out.err
        return out.out

    greedy = generate("--temperature", "0")
    assert generate("--override-generation-config", '{"temperature": 0}', "--generation-config", "vllm") == greedy
    assert generate() != greedy, "non-vacuity: the checkpoint's defaults sample"
