"""The offline API where a vLLM user's code meets vLLM's rules: max_tokens=None runs to the end of the context,
given SamplingParams are used as given (the checkpoint's defaults only when none are: get_default_sampling_params),
vLLM's other SamplingParams fields (skip_special_tokens, truncate_prompt_tokens, clone, bad_words) and prompt keys
(multi_modal_data, cache_salt) are taken or refused by name, never a raw TypeError. The API server's rules, which
differ (a field a request leaves unset is the checkpoint's; no max_tokens is max_new_tokens, else 16), stay."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import guarding
from vt import LLM, SamplingParams
from vt.engine.config import EngineConfig
from vt.errors import ConfigError, RequestError

SMALL = dict(max_model_len=64, num_blocks=16)
PROMPTS = ["Hello", "Once upon a time", "The capital of", "1, 2, 3,"]


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM("tiny-qwen3", **SMALL)


def _with_generation_config(tmp_path: Path, gen: dict) -> str:
    from models.loader import resolve_model

    d = tmp_path / "ckpt"
    shutil.copytree(resolve_model("tiny-qwen3"), d)
    (d / "generation_config.json").write_text(json.dumps(gen))
    return str(d)


def test_unset_max_tokens_runs_to_the_end_of_the_context(llm: LLM) -> None:
    """vLLM v1: max_tokens=None generates up to max_model_len - prompt_len (it gave 16)."""
    n_prompt = len(llm.get_tokenizer().encode("Hello"))
    out = llm.generate("Hello", SamplingParams(max_tokens=None, temperature=0, ignore_eos=True))[0].outputs[0]
    assert len(out.token_ids) == 64 - n_prompt, f"{len(out.token_ids)} tokens, not the {64 - n_prompt} left"
    assert out.finish_reason == "length"
    default = llm.generate("Hello", SamplingParams(temperature=0, ignore_eos=True))[0].outputs[0]
    assert len(default.token_ids) == 16, "non-vacuity: SamplingParams' own default is vLLM's 16"


def test_the_servers_unset_max_tokens_is_still_the_checkpoints_else_16() -> None:
    """The server passes max_tokens=None for "not given": resolve() keeps its rule (max_new_tokens, else 16)."""
    assert SamplingParams(max_tokens=None).resolve({"max_new_tokens": 7}).max_tokens == 7
    assert SamplingParams(max_tokens=None).resolve({}).max_tokens == 16
    assert SamplingParams(max_tokens=None, min_tokens=50).resolve({"max_new_tokens": 64}).min_tokens == 50


def test_given_sampling_params_ignore_the_checkpoints_defaults(tmp_path: Path) -> None:
    """vLLM's LLM applies generation_config only when sampling_params is None: given SamplingParams that leave
    temperature unset sample at 1.0, not at the checkpoint's 0 (greedy), and run vLLM's 16 tokens, not its 5."""
    gen = LLM(_with_generation_config(tmp_path, {"temperature": 0, "max_new_tokens": 5}), **SMALL)
    greedy = [o.outputs[0].token_ids for o in gen.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=16,
                                                                                  ignore_eos=True))]
    defaults = gen.get_default_sampling_params()
    assert (defaults.temperature, defaults.max_tokens, defaults.top_p) == (0, 5, 1.0)
    none_given = [o.outputs[0].token_ids for o in gen.generate(PROMPTS)]
    assert none_given == [g[:5] for g in greedy], "non-vacuity: none given is the checkpoint's greedy 5"
    given = [o.outputs[0].token_ids for o in gen.generate(PROMPTS, SamplingParams(seed=3, ignore_eos=True))]
    assert all(len(t) == 16 for t in given), f"given SamplingParams ran {[len(t) for t in given]} tokens, not 16"
    assert given != greedy, "given SamplingParams took the checkpoint's temperature 0: every output was greedy"
    assert SamplingParams(max_tokens=None).resolve(gen.engine.generation_config).temperature == 0.0, \
        "the server's rule stays: a field a request leaves unset is the checkpoint's"


def test_skip_special_tokens_false_keeps_their_text(llm: LLM) -> None:
    eos = sorted(llm.engine.eos_ids)[0]
    sp = dict(temperature=0, max_tokens=3, ignore_eos=True, logit_bias={eos: 100.0})
    skipped = llm.generate("Hello", SamplingParams(**sp))[0].outputs[0]
    assert skipped.token_ids == [eos] * 3 and skipped.text == "", "non-vacuity: special tokens, skipped"
    kept = llm.generate("Hello", SamplingParams(**sp, skip_special_tokens=False,
                                                spaces_between_special_tokens=False))[0].outputs[0]
    want = llm.get_tokenizer().decode([eos] * 3, skip_special_tokens=False)
    assert want and kept.text == want, f"skip_special_tokens=False gave {kept.text!r}, not {want!r}"


def test_truncate_prompt_tokens_keeps_the_last_tokens(llm: LLM) -> None:
    ids = llm.get_tokenizer().encode("Once upon a time there was a tiny model")
    sp = dict(temperature=0, max_tokens=4, ignore_eos=True)
    out = llm.generate(ids, SamplingParams(**sp, truncate_prompt_tokens=3))[0]
    assert out.prompt_token_ids == ids[-3:], f"kept {out.prompt_token_ids}, not the last 3 of {ids}"
    assert out.outputs[0].token_ids == llm.generate(ids[-3:], SamplingParams(**sp))[0].outputs[0].token_ids
    text = llm.generate("Once upon a time", SamplingParams(**sp, truncate_prompt_tokens=2))[0]
    assert len(text.prompt_token_ids) == 2 and text.prompt == "Once upon a time"
    with pytest.raises(RequestError, match="truncate_prompt_tokens=65: more than max_model_len=64"):
        llm.generate(ids, SamplingParams(**sp, truncate_prompt_tokens=65))


def test_clone_is_a_deep_copy() -> None:
    sp = SamplingParams(stop=["a"], stop_token_ids=[5], temperature=0.5)
    c = sp.clone()
    c.stop.append("b")
    c.stop_token_ids.append(6)
    assert (sp.stop, sp.stop_token_ids) == (["a"], [5]), "changing the clone's lists changed the original's"
    assert c.temperature == 0.5 and c.stop == ["a", "b"], "non-vacuity: the clone is the same params"


@pytest.mark.parametrize("kw, names", [({"no_such_field": 1}, "no_such_field=1"),
                                       ({"bad_words": [""]}, "bad_words=['']: must be a list of words"),
                                       ({"truncate_prompt_tokens": 0}, "truncate_prompt_tokens=0"),
                                       ({"skip_special_tokens": "no"}, "skip_special_tokens='no'")],
                         ids=["unknown", "bad-words", "truncate-zero", "skip-not-bool"])
def test_a_field_vt_lacks_or_a_bad_value_is_one_config_error(kw: dict, names: str) -> None:
    with guarding(f"SamplingParams(**{kw}) is one ConfigError naming the field", TypeError, AttributeError):
        with pytest.raises(ConfigError, match=__import__("re").escape(names)):
            SamplingParams(**kw)
    assert SamplingParams(bad_words=None).bad_words is None and SamplingParams(bad_words=[]).bad_words == [], \
        "non-vacuity: vLLM's 'none' is taken"


def test_vllms_optional_prompt_keys_are_taken_when_they_ask_for_nothing(llm: LLM) -> None:
    sp = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    want = llm.generate("Hello", sp)[0].outputs[0].token_ids
    quiet = {"prompt": "Hello", "multi_modal_data": None, "mm_processor_kwargs": {}, "cache_salt": None}
    with guarding("vLLM's optional prompt keys, empty, are taken", RequestError):
        got = llm.generate(quiet, sp)[0].outputs[0].token_ids
    assert got == want
    for extra, names in (({"multi_modal_data": {"image": "x.png"}}, "multimodal input is unsupported"),
                         ({"cache_salt": ""}, "prompt's cache_salt='': must be a non-empty string")):
        with pytest.raises(RequestError, match=names):
            llm.generate({"prompt": "Hello", **extra}, sp)
    assert not llm.engine.has_unfinished(), "nothing was queued"


def test_seed_none_is_vllms_default_seed() -> None:
    with guarding("LLM(model, seed=None) is taken, as vLLM takes it", ConfigError):
        cfg = EngineConfig(model="tiny-qwen3", seed=None)
    assert cfg.seed == 0 == EngineConfig(model="tiny-qwen3").seed
