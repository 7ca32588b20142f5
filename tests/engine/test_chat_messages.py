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
    ({"role": "user", "content": "Hi", "weight": 2}, "messages[0].weight"),
    ({"role": "user", "content": [{"type": "text", "text": "Hi", "extra": 1}]}, "messages[0].content[0].extra"),
], ids=["image-part", "content-none", "unknown-message-key", "unknown-part-key"])
def test_chat_refuses_a_message_it_would_misrender_naming_where(llm: LLM, message: dict, where: str) -> None:
    with pytest.raises(RequestError) as e:
        llm.chat([message], SP)
    assert str(e.value).startswith(where), str(e.value)
    assert llm.chat([{"role": "user", "content": "Hi"}], SP)[0].outputs, "non-vacuity: a plain message is served"


TOOL_TEMPLATE = ("{% for m in messages %}{{ m.role }}:{{ m.content }}"
                 "{% if m.tool_calls %}[{{ m.tool_calls[0].function.name }}]{% endif %}"
                 "{% if m.tool_call_id %}#{{ m.tool_call_id }}{% endif %}{% if m.name %}@{{ m.name }}{% endif %}|"
                 "{% endfor %}")


def test_chat_hands_a_tool_calling_conversations_fields_to_the_template(llm: LLM) -> None:
    """vLLM's LLM.chat hands a message's name, tool_calls and tool_call_id to the chat template (Qwen's render tool
    calls and tool turns), and an assistant turn that only calls a tool may have no content: all served, as before
    the one parser (the server's tool calling: tests/server/test_tool_calls.py)."""
    conversation = [
        {"role": "user", "content": "What is 2+2?", "name": "bob"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
        {"role": "tool", "content": "4", "tool_call_id": "c1"},
    ]
    refused = ""
    try:
        out = llm.chat(conversation, SP, add_generation_prompt=False, chat_template=TOOL_TEMPLATE)[0]
    except RequestError as e:
        refused = str(e)
    assert not refused, f"a tool-calling conversation refused: {refused}"
    assert out.prompt == "user:What is 2+2?@bob|assistant:[add]|tool:4#c1|", out.prompt
    assert out.outputs[0].token_ids, "non-vacuity: served"
