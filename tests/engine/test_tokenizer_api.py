"""LLM.get_tokenizer(): the methods transformers users call, answering as transformers' own tokenizer of the
same checkpoint does (the oracle), and vLLM's Logprob objects in the offline API's outputs."""

from __future__ import annotations

import pytest

from models.loader import resolve_model
from vt import LLM, Logprob, SamplingParams

MODEL = "tiny-qwen3"
TEXTS = ["Hello world, the quick brown fox", "What is the capital of France? Paris.", "def main(): return 0"]
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]


@pytest.fixture(scope="module")
def both():
    from transformers import AutoTokenizer

    return LLM(MODEL, max_model_len=128, num_blocks=32).get_tokenizer(), AutoTokenizer.from_pretrained(
        str(resolve_model(MODEL)))


def test_encode_decode_and_call_answer_as_transformers(both) -> None:
    ours, hf = both
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == hf.encode(text) and len(ids) > 3, text
        assert ours.decode(ids) == hf.decode(ids) and ours(text)["input_ids"] == hf(text)["input_ids"]
    assert ours.batch_decode([ours.encode(t) for t in TEXTS]) == hf.batch_decode([hf.encode(t) for t in TEXTS])
    assert ours.eos_token_id == hf.eos_token_id is not None and len(ours) == len(hf)


@pytest.mark.parametrize("add_generation_prompt", [False, True])
def test_apply_chat_template_answers_as_transformers(both, add_generation_prompt: bool) -> None:
    ours, hf = both
    text = ours.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=add_generation_prompt)
    assert text == hf.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=add_generation_prompt)
    got = ours.apply_chat_template(CHAT, add_generation_prompt=add_generation_prompt)
    want = hf.apply_chat_template(CHAT, add_generation_prompt=add_generation_prompt)
    assert got["input_ids"] == list(want["input_ids"]) and "Hi there" in text
    assert ours.apply_chat_template(CHAT, return_dict=False, add_generation_prompt=add_generation_prompt) == list(
        hf.apply_chat_template(CHAT, return_dict=False, add_generation_prompt=add_generation_prompt))


def test_offline_logprobs_are_vllms_logprob_objects() -> None:
    llm = LLM(MODEL, max_model_len=128, num_blocks=32)
    out = llm.generate(["Hello"], SamplingParams(temperature=0, max_tokens=3, logprobs=2, prompt_logprobs=1))[0]
    first = out.outputs[0].logprobs[0]
    assert all(isinstance(v, Logprob) for v in first.values())
    top = max(first.values(), key=lambda v: v.logprob)
    assert top.rank == 1 and top.decoded_token == llm.get_tokenizer().decode([out.token_ids[0]]), "greedy: rank 1"
    assert out.prompt_logprobs is not None and all(isinstance(v, Logprob) for d in out.prompt_logprobs[1:]
                                                   for v in d.values())
