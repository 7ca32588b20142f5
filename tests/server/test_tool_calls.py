"""Tool calling over the OpenAI API, read by the real `openai` client: the tools reach the chat template; a named or
"required" tool_choice holds the output to the tools' schemas (structured outputs) and answers with tool_calls; "auto"
reads the model's hermes `<tool_call>` blocks (with --enable-auto-tool-choice and --tool-call-parser hermes), whole
or streamed, to the same calls; a tool-calling conversation renders; what vt cannot read is a 400 naming its field.

The tiny model writes no tool call of its own accord, so "auto" is shown on output a structured_outputs regex holds
to a hermes answer (each test's guard: without it, the model writes no tag)."""

from __future__ import annotations

import json

import pytest

from vt import LLM, SamplingParams
from vt.engine.sample.structured import StructuredOutputsParams
from vt.server.serve import running_server
from vt.server.tools import ToolOptions

openai = pytest.importorskip("openai")  # a dev dependency; a GPU image without it skips this CPU-lane module
httpx = pytest.importorskip("httpx")

MODEL = "tiny-qwen3"
# Qwen's shape, written small: the tools in a system turn, a call as a <tool_call> block of JSON
TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools:\n{% for t in tools %}{{ t.function | tojson }}\n{% endfor %}"
    "<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content %}{{ m.content }}{% endif %}"
    "{% for c in m.tool_calls or [] %}<tool_call>{\"name\": \"{{ c.function.name }}\", \"arguments\": "
    "{{ c.function.arguments | tojson }}}</tool_call>{% endfor %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
WEATHER = {"type": "function", "function": {
    "name": "weather", "description": "the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]},
                                                    "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                   "required": ["city", "days"], "additionalProperties": False}}}
CLOCK = {"type": "function", "function": {
    "name": "clock", "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}},
                                    "required": ["zone"], "additionalProperties": False}}}
TOOLS = [WEATHER, CLOCK]
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]
# a hermes answer: text, then two calls (the regex leaves the arguments' values to the model)
HERMES = (r'Let me check\.\n<tool_call>\n\{"name": "weather", "arguments": \{"city": "(Paris|Rome)", "days": [1-7]\}\}'
          r'\n</tool_call>\n<tool_call>\n\{"name": "clock", "arguments": \{"zone": "(UTC|CET)"\}\}\n</tool_call>')
KW = {"max_model_len": 1024, "num_blocks": 256, "chat_template": TEMPLATE}


@pytest.fixture(scope="module")
def served():
    with running_server(MODEL, tool_options=ToolOptions(enable_auto=True, parser="hermes"), **KW) as (_, url):
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0), url


@pytest.fixture(scope="module")
def client(served):
    return served[0]


@pytest.fixture(scope="module")
def offline() -> LLM:
    return LLM(MODEL, backend="cpu", **KW)


def valid_weather(args: dict) -> bool:
    return set(args) == {"city", "days"} and args["city"] in ("Paris", "Rome") and 1 <= args["days"] <= 7


def ask(client, **kw):
    return client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS,  # type: ignore[arg-type]
                                          **{"max_tokens": 64, "temperature": 0, **kw})


def test_a_named_tool_choice_answers_with_that_call_whose_arguments_are_what_the_schema_holds_the_model_to(
        client, offline) -> None:
    r = ask(client, tool_choice={"type": "function", "function": {"name": "weather"}})
    choice = r.choices[0]
    calls = choice.message.tool_calls or []
    assert len(calls) == 1 and calls[0].function.name == "weather" and calls[0].id.startswith("chatcmpl-tool-")
    args = json.loads(calls[0].function.arguments)
    assert valid_weather(args), args
    assert choice.message.content == "" and choice.finish_reason == "stop"  # vLLM's: a forced call is no auto call
    # the same prompt (the tools rendered) under the same schema, offline: the same arguments, token for token
    sp = SamplingParams(temperature=0, max_tokens=64, structured_outputs=StructuredOutputsParams(
        json=WEATHER["function"]["parameters"], disable_any_whitespace=True))
    out = offline.chat(MESSAGES, sp, chat_template_kwargs={"tools": TOOLS})[0]
    assert calls[0].function.arguments == out.outputs[0].text
    assert r.usage is not None and r.usage.prompt_tokens == len(out.prompt_token_ids), "the tools reached the prompt"
    free = offline.chat(MESSAGES, SamplingParams(temperature=0, max_tokens=64), chat_template_kwargs={"tools": TOOLS})
    assert not valid_weather(_json_or_empty(free[0].outputs[0].text)), "non-vacuity: unheld, the model writes no call"


def _json_or_empty(text: str) -> dict:
    try:
        v = json.loads(text)
    except ValueError:
        return {}
    return v if isinstance(v, dict) else {}


def test_a_named_tool_choice_streams_its_call_then_its_arguments_adding_up_to_the_whole_answer(client) -> None:
    whole = ask(client, tool_choice={"type": "function", "function": {"name": "weather"}}).choices[0].message
    stream = ask(client, tool_choice={"type": "function", "function": {"name": "weather"}}, stream=True)
    deltas = [c.choices[0].delta for c in stream if c.choices]
    calls = [t for d in deltas for t in d.tool_calls or []]
    assert len(calls) >= 2, f"non-vacuity: the arguments came in pieces, {len(calls)} tool-call deltas"
    assert calls[0].id and calls[0].type == "function" and calls[0].function.name == "weather"
    assert all(t.index == 0 and t.id is None and t.function.name is None for t in calls[1:]), calls[1:]
    assert whole.tool_calls is not None
    assert "".join(t.function.arguments or "" for t in calls) == whole.tool_calls[0].function.arguments


def test_required_answers_with_calls_of_the_given_tools_and_parallel_false_with_exactly_one(client) -> None:
    counts = {}
    for parallel in (True, False):
        r = ask(client, tool_choice="required", temperature=1.0, n=8, seed=3, max_tokens=120,
                parallel_tool_calls=parallel)
        counts[parallel] = [len(c.message.tool_calls or []) for c in r.choices]
        for c in r.choices:
            assert c.finish_reason == "tool_calls" and c.message.content == "", c  # vLLM's, for required
            for call in c.message.tool_calls or []:
                args = json.loads(call.function.arguments)
                assert (call.function.name, valid_weather(args) if call.function.name == "weather" else
                        args in ({"zone": "UTC"}, {"zone": "CET"})) in (("weather", True), ("clock", True)), call
    assert all(n >= 1 for n in counts[True]) and all(n == 1 for n in counts[False]), counts
    assert max(counts[True]) > 1, f"non-vacuity: with parallel calls allowed, some answer made several: {counts}"


def test_auto_reads_the_models_hermes_calls_and_the_stream_adds_up_to_the_whole_answer(client) -> None:
    held = {"structured_outputs": {"regex": HERMES}}
    r = ask(client, max_tokens=200, extra_body=held)
    m, reason = r.choices[0].message, r.choices[0].finish_reason
    assert m.content == "Let me check.\n", m.content  # the text before the first call, as written
    assert [c.function.name for c in m.tool_calls or []] == ["weather", "clock"] and reason == "tool_calls", m
    assert valid_weather(json.loads(m.tool_calls[0].function.arguments))  # type: ignore[index]
    assert len({c.id for c in m.tool_calls or []}) == 2
    stream = ask(client, max_tokens=200, extra_body={**held, "return_token_ids": True}, stream=True)
    chunks = [c.choices[0] for c in stream if c.choices]
    whole_ids = (ask(client, max_tokens=200, extra_body={**held, "return_token_ids": True}).choices[0].model_extra
                 or {})["token_ids"]
    # a frame whose text the parser holds (a tag's start, an open block) still carries its tokens' ids
    assert [t for c in chunks for t in (c.model_extra or {}).get("token_ids", [])] == whole_ids
    text = "".join(c.delta.content or "" for c in chunks)
    calls = [t for c in chunks for t in c.delta.tool_calls or []]
    assert text == m.content and "<tool" not in text, text
    assert [(t.index, t.function.name, t.function.arguments) for t in calls] == [
        (i, c.function.name, c.function.arguments) for i, c in enumerate(m.tool_calls or [])]
    assert chunks[-1].finish_reason == "tool_calls"
    free = ask(client, max_tokens=200)
    assert not free.choices[0].message.tool_calls and "<tool_call>" not in (free.choices[0].message.content or ""), \
        "non-vacuity: unheld, the tiny model writes no call"


def test_tool_choice_none_renders_the_tools_and_reads_no_calls(client, served) -> None:
    held = {"structured_outputs": {"regex": HERMES}}
    r = ask(client, tool_choice="none", max_tokens=200, extra_body=held)
    m = r.choices[0].message
    assert not m.tool_calls and (m.content or "").count("<tool_call>") == 2 and r.choices[0].finish_reason == "stop"
    tokenized = httpx.post(served[1] + "/tokenize", json={"messages": MESSAGES, "tools": TOOLS}).json()
    bare = httpx.post(served[1] + "/tokenize", json={"messages": MESSAGES}).json()
    assert r.usage is not None and r.usage.prompt_tokens == tokenized["count"] > bare["count"], \
        (r.usage, tokenized["count"], bare["count"])


def test_a_tool_calling_conversation_renders_its_calls_arguments_and_results(served) -> None:
    conversation = [*MESSAGES,
                    {"role": "assistant", "content": None, "tool_calls": [
                        {"id": "call-1", "type": "function",
                         "function": {"name": "weather", "arguments": '{"city": "Paris", "days": 2}'}}]},
                    {"role": "tool", "tool_call_id": "call-1", "content": "sunny"}]
    ids = httpx.post(served[1] + "/tokenize", json={"messages": conversation, "add_generation_prompt": False}).json()
    text = httpx.post(served[1] + "/detokenize", json={"tokens": ids["tokens"]}).json()["prompt"]
    # the arguments reach the template as an object (vLLM's rule), which tojson writes back, not a quoted string
    assert '<tool_call>{"name": "weather", "arguments": {"city": "Paris", "days": 2}}</tool_call>' in text, text
    assert "<|im_start|>tool\nsunny<|im_end|>" in text, text
    r = served[0].chat.completions.create(model=MODEL, messages=conversation, tools=TOOLS,  # type: ignore[arg-type]
                                          tool_choice="none", max_tokens=4)
    assert r.usage is not None and r.usage.completion_tokens == 4, "non-vacuity: the conversation is served"


BAD = [  # (extra body, param, words)
    ({"tools": {"type": "function"}}, "tools", "tools: expected a list"),
    ({"tools": [{"type": "code", "function": {"name": "f"}}]}, "tools", "tools[0]: expected"),
    ({"tools": [WEATHER, WEATHER]}, "tools", "names two tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "{}"}}]}, "tools",
     "tools[0].function.parameters: expected a JSON schema object"),
    ({"tools": [{"type": "function", "function": {"name": "f", "examples": []}}]}, "tools",
     "tools[0].function.examples: is not a field"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "alarm"}}}, "tool_choice",
     "'alarm' is none of the tools"),
    ({"tools": TOOLS, "tool_choice": "any"}, "tool_choice", "'any' is not one vt takes"),
    ({"tool_choice": "required"}, "tool_choice", "needs tools"),
    ({"tools": [{"type": "function", "function": {**CLOCK["function"], "strict": True}}]}, "tools",
     "tools[0].function.strict"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice",
     "give response_format or tool_choice"),
    ({"tools": TOOLS, "chat_template_kwargs": {"tools": []}}, "chat_template_kwargs", "give them once"),
    ({"tools": TOOLS, "tool_choice": "none", "messages": [
        *MESSAGES, {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                                         "function": {"name": "clock", "arguments": "{zone"}}]}]},
     "messages", "messages[1].tool_calls[0].function.arguments: not JSON"),
    ({"tools": TOOLS, "tool_choice": "none", "messages": [
        *MESSAGES, {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                                         "function": {"name": "clock", "arguments": "[" * 100000}}]}]},
     "messages", "messages[1].tool_calls[0].function.arguments: not JSON"),  # past the parser's depth: no 500
    ({"tools": TOOLS, "tool_choice": "none", "messages": [
        *MESSAGES, {"role": "assistant", "tool_calls": [{"id": "c", "type": "custom",
                                                         "function": {"name": "clock", "arguments": "{}"}}]}]},
     "messages", "messages[1].tool_calls[0]: a function call"),
    ({"tools": TOOLS, "tool_choice": "none", "messages": [{**MESSAGES[0], "tool_call_id": "c"}]}, "messages",
     "messages[0].tool_call_id: a tool message's"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 5}}}],
      "tool_choice": "required"}, "tools", "structured_outputs.json"),  # the engine's refusal names the tools
]


@pytest.mark.parametrize(("extra", "param", "words"), BAD, ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD)])
def test_a_tool_request_vt_cannot_read_is_a_400_naming_its_field(client, extra: dict, param: str,
                                                                 words: str) -> None:
    extra = dict(extra)
    messages = extra.pop("messages", MESSAGES)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2, extra_body=extra)
    err = e.value.body
    assert isinstance(err, dict) and err.get("param") == param and words in err.get("message", ""), err
    ok = ask(client, max_tokens=2, tool_choice="none")
    assert ok.usage is not None and ok.usage.completion_tokens == 2, "non-vacuity: the server serves on"


def test_parallel_tool_calls_false_under_auto_keeps_the_first_call_whole_and_streamed(client) -> None:
    held = {"structured_outputs": {"regex": HERMES}}
    one = ask(client, max_tokens=200, extra_body=held, parallel_tool_calls=False).choices[0].message
    assert [c.function.name for c in one.tool_calls or []] == ["weather"] and one.content == "Let me check.\n", one
    chunks = [c.choices[0] for c in ask(client, max_tokens=200, extra_body=held, parallel_tool_calls=False,
                                        stream=True) if c.choices]
    calls = [t for c in chunks for t in c.delta.tool_calls or []]
    assert [(t.index, t.function.name) for t in calls] == [(0, "weather")], calls
    both = ask(client, max_tokens=200, extra_body=held).choices[0].message
    assert len(both.tool_calls or []) == 2, "non-vacuity: the answer holds two calls"


def test_required_holds_each_tools_own_refs_and_strict_is_taken_where_it_is_kept(client) -> None:
    """A tool's parameters nested in required's array keep their refs (from their own root: "#" and "#/$defs/...")
    pointing into themselves; strict true under a forced choice or none is taken."""
    tree = {"type": "function", "function": {"name": "tree", "strict": True, "parameters": {
        "type": "object", "properties": {"depth": {"$ref": "#/$defs/Small"},
                                         "kids": {"type": "array", "items": {"$ref": "#"}, "maxItems": 1}},
        "required": ["depth", "kids"], "additionalProperties": False,
        "$defs": {"Small": {"type": "integer", "minimum": 0, "maximum": 3}}}}}
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=[tree],  # type: ignore[arg-type]
                                       tool_choice="required", max_tokens=120, temperature=0)
    calls = r.choices[0].message.tool_calls or []
    assert calls and all(c.function.name == "tree" for c in calls), r.choices[0]

    def fits(node: dict) -> bool:
        return set(node) == {"depth", "kids"} and 0 <= node["depth"] <= 3 and all(fits(k) for k in node["kids"])

    assert all(fits(json.loads(c.function.arguments)) for c in calls), [c.function.arguments for c in calls]
    none = client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=[tree],  # type: ignore[arg-type]
                                          tool_choice="none", max_tokens=2)
    assert none.choices[0].message.tool_calls is None and none.usage is not None


def test_auto_without_the_servers_parser_flags_is_vllms_400_and_named_choices_need_none() -> None:
    with running_server(MODEL, **KW) as (_, url):
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.BadRequestError) as e:
            ask(client, max_tokens=2)  # tools without tool_choice: "auto"
        err = e.value.body
        assert isinstance(err, dict) and err.get("param") == "tool_choice" and \
            "--enable-auto-tool-choice" in err.get("message", ""), err
        named = ask(client, tool_choice={"type": "function", "function": {"name": "clock"}}).choices[0].message
        assert named.tool_calls and json.loads(named.tool_calls[0].function.arguments) in (
            {"zone": "UTC"}, {"zone": "CET"}), named


@pytest.mark.parametrize("flags", [["--enable-auto-tool-choice"], ["--tool-call-parser", "llama3_json"]],
                         ids=["auto-without-a-parser", "unknown-parser"])
def test_a_bad_tool_flag_is_one_config_error_line_exit_2_before_any_model_loads(capsys, flags: list[str]) -> None:
    from vt.cli import main

    code = main(["serve", "no-such-model-is-loaded", *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("vt: error: ConfigError:") and flags[-1] in err[0], err
    main(["serve", "no-such-model-is-loaded", "--port", "0", "--enable-auto-tool-choice", "--tool-call-parser",
          "hermes"])
    fine = capsys.readouterr().err
    assert "tool" not in fine and "no-such-model-is-loaded" in fine, f"non-vacuity: good flags pass: {fine}"
