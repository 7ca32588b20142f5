"""The offline API as a vLLM user calls it: prompt shapes, sampling_params=, RequestOutput with outputs[0],
chat() with the checkpoint's template as transformers renders it, get_tokenizer()."""

from __future__ import annotations

import pytest

from models.loader import resolve_model
from vt import LLM, SamplingParams
from vt.errors import RequestError

SP = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM("tiny-qwen3", max_model_len=128, num_blocks=32)


def test_every_prompt_shape_vllm_accepts_generates_the_same(llm: LLM) -> None:
    ids = llm.get_tokenizer().encode("Hello world")
    want = llm.generate("Hello world", SP)[0]
    assert want.outputs[0].token_ids and want.outputs[0].text == want.text, "non-vacuity: it generated"
    shapes = [["Hello world"], {"prompt": "Hello world"}, [{"prompt": "Hello world"}], ids, [ids],
              {"prompt_token_ids": ids}, [{"prompt_token_ids": ids}]]
    for shape in shapes:
        got = llm.generate(shape, sampling_params=SP)
        assert len(got) == 1 and got[0].outputs[0].token_ids == want.outputs[0].token_ids, shape
    assert got[0].prompt_token_ids == ids and got[0].finished and got[0].outputs[0].index == 0


@pytest.mark.parametrize("bad, names", [
    ({"text": "Hi"}, "a dict with keys ['text']"),
    ({"prompt": "Hi", "prompt_token_ids": [5]}, "exactly one of"),
    (3, "a int"),
    ([], "(empty)"),
    ([[1, "a"]], "list of ints"),
    (["fine", {"prompt": 7}], "expected a string"),
], ids=["unknown-key", "both-keys", "int", "empty", "mixed-ids", "non-string-prompt"])
def test_a_prompt_of_another_shape_is_a_typed_error_and_queues_nothing(llm: LLM, bad, names: str) -> None:
    with pytest.raises(RequestError, match=__import__("re").escape(names)):
        llm.generate(bad, SP)
    assert not llm.engine.has_unfinished(), "nothing was queued"


def test_a_stop_string_names_itself_as_the_stop_reason(llm: LLM) -> None:
    text = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))[0].text
    stop = text[2:4]
    assert stop.strip(), "non-vacuity: a real piece of the text"
    out = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=12, ignore_eos=True,
                                                          stop=[stop]))[0].outputs[0]
    assert out.finish_reason == "stop" and out.stop_reason == stop and stop not in out.text


# A template written the way published ones are: block tags on their own lines (trim_blocks and
# lstrip_blocks matter), whitespace control, raise_exception, tojson and a special token.
LAYERED = """{{ bos_token }}
{% for m in messages %}
    {% if m['role'] not in ['system', 'user', 'assistant'] %}
        {{ raise_exception('unknown role ' + m['role']) }}
    {% endif %}
<|im_start|>{{ m['role'] }}
{% if m['content'] is string %}{{ m['content'] }}{% else %}{{ m['content'] | tojson }}{% endif %}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}
<|im_start|>assistant
{% endif %}"""


@pytest.mark.parametrize("template", ["checkpoint", "layered"])
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_renders_the_template_as_transformers_does(llm: LLM, add_generation_prompt: bool, template: str) -> None:
    from transformers import AutoTokenizer

    from vt.engine.front.chat import render

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
                {"role": "assistant", "content": "Hello."}, {"role": "user", "content": ["a", {"b": 1}]}]
    hf = AutoTokenizer.from_pretrained(str(resolve_model("tiny-qwen3")))
    text = llm.engine.chat_template if template == "checkpoint" else LAYERED
    want = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                  chat_template=text)
    got = render(text, messages, llm.engine.special_tokens, add_generation_prompt)
    assert got == want
    assert got.endswith("<|im_start|>assistant\n") == add_generation_prompt and got.count("<|im_start|>") >= 4


def test_chat_generates_from_the_rendered_conversation(llm: LLM) -> None:
    messages = [{"role": "user", "content": "Hi there"}]
    got = llm.chat(messages, sampling_params=SP)[0]
    from vt.engine.front.chat import render

    text = render(llm.engine.chat_template, messages, llm.engine.special_tokens, True)
    assert got.outputs[0].token_ids == llm.generate(text, SP)[0].outputs[0].token_ids
    assert got.prompt == text
    with pytest.raises(RequestError, match="messages must be"):
        llm.chat([{"content": "no role"}], SP)
    with pytest.raises(RequestError, match="unknown role tool"):
        llm.chat([{"role": "tool", "content": "x"}], SP, chat_template=LAYERED)


def test_a_stop_token_id_finishes_with_its_id_as_the_stop_reason(llm: LLM) -> None:
    free = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))[0]
    stop = free.token_ids[3]
    assert stop not in free.token_ids[:3], "non-vacuity: it first appears at index 3"
    out = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=12, ignore_eos=True,
                                                          stop_token_ids=[stop]))[0].outputs[0]
    assert out.finish_reason == "stop" and out.stop_reason == stop and out.token_ids == free.token_ids[:4]
    with pytest.raises(RequestError, match="outside the vocabulary"):
        llm.generate("x", SamplingParams(stop_token_ids=[10**6]))


def test_include_stop_str_in_output_keeps_the_stop_string(llm: LLM) -> None:
    text = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))[0].text
    stop = text[2:4]
    kept = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, stop=[stop],
                                                           include_stop_str_in_output=True))[0]
    assert kept.text == text[: text.find(stop) + len(stop)] and kept.outputs[0].stop_reason == stop


def test_vt_generate_takes_the_sampling_options(capsys) -> None:
    from vt.cli import main

    argv = ["generate", "--model", "tiny-qwen3", "--prompt", "Once upon", "--max-tokens", "8", "--temperature",
            "0.8", "--top-k", "5", "--top-p", "0.9", "--min-p", "0.01", "--seed", "3", "--stop", "zzz",
            "--ignore-eos", "--max-model-len", "64", "--num-blocks", "8"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0 and capsys.readouterr().out == first, "seeded: the same text twice"


@pytest.mark.parametrize("spec", [None, "[ngram]"], ids=["plain", "ngram"])
def test_logprobs_are_the_models_log_softmax_as_transformers_computes_it(spec) -> None:
    import numpy as np

    from tests.models.test_oracle import hf_logits

    kw = dict(speculative_model=spec, num_speculative_tokens=3) if spec else {}
    llm = LLM("tiny-qwen3", max_model_len=128, num_blocks=32, **kw)
    prompt = [7, 8, 9, 10] * 5
    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=10, ignore_eos=True, logprobs=3))[0]
    c = out.outputs[0]
    assert c.logprobs is not None and len(c.logprobs) == len(c.token_ids) == 10
    ref = hf_logits(resolve_model("tiny-qwen3"), prompt + c.token_ids)
    lsm = ref - np.log(np.exp(ref - ref.max(-1, keepdims=True)).sum(-1, keepdims=True)) - ref.max(-1, keepdims=True)
    for i, (tok, lp) in enumerate(zip(c.token_ids, c.logprobs)):
        row = lsm[len(prompt) - 1 + i]
        assert tok in lp and len(lp) in (3, 4), "the top 3 and the sampled token"
        assert set(np.argsort(-row)[:3]) <= set(lp), f"step {i}: the top-3 tokens"
        for t, v in lp.items():
            assert abs(v.logprob - row[t]) < 1e-4, f"step {i} token {t}: {v} vs {row[t]}"
        top = sorted(lp.values(), key=lambda v: -v.logprob)
        assert [v.rank for v in top[:3]] == [1, 2, 3], "vLLM's Logprob: the top 3 ranked 1, 2, 3"
        assert top[0].decoded_token == llm.get_tokenizer().decode([int(np.argmax(row))])
    assert abs(c.cumulative_logprob - sum(lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs))) < 1e-9
    if spec:
        assert llm.engine.runner.proposer.num_accepted > 0, "non-vacuity: accepted runs carried logprobs"


def test_prompt_logprobs_score_each_prompt_token_as_transformers_does() -> None:
    """prompt_logprobs=k: for every prompt token after the first, the model's log-softmax of its top k
    and of the token itself (None for the first, as vLLM returns); with n = 2 the samples share them."""
    import numpy as np

    from tests.models.test_oracle import hf_logits

    llm = LLM("tiny-qwen3", max_model_len=128, num_blocks=32)
    prompt = [5, 77, 300, 12, 9, 400, 33, 250, 18, 101, 7, 64]
    out = llm.generate([prompt], SamplingParams(temperature=0.7, max_tokens=3, prompt_logprobs=2, n=2, seed=1))[0]
    plp = out.prompt_logprobs
    assert plp is not None and len(plp) == len(prompt) and plp[0] is None
    ref = hf_logits(resolve_model("tiny-qwen3"), prompt)
    lsm = ref - ref.max(-1, keepdims=True)
    lsm -= np.log(np.exp(lsm).sum(-1, keepdims=True))
    for j in range(1, len(prompt)):
        got, row = plp[j], lsm[j - 1]
        assert got is not None and prompt[j] in got and set(np.argsort(-row)[:2]) <= set(got), f"position {j}"
        for t, v in got.items():
            assert abs(v.logprob - row[t]) < 1e-4, f"position {j} token {t}: {v} vs {row[t]}"
    assert any(prompt[j] not in set(np.argsort(-lsm[j - 1])[:2]) for j in range(1, len(prompt))), (
        "non-vacuity: some prompt tokens are outside the top 2, so their own entry is really looked up")
    assert len(out.outputs) == 2


def test_min_tokens_holds_off_eos_and_stop_ids_then_lets_them_stop() -> None:
    llm = LLM("tiny-qwen3", max_model_len=128, num_blocks=32)
    base = SamplingParams(temperature=0, max_tokens=12)
    first = llm.generate(["Hello"], base)[0].token_ids[0]
    stop_at_once = llm.generate(["Hello"], SamplingParams(temperature=0, max_tokens=12, stop_token_ids=[first]))[0]
    assert stop_at_once.token_ids == [first] and stop_at_once.finish_reason == "stop", "non-vacuity: it stops at once"
    held = llm.generate(["Hello"], SamplingParams(temperature=0, max_tokens=12, stop_token_ids=[first],
                                                  min_tokens=4))[0]
    assert len(held.token_ids) >= 4 and first not in held.token_ids[:4], held.token_ids
    eos = sorted(llm.engine.eos_ids)
    no_eos = llm.generate(["Hello"] * 4, [SamplingParams(temperature=1.0, max_tokens=6, min_tokens=6, seed=s)
                                         for s in range(4)])
    assert all(len(o.token_ids) == 6 and not set(o.token_ids) & set(eos) for o in no_eos)
