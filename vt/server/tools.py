"""Tool calling over the chat API, as vLLM's server does it. A request's `tools` (OpenAI's function definitions)
reach the chat template as its `tools` variable; `tool_choice` says what the answer may be:

- "none": text (the tools still reach the template, unless --exclude-tools-when-tool-choice-none);
- a named function ({"type": "function", "function": {"name": ...}}): structured outputs hold the output to that
  function's parameters schema, and the output is the call's arguments;
- "required": structured outputs hold the output to a JSON array of {"name", "parameters"} objects, each one of the
  tools, at least one (exactly one with parallel_tool_calls false);
- "auto" (the default when tools are given): the model chooses, and a tool-call parser reads its output. That needs
  --enable-auto-tool-choice and --tool-call-parser, as in vLLM. vt's one parser is hermes:
  `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, which Qwen's and Hermes' templates teach; with
  parallel_tool_calls false, the first call alone (vLLM's).

ToolCallShaper turns a choice's text into the message's content and tool_calls, whole or as stream deltas. Both
follow one rule, so a stream adds up to the whole answer:
- the text before the first tool call is content as written;
- each `<tool_call>` block that parses is a call;
- a block that does not parse stays text;
- text after the first call is content unless it is only whitespace.
"""

from __future__ import annotations

import copy
import json
import uuid
from dataclasses import dataclass
from typing import Any

from vt.errors import ConfigError, RequestError
from vt.server.tags import held_tag_start

TOOL_PARSERS = ("hermes",)
START, END = "<tool_call>", "</tool_call>"
CHOICES = ("none", "auto", "required")
TOOL_FIELDS = frozenset({"type", "function"})
FUNCTION_FIELDS = frozenset({"name", "description", "parameters", "strict"})
CALL_FIELDS = frozenset({"id", "type", "function"})
CALL_FUNCTION_FIELDS = frozenset({"name", "arguments"})


@dataclass(frozen=True, slots=True)
class ToolOptions:
    """The server's tool flags: vLLM's --enable-auto-tool-choice, --tool-call-parser and
    --exclude-tools-when-tool-choice-none."""

    enable_auto: bool = False
    parser: str | None = None
    exclude_when_none: bool = False

    def __post_init__(self) -> None:
        if self.parser is not None and self.parser not in TOOL_PARSERS:
            raise ConfigError(f"--tool-call-parser {self.parser}: vt's parsers are {', '.join(TOOL_PARSERS)} "
                              f"(hermes reads Qwen's and Hermes' <tool_call> blocks)")
        if self.enable_auto and self.parser is None:
            raise ConfigError("--enable-auto-tool-choice: needs --tool-call-parser (hermes) to read the model's "
                              "tool calls")


NO_AUTO_TOOLS = ToolOptions()  # vLLM's default: named, required and none tool choices; auto needs the flags


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """A chat request's tools and how it may answer with them (choice: none, auto, required or named)."""

    tools: tuple[dict[str, Any], ...]
    choice: str
    name: str | None = None  # the function a named choice forces
    parallel: bool = True

    @property
    def forced(self) -> bool:
        return self.choice in ("required", "named")

    def template_tools(self, options: ToolOptions) -> list[dict[str, Any]] | None:
        """The tools the chat template sees (vLLM's: the definitions as sent)."""
        if not self.tools or (self.choice == "none" and options.exclude_when_none):
            return None
        return [copy.deepcopy(t) for t in self.tools]

    def schema(self) -> dict[str, Any] | None:
        """The JSON schema structured outputs hold a forced choice's output to; None for none and auto."""
        if self.choice == "named":
            fn = next(t["function"] for t in self.tools if t["function"]["name"] == self.name)
            return copy.deepcopy(fn.get("parameters")) or {"type": "object", "properties": {}}
        if self.choice != "required":
            return None
        defs: dict[str, Any] = {}
        options = []
        for i, t in enumerate(self.tools):
            params = copy.deepcopy(t["function"].get("parameters")) or {"type": "object", "properties": {}}
            # each tool's schema whole under the root's $defs, its own refs (from its root: "#", "#/$defs/P",
            # "#/properties/x") rebased there: nested in the array as it is, they would point into the array
            key = f"vt_tool_{i}"
            defs[key] = _rebased(params, f"#/$defs/{key}")
            options.append({"properties": {"name": {"type": "string", "enum": [t["function"]["name"]]},
                                           "parameters": {"$ref": f"#/$defs/{key}"}},
                            "required": ["name", "parameters"]})
        schema: dict[str, Any] = {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": options},
                                  "$defs": defs}
        if not self.parallel:
            schema["maxItems"] = 1
        return schema


def _rebased(node: Any, base: str) -> Any:
    """A schema with every local $ref ("#...") moved under base."""
    if isinstance(node, list):
        return [_rebased(x, base) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _rebased(v, base) for k, v in node.items()}
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        out["$ref"] = base + ref[1:]
    return out


def parse_tools(body: dict[str, Any], options: ToolOptions) -> ToolRequest | None:
    """The body's tools, tool_choice and parallel_tool_calls, checked as vLLM checks them; None without tools.
    A RequestError opens with the field at fault."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise RequestError(f"parallel_tool_calls: expected a boolean, got {type(parallel).__name__}")
    if tools is None:
        if choice not in (None, "none"):
            raise RequestError("tool_choice: needs tools (when tool_choice is given, tools must be too)")
        return None
    checked = check_tools(tools)
    if choice is None:
        choice = "auto" if checked else "none"
    if choice == "required" and not checked:  # OpenAI's: required over no tools answers as none
        choice = "none"
    name = _named(choice, checked) if isinstance(choice, dict) else None
    if name is None and choice not in CHOICES:
        raise RequestError(f"tool_choice: {choice!r} is not one vt takes (\"none\", \"auto\", \"required\" or "
                           f"{{\"type\": \"function\", \"function\": {{\"name\": ...}}}})")
    kind = "named" if name is not None else str(choice)
    if kind == "auto":
        if not (options.enable_auto and options.parser):
            raise RequestError('tool_choice: "auto" tool choice requires --enable-auto-tool-choice and '
                               '--tool-call-parser to be set (tools without tool_choice mean "auto")')
    if kind == "auto":
        strict = next((i for i, t in enumerate(checked) if t["function"].get("strict")), None)
        if strict is not None:
            raise RequestError(f"tools[{strict}].function.strict: true is kept only when tool_choice forces the "
                               f"call (\"required\" or a named function); under \"auto\" nothing would hold the "
                               f"arguments to the schema: drop it or force the call")
    return ToolRequest(tuple(checked), kind, name, parallel is not False)


def check_tools(tools: Any) -> list[dict[str, Any]]:
    """A body's tools list, each a function definition vt reads whole (a RequestError naming what is not)."""
    if not isinstance(tools, list):
        raise RequestError(f"tools: expected a list of function tools, got {type(tools).__name__}")
    seen: set[str] = set()
    for i, t in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(t.get("function"), dict):
            raise RequestError(f"{where}: expected {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}")
        _refuse_extra(t, TOOL_FIELDS, where)
        fn = t["function"]
        _refuse_extra(fn, FUNCTION_FIELDS, f"{where}.function")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise RequestError(f"{where}.function.name: expected a non-empty string")
        if fn["name"] in seen:
            raise RequestError(f"{where}.function.name: {fn['name']!r} names two tools")
        seen.add(fn["name"])
        for key, kind, what in (("description", str, "a string"), ("parameters", dict, "a JSON schema object"),
                                ("strict", bool, "a boolean")):
            if fn.get(key) is not None and not isinstance(fn[key], kind):
                raise RequestError(f"{where}.function.{key}: expected {what}, got {type(fn[key]).__name__}")
    return list(tools)


def _named(choice: dict[str, Any], tools: list[dict[str, Any]]) -> str:
    usage = 'give {"type": "function", "function": {"name": "my_function"}}'
    fn = choice.get("function")
    if choice.get("type") != "function" or not isinstance(fn, dict) or not isinstance(fn.get("name"), str) \
            or not fn["name"]:
        raise RequestError(f"tool_choice: a named tool choice names a function: {usage}")
    _refuse_extra(choice, TOOL_FIELDS, "tool_choice")
    _refuse_extra(fn, frozenset({"name"}), "tool_choice.function")
    if fn["name"] not in {t["function"]["name"] for t in tools}:
        raise RequestError(f"tool_choice.function.name: {fn['name']!r} is none of the tools given")
    return str(fn["name"])


def _refuse_extra(obj: dict[str, Any], known: frozenset[str], where: str) -> None:
    extra = sorted(set(obj) - known)
    if extra:
        raise RequestError(f"{where}.{extra[0]}: is not a field vt knows here ({', '.join(sorted(known))})")


def conversation_tool_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An assistant turn's tool_calls as the chat template reads them: each call's arguments, a JSON string over
    the API, as an object (vLLM's rule; Qwen's templates write an object with tojson)."""
    for i, m in enumerate(messages):
        if m.get("tool_call_id") is not None and (m["role"] != "tool" or not isinstance(m["tool_call_id"], str)):
            raise RequestError(f"messages[{i}].tool_call_id: a tool message's, a string (the call it answers)")
        calls = m.get("tool_calls")
        if calls is None:
            continue
        where = f"messages[{i}].tool_calls"
        if m["role"] != "assistant" or not isinstance(calls, list) or not calls:
            raise RequestError(f"{where}: only an assistant message calls tools, with a non-empty list of calls")
        fixed = []
        for j, c in enumerate(calls):
            if not isinstance(c, dict) or not isinstance(c.get("function"), dict):
                raise RequestError(f"{where}[{j}]: expected {{\"id\", \"type\": \"function\", \"function\": "
                                   f"{{\"name\", \"arguments\"}}}}")
            _refuse_extra(c, CALL_FIELDS, f"{where}[{j}]")
            if c.get("type", "function") != "function" or not isinstance(c.get("id", ""), str):
                raise RequestError(f"{where}[{j}]: a function call (type \"function\", a string id)")
            _refuse_extra(c["function"], CALL_FUNCTION_FIELDS, f"{where}[{j}].function")
            fn = dict(c["function"])
            if not isinstance(fn.get("name"), str):
                raise RequestError(f"{where}[{j}].function.name: expected a string")
            args = fn.get("arguments")
            if isinstance(args, str):
                try:
                    fn["arguments"] = json.loads(args) if args.strip() else {}
                except (ValueError, RecursionError) as e:
                    raise RequestError(f"{where}[{j}].function.arguments: not JSON ({e})") from None
            elif args is None:
                fn["arguments"] = {}
            elif not isinstance(args, dict):
                raise RequestError(f"{where}[{j}].function.arguments: expected a JSON string")
            fixed.append({**c, "function": fn})
        m["tool_calls"] = fixed
    return messages


def call_id() -> str:
    return f"chatcmpl-tool-{uuid.uuid4().hex}"


def _dumps(obj: Any) -> str:
    """JSON text as written (non-ASCII kept), escaped only where the model wrote a lone surrogate, which UTF-8 cannot
    carry."""
    text = json.dumps(obj, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(obj)
    return text


def _loads(text: str) -> Any:
    """JSON the model wrote, or None where it is not (or nests past the parser's depth)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id(), "type": "function", "function": {"name": name, "arguments": arguments}}


def hermes_call(block: str) -> dict[str, Any] | None:
    """One <tool_call> block's JSON as a call, or None if it is not {"name": str, "arguments": object}."""
    obj = _loads(block)
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", {})
    if not isinstance(args, dict):
        return None
    return _call(obj["name"], _dumps(args))


def required_calls(text: str) -> list[dict[str, Any]] | None:
    """A required choice's output (a JSON array of {"name", "parameters"}) as calls; None if it is not one (a
    length cut)."""
    items = _loads(text)
    if not isinstance(items, list) or not items or not all(
            isinstance(x, dict) and isinstance(x.get("name"), str) and isinstance(x.get("parameters"), dict)
            for x in items):
        return None
    return [_call(x["name"], _dumps(x["parameters"])) for x in items]


class ToolCallShaper:
    """One choice's text as chat content and tool calls: whole (the answer's message) or fed in pieces (a stream's
    deltas), by the rule the module's docstring states."""

    def __init__(self, req: ToolRequest) -> None:
        self.req = req
        self.calls = 0  # calls sent (stream) or found (whole)
        self._pending = ""  # auto: text held back, a possible tag's start, or whitespace after a call
        self._in_call: str | None = None  # auto: the open block's text so far
        self._buffer = ""  # required: the whole output, read at its end
        self._named_id: str | None = None
        self._part_live = False  # auto: the current text part after a call has shown text that is not whitespace

    @property
    def called(self) -> bool:
        """Whether an auto or required answer called a tool: its finish_reason is then tool_calls (vLLM's, OpenAI's;
        a named choice's stays stop)."""
        return self.req.choice in ("auto", "required") and self.calls > 0

    def whole(self, text: str) -> tuple[str | None, list[dict[str, Any]]]:
        """The message's content and tool_calls for the choice's whole text."""
        if self.req.choice == "named":
            assert self.req.name is not None
            return "", [_call(self.req.name, text)]
        if self.req.choice == "required":
            calls = required_calls(text)
            self.calls = len(calls or [])
            return ("", calls) if calls is not None else (text, [])
        if self.req.choice != "auto":
            return text, []
        content, deltas = self.feed(text, done=True)
        calls = [{k: v for k, v in d.items() if k != "index"} for d in deltas]  # a message's calls carry no index
        return (content or None) if calls else content, calls

    def feed(self, text: str, done: bool) -> tuple[str, list[dict[str, Any]]]:
        """The content and tool-call deltas that text (the choice's next characters) adds; done: its last."""
        if self.req.choice == "named":
            return "", self._named_delta(text)
        if self.req.choice == "required":
            self._buffer += text
            if not done:
                return "", []
            calls = required_calls(self._buffer)
            if calls is None:
                return self._buffer, []
            return "", [self._indexed(c) for c in calls]
        if self.req.choice != "auto":
            return text, []
        return self._hermes(text, done)

    def _named_delta(self, text: str) -> list[dict[str, Any]]:
        if self._named_id is None:  # the first delta says which call: its id, type and name
            self._named_id = call_id()
            self.calls = 1
            return [{"index": 0, "id": self._named_id, "type": "function",
                     "function": {"name": self.req.name, "arguments": text}}]
        return [{"index": 0, "function": {"arguments": text}}] if text else []

    def _indexed(self, call: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        return {"index": self.calls - 1, **call}

    def _hermes(self, text: str, done: bool) -> tuple[str, list[dict[str, Any]]]:
        out: list[str] = []
        calls: list[dict[str, Any]] = []
        rest = text
        while True:
            if self._in_call is not None:
                self._in_call += rest
                end = self._in_call.find(END)
                if end < 0:
                    if done:  # a block the output never closed: a call if it parses, else text
                        self._close_block(self._in_call, out, calls, closed=False)
                        self._in_call = None
                    break
                block, rest = self._in_call[:end], self._in_call[end + len(END):]
                self._in_call = None
                self._close_block(block, out, calls, closed=True)
                continue
            buf, self._pending = self._pending + rest, ""
            start = buf.find(START)
            if start >= 0:
                out.append(self._outside(buf[:start]))
                self._in_call, rest, self._part_live = "", buf[start + len(START):], False
                continue
            if done:
                out.append(self._outside(buf))
                break
            hold = held_tag_start(buf, START)
            head, self._pending = buf[:len(buf) - hold], buf[len(buf) - hold:]
            if self.calls and not self._part_live and not head.strip():
                self._pending = buf  # whitespace after a call: held until the text says whether it is content
                break
            out.append(self._outside(head))
            break
        return "".join(out), calls

    def _outside(self, text: str) -> str:
        """Text outside the blocks: before the first call, as written; after one, a part (the text between two
        blocks) is content from its first character that is not whitespace, and wholly dropped if it has none."""
        if self.calls and not self._part_live and not text.strip():
            return ""
        self._part_live = self._part_live or bool(text.strip())
        return text

    def _close_block(self, block: str, out: list[str], calls: list[dict[str, Any]], closed: bool) -> None:
        call = hermes_call(block.strip())
        if call is None:  # not a call: the block stays text, tags and all
            out.append(START + block + (END if closed else ""))
            return
        if self.calls and not self.req.parallel:  # parallel_tool_calls false: the first call alone (vLLM's)
            return
        calls.append(self._indexed(call))

