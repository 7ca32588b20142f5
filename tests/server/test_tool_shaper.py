"""The tool-call shaper alone (vt/server/tools.py): a choice's text cut anywhere into stream pieces gives the content
and calls its whole text gives, and no piece of a tag leaks into the content; a forced choice's schema; the tools a
template sees under --exclude-tools-when-tool-choice-none."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vt.server.tools import (
    NO_AUTO_TOOLS,
    ToolCallShaper,
    ToolOptions,
    ToolRequest,
    hermes_call,
    parse_tools,
    required_calls,
)

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
AUTO = ToolRequest((TOOL,), "auto")
CALL = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
PIECES = ["Sure.", " ", "\n", CALL, "<tool_call>not json</tool_call>", '<tool_call>{"name": "g", "arguments": {}}',
          "<tool_", "call", "x<", "done"]


def streamed(req: ToolRequest, text: str, cuts: list[int]) -> tuple[str | None, list[tuple[int, str, str]]]:
    shaper, content, calls = ToolCallShaper(req), "", []
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(text))), len(text)]
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        piece, deltas = shaper.feed(text[a:b], done=k == len(bounds) - 2)
        content += piece
        calls += [(d["index"], d["function"]["name"], d["function"]["arguments"]) for d in deltas]
    return (content or None) if calls else content, calls


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.sampled_from(PIECES), max_size=8), cuts=st.lists(st.integers(0, 400), max_size=12))
def test_an_auto_answer_streamed_in_any_pieces_is_its_whole_answer(parts: list[str], cuts: list[int]) -> None:
    text = "".join(parts)
    content, calls = ToolCallShaper(AUTO).whole(text)
    assert streamed(AUTO, text, cuts) == (content, [(i, c["function"]["name"], c["function"]["arguments"])
                                                    for i, c in enumerate(calls)])


def test_the_stream_holds_back_a_tags_start_and_the_whole_reads_each_block() -> None:
    text = f"Sure.\n{CALL}\n<tool_call>not json</tool_call>\n"
    cuts = list(range(1, len(text)))  # a character a piece: every prefix of <tool_call> crosses a cut
    content, calls = streamed(AUTO, text, cuts)
    assert content == "Sure.\n<tool_call>not json</tool_call>" and calls == [(0, "f", '{"a": 1}')], (content, calls)
    after = CALL + "\n\nThen more."  # a part after a call that is not only whitespace is content, whitespace too
    assert streamed(AUTO, after, list(range(1, len(after)))) == ("\n\nThen more.", [(0, "f", '{"a": 1}')])
    whole = ToolCallShaper(AUTO).whole("Sure.\n" + CALL)
    assert whole[0] == "Sure.\n" and len(whole[1]) == 1 and "index" not in whole[1][0], whole
    assert ToolCallShaper(AUTO).whole("no call <tool_") == ("no call <tool_", []), "non-vacuity: text stays text"


def test_a_required_schema_rebases_each_tools_refs_and_parallel_false_holds_one_call() -> None:
    ref = {"type": "object", "properties": {"p": {"$ref": "#/$defs/P"}, "q": {"$ref": "#"}},
           "$defs": {"P": {"type": "integer"}}}
    tools = ({"type": "function", "function": {"name": "a", "parameters": ref}}, TOOL)
    schema = ToolRequest(tools, "required", parallel=False).schema()
    assert schema is not None and schema.get("maxItems") == 1
    a = schema["$defs"]["vt_tool_0"]
    assert (a["properties"]["p"]["$ref"], a["properties"]["q"]["$ref"]) == ("#/$defs/vt_tool_0/$defs/P",
                                                                           "#/$defs/vt_tool_0"), a
    assert [o["properties"]["parameters"]["$ref"] for o in schema["items"]["anyOf"]] == [
        "#/$defs/vt_tool_0", "#/$defs/vt_tool_1"]
    assert "maxItems" not in (ToolRequest(tools, "required").schema() or {}), "non-vacuity: parallel allows many"
    assert ref["properties"]["p"]["$ref"] == "#/$defs/P", "the client's definition is left as it came"


def test_a_call_the_model_nests_too_deep_or_writes_with_a_lone_surrogate_is_text_or_escaped_never_a_500() -> None:
    deep = '{"name": "f", "arguments": ' + "[" * 100000 + "}"
    try:
        read = hermes_call(deep), required_calls("[" * 100000)
    except RecursionError:
        pytest.fail("JSON nested past the parser's depth raised out of the tool parser: the server's 500")
    assert read == (None, None), read
    call = hermes_call('{"name": "f", "arguments": {"a": "\\ud800", "b": "\u00e9"}}')
    assert call is not None
    args = call["function"]["arguments"]
    args.encode("utf-8")  # a lone surrogate written raw would not encode: the response would be a 500
    assert json.loads(args) == {"a": "\ud800", "b": "\u00e9"}, args
    plain = hermes_call('{"name": "f", "arguments": {"b": "\u00e9"}}')
    assert plain is not None and "\u00e9" in plain["function"]["arguments"], "non-vacuity: text kept as written"


def test_tool_choice_none_shows_the_tools_unless_the_server_excludes_them() -> None:
    req = parse_tools({"tools": [TOOL], "tool_choice": "none"}, NO_AUTO_TOOLS)
    assert req is not None and req.template_tools(NO_AUTO_TOOLS) == [TOOL]
    assert req.template_tools(ToolOptions(exclude_when_none=True)) is None
    named = parse_tools({"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "f"}}},
                        ToolOptions(exclude_when_none=True))
    assert named is not None and named.template_tools(ToolOptions(exclude_when_none=True)) == [TOOL], \
        "non-vacuity: only none leaves them out"
    assert json.dumps(ToolCallShaper(req).whole(CALL)) == json.dumps([CALL, []]), "none reads no call"
