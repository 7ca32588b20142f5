"""The offline API against transformers, the oracle: chat() with the checkpoint's template (and a layered one) as
transformers renders it, and logprobs and prompt_logprobs as the model's log-softmax that transformers computes.
Apart from test_offline_api.py, whose mutants need no transformers."""

from __future__ import annotations

import pytest

from models.loader import resolve_model
from vt import LLM, SamplingParams
from vt.errors import RequestError

SP = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM("tiny-qwen3", max_model_len=128, num_blocks=32)


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
    with pytest.raises(RequestError, match=r"messages\[0\]: expected an object with a string role"):
        llm.chat([{"content": "no role"}], SP)
    with pytest.raises(RequestError, match="unknown role tool"):
        llm.chat([{"role": "tool", "content": "x"}], SP, chat_template=LAYERED)


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
