"""LLM.chat reads a conversation through the server's one parser (vt/engine/front/chat.py parse_messages): text
parts joined with "\\n" as vLLM joins them, and anything else (an image part, content None, a field vt would not
read) a RequestError naming where it sits. It rendered a content list as its Python repr, content None as "None",
and took extra keys in silence."""

from __future__ import annotations

import pytest

from vt import LLM, SamplingParams
from vt.errors import RequestError

SP = SamplingParams(temperature=0, max_tokens=1)
PARTS = [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM("tiny-qwen3", max_model_len=128, num_blocks=16)


def test_chat_renders_text_parts_as_their_text_joined_with_newlines(llm: LLM) -> None:
    parts = llm.chat([{"role": "user", "content": PARTS}], SP)[0]
    joined = llm.chat([{"role": "user", "content": "Hello\nthere"}], SP)[0]
    assert parts.prompt == joined.prompt and parts.prompt_token_ids == joined.prompt_token_ids, parts.prompt
    assert "Hello\nthere" in (parts.prompt or ""), "non-vacuity: the text reached the template"


@pytest.mark.parametrize("message,where", [
    ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]},
     "messages[0].content[0]"),
    ({"role": "user", "content": None}, "messages[0].content"),
    ({"role": "user", "content": "Hi", "name": "bob"}, "messages[0].name"),
    ({"role": "user", "content": [{"type": "text", "text": "Hi", "extra": 1}]}, "messages[0].content[0].extra"),
], ids=["image-part", "content-none", "unknown-message-key", "unknown-part-key"])
def test_chat_refuses_a_message_it_would_misrender_naming_where(llm: LLM, message: dict, where: str) -> None:
    with pytest.raises(RequestError) as e:
        llm.chat([message], SP)
    assert str(e.value).startswith(where), str(e.value)
    assert llm.chat([{"role": "user", "content": "Hi"}], SP)[0].outputs, "non-vacuity: a plain message is served"
