"""Reasoning outputs over the OpenAI API (`vt serve --reasoning-parser qwen3`), read by the real `openai` client: a
`<think>` block is the message's `reasoning` (and vLLM's older `reasoning_content`), the rest its content, whole or
streamed to the same text with no tag in either; with tools, calls are read from the content alone; a prompt that
opens the block makes the whole answer reasoning; `include_reasoning: false` drops it; what a parser cannot honour is
a 400. The tiny model writes no think block of its own accord, so answers are held to one by a structured_outputs
regex (each test's guard: without the parser, the tags stay in the content)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vt import LLM, SamplingParams
from vt.server.reasoning import ReasoningSplitter
from vt.server.serve import running_server
from vt.server.tools import ToolOptions

openai = pytest.importorskip("openai")  # a dev dependency; a GPU image without it skips this CPU-lane module

MODEL = "tiny-qwen3"
# the tiny template, and a think block the prompt opens when chat_template_kwargs says open_think
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% if open_think %}<think>\n{% endif %}{% endif %}")
KW = {"max_model_len": 512, "num_blocks": 128, "chat_template": TEMPLATE}
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]
THINK = r"<think>\nI should (check|look)\.\n</think>\n\nParis is (sunny|rainy)\."
CALL = (r'<think>\nA tool\.\n</think>\n\n<tool_call>\n\{"name": "clock", "arguments": \{"zone": "(UTC|CET)"\}\}\n'
        r'</tool_call>')
CLOCK = {"type": "function", "function": {"name": "clock", "parameters": {
    "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}}


@pytest.fixture(scope="module")
def client():
    with running_server(MODEL, reasoning_parser="qwen3", tool_options=ToolOptions(True, "hermes"), **KW) as (_, url):
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def ask(client, regex: str | None = None, **kw):
    extra = {**({"structured_outputs": {"regex": regex}} if regex else {}), **kw.pop("extra_body", {})}
    return client.chat.completions.create(model=MODEL, messages=MESSAGES,  # type: ignore[arg-type]
                                          **{"max_tokens": 64, "temperature": 0, "extra_body": extra, **kw})


def said(m) -> tuple[str | None, str | None, str | None]:
    extra = m.model_extra or {}
    return extra.get("reasoning"), extra.get("reasoning_content"), m.content


def test_a_think_block_is_the_reasoning_and_the_stream_adds_up_to_the_whole_answer(client) -> None:
    reasoning, older, content = said(ask(client, THINK).choices[0].message)
    assert reasoning == older and reasoning in ("\nI should check.\n", "\nI should look.\n"), reasoning
    assert content in ("\n\nParis is sunny.", "\n\nParis is rainy."), content
    chunks = [c.choices[0].delta for c in ask(client, THINK, stream=True) if c.choices]
    streamed = "".join((d.model_extra or {}).get("reasoning") or "" for d in chunks)
    text = "".join(d.content or "" for d in chunks)
    assert (streamed, text) == (reasoning, content), (streamed, text)
    assert all("<" not in ((d.model_extra or {}).get("reasoning") or "") + (d.content or "") for d in chunks)
    dropped = said(ask(client, THINK, extra_body={"include_reasoning": False}).choices[0].message)
    assert dropped == (None, None, content), dropped


def test_with_tools_the_calls_are_read_from_the_content_after_the_block(client) -> None:
    r = ask(client, CALL, tools=[CLOCK], max_tokens=96)
    m = r.choices[0].message
    assert said(m)[0] == "\nA tool.\n" and m.content == "\n\n", said(m)
    assert [c.function.name for c in m.tool_calls or []] == ["clock"] and r.choices[0].finish_reason == "tool_calls"


def test_a_prompt_that_opens_the_block_makes_an_unclosed_answer_all_reasoning(client) -> None:
    opened = {"chat_template_kwargs": {"open_think": True}}
    reasoning, _, content = said(ask(client, extra_body=opened).choices[0].message)
    offline = LLM(MODEL, backend="cpu", **KW).chat(MESSAGES, SamplingParams(temperature=0, max_tokens=64),
                                                   chat_template_kwargs={"open_think": True})[0].outputs[0].text
    assert "</think>" not in offline, "the tiny model never closes the block: the answer is all reasoning"
    assert (reasoning, content) == (offline, None), (reasoning, content)
    plain = said(ask(client).choices[0].message)
    assert plain[0] is None and plain[2], f"non-vacuity: a prompt that opens nothing answers in content: {plain}"


def test_what_a_reasoning_parser_cannot_honour_is_a_400_naming_its_field(client) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        ask(client, extra_body={"chat_template_kwargs": {"open_think": True},
                                "response_format": {"type": "json_object"}})
    err = e.value.body
    assert isinstance(err, dict) and err.get("param") == "response_format" and "think block" in err["message"], err
    assert ask(client, extra_body={"response_format": {"type": "json_object"}}).choices[0].message.content, \
        "non-vacuity: without the open block the constraint is served"
    with running_server(MODEL, **KW) as (_, url):
        bare = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.BadRequestError) as e:
            ask(bare, extra_body={"include_reasoning": False})
        err = e.value.body
        assert isinstance(err, dict) and err.get("param") == "include_reasoning", err
        m = ask(bare, THINK).choices[0].message
        assert m.content is not None and m.content.startswith("<think>") and said(m)[0] is None, \
            "non-vacuity: without the parser the block stays in the content"


PIECES = ["<think>", "</think>", "\n", "I think.", "<th", "ink>", "</", "Answer", "<"]


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.sampled_from(PIECES), max_size=8), cuts=st.lists(st.integers(0, 60), max_size=10),
       opened=st.booleans())
def test_an_answer_split_in_any_pieces_streams_to_its_whole_split(parts: list[str], cuts: list[int],
                                                                  opened: bool) -> None:
    text = "".join(parts)
    split, reasoning, content = ReasoningSplitter(opened), "", ""
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(text))), len(text)]
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        r, c = split.feed(text[a:b], done=k == len(bounds) - 2)
        reasoning, content = reasoning + r, content + c
    whole = ReasoningSplitter(opened).whole(text)
    assert ((reasoning if split.thought else None), (content or None) if split.thought else content) == whole


def test_the_split_holds_back_a_tags_start_across_pieces() -> None:
    text = "<think>\nabc</think>\n\nok"
    split = ReasoningSplitter(False)
    pieces = [split.feed(ch, done=i == len(text) - 1) for i, ch in enumerate(text)]
    assert "".join(p[0] for p in pieces) == "\nabc" and "".join(p[1] for p in pieces) == "\n\nok", pieces
    assert ReasoningSplitter(False).whole("<thinking aloud") == (None, "<thinking aloud"), "text stays text"
