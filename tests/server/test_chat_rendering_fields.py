"""vLLM's chat rendering fields on chat completions, /tokenize's messages and LLM.chat alike (one renderer,
vt/engine/front/chat.py): chat_template_kwargs reach the Jinja template (Qwen3's enable_thinking),
add_generation_prompt (default true) and continue_final_message (default false; both true is a 400) shape the
prompt's end, and a message's name reaches the template as a message key. vt refused all four as unknown."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers import guarding
from tests.server.refusal import error_of
from vt.server.serve import running_server

# Qwen3's shape, small: a speaker's name after the role; enable_thinking false writes the empty think block
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}{{ '(' ~ m.name ~ ')' if m.name else '' }}\n"
            "{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
            "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
            "{% endif %}")
ASK = [{"role": "user", "content": "Hi"}]
PREFILL = [*ASK, {"role": "assistant", "content": "The answer is"}]
NO_THINKING = {"enable_thinking": False}
CONTINUE = {"add_generation_prompt": False, "continue_final_message": True}


@pytest.fixture(scope="module")
def served():
    with running_server("tiny-qwen3", max_model_len=128, num_blocks=64, max_num_seqs=4,
                        chat_template=TEMPLATE) as (server, url):
        yield server, url


def rendered(url: str, messages: list[dict], **fields: Any) -> tuple[str, int]:
    """The text /tokenize's messages form renders (read back through /detokenize) and its token count."""
    tok = httpx.post(url + "/tokenize", json={"messages": messages, **fields}, timeout=30)
    assert tok.status_code == 200, f"/tokenize refused {fields}: {tok.text[:300]}"
    ids = tok.json()["tokens"]
    text = httpx.post(url + "/detokenize", json={"tokens": ids}, timeout=30).json()["prompt"]
    return text, len(ids)


def chat_prompt_tokens(url: str, messages: list[dict], **fields: Any) -> int:
    r = httpx.post(url + "/v1/chat/completions", json={"messages": messages, "max_tokens": 1, **fields}, timeout=60)
    assert r.status_code == 200, f"chat refused {fields}: {r.text[:300]}"
    return int(r.json()["usage"]["prompt_tokens"])


def test_chat_template_kwargs_reach_the_template_on_chat_and_tokenize(served) -> None:
    url = served[1]
    plain, plain_count = rendered(url, ASK)
    text, count = rendered(url, ASK, chat_template_kwargs=NO_THINKING)
    assert "<think>" not in plain, f"non-vacuity: without the kwarg the template writes no think block: {plain!r}"
    assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"), \
        f"enable_thinking false never reached the template: {text!r}"
    assert chat_prompt_tokens(url, ASK, chat_template_kwargs=NO_THINKING) == count != plain_count, \
        "chat completions rendered the prompt without chat_template_kwargs"


def test_add_generation_prompt_false_leaves_out_the_assistant_turn(served) -> None:
    url = served[1]
    opened, opened_count = rendered(url, ASK)
    closed, closed_count = rendered(url, ASK, add_generation_prompt=False)
    assert opened.endswith("<|im_start|>assistant\n"), f"non-vacuity: true by default: {opened!r}"
    assert closed.endswith("Hi<|im_end|>\n"), f"add_generation_prompt false still opened a turn: {closed!r}"
    assert chat_prompt_tokens(url, ASK, add_generation_prompt=False) == closed_count != opened_count, \
        "chat completions ignored add_generation_prompt false"


def test_continue_final_message_leaves_the_last_message_open(served) -> None:
    url = served[1]
    closed, _ = rendered(url, PREFILL, add_generation_prompt=False)
    text, count = rendered(url, PREFILL, **CONTINUE)
    assert closed.endswith("The answer is<|im_end|>\n"), f"non-vacuity: the turn is closed without it: {closed!r}"
    assert text.endswith("<|im_start|>assistant\nThe answer is"), f"the last message was closed: {text!r}"
    assert chat_prompt_tokens(url, PREFILL, **CONTINUE) == count, "chat completions closed the last message"


@pytest.mark.parametrize("fields,param", [
    ({"continue_final_message": True}, "continue_final_message"),  # add_generation_prompt true by default
    ({"continue_final_message": True, "add_generation_prompt": True}, "continue_final_message"),
    ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs"),
    ({"chat_template_kwargs": ["enable_thinking"]}, "chat_template_kwargs"),
    ({"continue_final_message": "yes", "add_generation_prompt": False}, "continue_final_message"),
], ids=["continue-with-the-default-generation-prompt", "continue-with-a-generation-prompt",
        "kwargs-replacing-the-messages", "kwargs-not-an-object", "continue-not-a-boolean"])
def test_a_rendering_field_vt_cannot_honour_is_a_400_naming_it(served, fields: dict, param: str) -> None:
    """vLLM's rule: a new assistant turn and the last message continued cannot both be asked for."""
    url = served[1]
    for route, body in (("/v1/chat/completions", {"messages": PREFILL, "max_tokens": 1, **fields}),
                        ("/tokenize", {"messages": PREFILL, **fields})):
        err = error_of(httpx.post(url + route, json=body, timeout=30), 400)
        assert err.get("param") == param and param in err.get("message", ""), (route, err)
    assert rendered(url, PREFILL, **CONTINUE)[1] > 0, "non-vacuity: a continuation asked for rightly is served"


def test_a_messages_name_reaches_the_template(served) -> None:
    url = served[1]
    named = [{"role": "user", "content": "Hi", "name": "alice"}]
    text, count = rendered(url, named)
    assert "<|im_start|>user(alice)\nHi" in text, f"the name never reached the template: {text!r}"
    assert "(alice)" not in rendered(url, ASK)[0], "non-vacuity: the name is what wrote it"
    assert chat_prompt_tokens(url, named) == count, "chat completions rendered the message without its name"


def test_llm_chat_takes_vllms_rendering_arguments() -> None:
    """LLM.chat(..., continue_final_message=, chat_template_kwargs=) renders as the server does; both prompts asked
    for is the same typed refusal."""
    from vt import LLM, SamplingParams
    from vt.errors import RequestError

    llm = LLM("tiny-qwen3", max_model_len=128, num_blocks=16)
    sp = SamplingParams(temperature=0, max_tokens=1)
    with guarding("LLM.chat renders with continue_final_message and chat_template_kwargs", TypeError, RequestError):
        cont = llm.chat(PREFILL, sp, add_generation_prompt=False, continue_final_message=True, chat_template=TEMPLATE)
        kw = llm.chat(ASK, sp, chat_template=TEMPLATE, chat_template_kwargs=NO_THINKING)
    assert (cont[0].prompt or "").endswith("assistant\nThe answer is"), f"the last message was closed: {cont[0]}"
    assert (kw[0].prompt or "").endswith("<think>\n\n</think>\n\n"), f"the kwargs never reached it: {kw[0].prompt!r}"
    with pytest.raises(RequestError, match="continue_final_message"):
        llm.chat(PREFILL, sp, continue_final_message=True, chat_template=TEMPLATE)
