"""The OpenAI request bodies vt serves, parsed into SamplingParams, and the OpenAI error shape.

Bad input is an ApiError: an HTTP status and the body OpenAI's clients parse,
{"error": {"message", "type", "param", "code"}}; never a 500. A field vt does not read (a body's, a message's or
a stream option's) is refused by name, never silently ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vt.engine.front.chat import TOOL_FIELDS as MESSAGE_TOOL_FIELDS
from vt.engine.front.chat import parse_messages as parse_conversation
from vt.engine.sample.params import MAX_BIAS, SamplingParams
from vt.engine.sample.structured import StructuredOutputsParams, from_request_field
from vt.errors import ConfigError, RequestError
from vt.server.tools import NO_AUTO_TOOLS, ToolOptions, ToolRequest, conversation_tool_calls, parse_tools

MAX_LOGPROBS = 20


class ApiError(Exception):
    """An HTTP status and OpenAI's error object: type invalid_request_error for the client's mistakes,
    code a string where OpenAI has one (model_not_found), else null."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.kind = ("invalid_request_error" if 400 <= status < 500 else
                     "service_unavailable" if status == 503 else "internal_server_error")

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param)


@dataclass(slots=True)
class Parsed:
    """One request: its prompts (text or token ids; chat: the rendered conversation), the sampling
    parameters, and how to answer."""

    prompts: list[str | list[int]]
    params: SamplingParams
    stream: bool
    include_usage: bool
    continuous_usage: bool
    logprobs: int | None  # completions: top-n per token; chat: top_logprobs when logprobs is true
    max_tokens: int | None  # None: 16 for completions (OpenAI's default); for chat what max_model_len leaves
    is_chat: bool = False
    echo: bool = False  # completions: the prompt (and, with logprobs, its tokens' logprobs) before the completion
    prompt_logprobs: int | None = None  # vLLM's field: the prompt tokens' top-n in the response, as vLLM lays it out
    max_tokens_field: str = "max_tokens"  # the field max_tokens came from (chat: max_completion_tokens, if given)
    cache_salt: str | None = None  # vLLM's: cached prefix blocks shared only with requests of the same salt
    structured_field: str = "structured_outputs"  # the field a structured output came from (or response_format)
    tools: ToolRequest | None = None  # chat: the tools and tool_choice (vt/server/tools.py)
    include_reasoning: bool = True  # vLLM's: false drops a reasoning parser's reasoning from the answer
    return_token_ids: bool = False  # vLLM's: choices carry their token ids, and the prompt's ids come back
    tokens_as_ids: bool | None = None  # vLLM's return_tokens_as_token_ids; None: the server's flag

    @property
    def prompt_only(self) -> bool:
        """echo with max_tokens 0: the prompt is the whole answer; the one token drawn is not returned."""
        return self.max_tokens == 0


def _get(body: dict, name: str, kinds: tuple[type, ...], default: Any = None) -> Any:
    v = body.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) and bool not in kinds:
        raise bad(f"{name}: expected {' or '.join(k.__name__ for k in kinds)}, got a boolean", name)
    if not isinstance(v, kinds):
        raise bad(f"{name}: expected {' or '.join(k.__name__ for k in kinds)}, got {type(v).__name__}", name)
    return v


def served_names(names: str | Sequence[str]) -> tuple[str, ...]:
    """--served-model-name's names, first the one responses carry, each once; none empty."""
    given = (names,) if isinstance(names, str) else tuple(names)
    if not given or any(not isinstance(n, str) or not n.strip() for n in given):
        raise ConfigError(f"--served-model-name {' '.join(map(repr, given))}: each name must be a non-empty string")
    return tuple(dict.fromkeys(given))


def check_model(body: dict, served: tuple[str, ...]) -> None:
    """A request may name any of the served names (vLLM's --served-model-name a b), or none."""
    model = _get(body, "model", (str,))
    if model is not None and model not in served:
        names = ", ".join(f"`{n}`" for n in served)
        raise ApiError(404, f"The model `{model}` does not exist. This server serves {names}.", "model",
                       "model_not_found")


def parse_prompt(body: dict) -> list[str | list[int]]:
    p = body.get("prompt")
    if isinstance(p, str) and p:
        return [p]
    if isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        return [list(p)]
    if isinstance(p, list) and p and all(isinstance(x, str) and x for x in p):
        return list(p)
    if isinstance(p, list) and p and all(isinstance(x, list) and x and all(isinstance(t, int) and not
                                                                          isinstance(t, bool) for t in x) for x in p):
        return [list(x) for x in p]
    raise bad("prompt: expected a non-empty string, a list of token ids, or a list of either", "prompt")


def parse_messages(body: dict) -> list[dict[str, Any]]:
    """The body's messages through the one parser LLM.chat uses too (vt/engine/front/chat.py); a message's name
    (OpenAI's speaker name), an assistant turn's tool_calls (their arguments as objects) and a tool turn's
    tool_call_id reach the template."""
    try:
        return conversation_tool_calls(parse_conversation(body.get("messages"), MESSAGE_TOOL_FIELDS))
    except RequestError as e:
        raise bad(str(e), "messages") from None


# vLLM's chat rendering fields (chat completions and /tokenize's messages): render checks them (one mechanism,
# LLM.chat's too) and a refusal of one opens with its name
RENDER_FIELDS = ("add_generation_prompt", "continue_final_message", "chat_template_kwargs")


def render_options(body: dict) -> dict[str, Any]:
    """The body's chat rendering fields as render's keyword arguments, vLLM's defaults where unset."""
    given = {name: body[name] for name in RENDER_FIELDS if body.get(name) is not None}
    return {"add_generation_prompt": given.get("add_generation_prompt", True),
            "continue_final_message": given.get("continue_final_message", False),
            "template_kwargs": given.get("chat_template_kwargs")}


def render_param(message: str) -> str:
    """The field a render refusal is about: a rendering field its message opens with, else the messages."""
    return opening_field(message, RENDER_FIELDS, "messages")


STREAM_OPTIONS = frozenset({"include_usage", "continuous_usage_stats"})
# What vt reads from a request; "user" (OpenAI's end-user id) changes nothing and is accepted as such.
FIELDS_COMMON = frozenset({"model", "stream", "stream_options", "max_tokens", "logprobs", "stop", "temperature",
                           "top_p", "top_k", "min_p", "seed", "n", "presence_penalty", "frequency_penalty",
                           "repetition_penalty", "min_tokens", "ignore_eos", "stop_token_ids", "user",
                           "prompt_logprobs", "logit_bias", "allowed_token_ids", "include_stop_str_in_output",
                           "skip_special_tokens", "cache_salt", "bad_words", "response_format",
                           "structured_outputs", "return_token_ids", "return_tokens_as_token_ids"})
FIELDS = {False: FIELDS_COMMON | {"prompt", "echo"},
          True: FIELDS_COMMON | {"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
                                 "parallel_tool_calls", "include_reasoning", *RENDER_FIELDS}}
# Fields vt does not implement, accepted only at the value that means "not used".
NO_OP = {"echo": (False,), "suffix": ("",), "tools": ([],), "tool_choice": ("none",),
         "parallel_tool_calls": (False, True),
         "priority": (0,)}  # vLLM's; it too refuses any other value under first-come-first-served scheduling


def check_fields(body: dict, chat: bool) -> None:
    """A field vt would ignore is refused by name (400), never silently dropped."""
    for name, value in body.items():
        if name == "user" and value is not None and not isinstance(value, str):  # OpenAI's end-user id: a string
            raise bad(f"user: expected a string, got {type(value).__name__}", name)
        if name in FIELDS[chat] or value is None:
            continue
        if name == "best_of":
            if value == body.get("n", 1) or (value == 1 and body.get("n") is None):
                continue  # best_of = n is n samples, returned all: what vt does
            raise bad(f"best_of={value!r}: vt returns every sample it draws (best_of equal to n only)", name)
        if name in NO_OP and value in NO_OP[name]:
            continue
        what = "is not supported by vt" if name in NO_OP or name in KNOWN_UNSUPPORTED else "is not a field vt knows"
        raise bad(f"{name}: {what} ({'chat completions' if chat else 'completions'}); remove it", name)


KNOWN_UNSUPPORTED = frozenset({"functions", "function_call", "audio", "modalities", "prediction", "store", "metadata",
                               "service_tier", "reasoning_effort", "web_search_options", "echo"})


def parse_logit_bias(body: dict) -> dict[int, float] | None:
    """OpenAI's logit_bias: {"token id": bias in [-100, 100]}; the keys are JSON strings of token ids."""
    lb = _get(body, "logit_bias", (dict,))
    if lb is None:
        return None
    out = {}
    for key, v in lb.items():
        token = _token_id_key(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not -MAX_BIAS <= v <= MAX_BIAS:
            raise bad(f"logit_bias[{key!r}]: must be a number in [-100, 100], got {v!r}", "logit_bias")
        if token in out:  # "05" beside "5": one token, two biases
            raise bad(f"logit_bias: {key!r} names token {token} a second time", "logit_bias")
        out[token] = float(v)
    return out


def _token_id_key(key: Any) -> int:
    """A logit_bias key as the token id it names, or a 400 naming logit_bias."""
    if not (isinstance(key, str) and key.isdecimal() and key.isascii()):
        raise bad(f"logit_bias: keys must be token ids, got {key!r}", "logit_bias")
    try:
        return int(key)
    except ValueError:  # 4,300+ digits: past Python's limit on str -> int (and far past any vocabulary)
        raise bad(f"logit_bias: a key of {len(key)} digits is no token id", "logit_bias") from None


def parse_structured(body: dict) -> StructuredOutputsParams | None:
    """OpenAI's response_format (text, json_object, json_schema) or vLLM's structured_outputs as the engine's
    StructuredOutputsParams; None for free text. A value vt cannot read is a 400 naming its field."""
    rf, so = body.get("response_format"), body.get("structured_outputs")
    if rf == {"type": "text"}:  # free text: no constraint, whatever structured_outputs says
        rf = None
    if rf is not None and so is not None:
        raise bad("response_format and structured_outputs: give one of them", "response_format")
    try:
        if so is not None:
            return from_request_field(so, "structured_outputs")
    except ConfigError as e:
        raise bad(str(e), "structured_outputs") from None
    if rf is None:
        return None
    if not isinstance(rf, dict):
        raise bad(f"response_format: expected an object with a type, got {type(rf).__name__}", "response_format")
    kind = rf.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return StructuredOutputsParams(json_object=True)
    if kind == "json_schema":
        spec = rf.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, (dict, str)):
            raise bad("response_format.json_schema.schema: required, a JSON schema", "response_format")
        return StructuredOutputsParams(json=schema)
    raise bad(f"response_format: type {kind!r} is not one vt serves (text, json_object or json_schema)",
              "response_format")


def parse_sampling(body: dict, chat: bool, tool_options: ToolOptions = NO_AUTO_TOOLS) -> Parsed:
    """Everything but the prompt: sampling parameters, stream options, logprobs, max_tokens; chat's tools."""
    check_fields(body, chat)
    tools = parse_chat_tools(body, tool_options) if chat else None
    stream = _get(body, "stream", (bool,), False)
    opts = _get(body, "stream_options", (dict,))
    if opts is not None and not stream:
        raise bad("stream_options: only allowed when stream is true", "stream_options")
    opts = opts or {}
    for key, value in opts.items():
        if key not in STREAM_OPTIONS:
            raise bad(f"stream_options.{key}: is not a stream option vt knows ({', '.join(sorted(STREAM_OPTIONS))})",
                      "stream_options")
        if value is not None and not isinstance(value, bool):
            raise bad(f"stream_options.{key}: expected a boolean, got {type(value).__name__}", "stream_options")
    name = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _get(body, name, (int,))
    if name == "max_completion_tokens":  # the older name beside it: checked too, and never a silent loser
        older = _get(body, "max_tokens", (int,))
        if older is not None and older != max_tokens:
            raise bad(f"max_tokens={older} and max_completion_tokens={max_tokens}: give one of them (or the same "
                      f"value)", "max_tokens")
    echo = False if chat else _get(body, "echo", (bool,), False)
    if max_tokens is not None and max_tokens < (0 if echo else 1):  # echo with 0: the prompt alone, scored
        raise bad(f"{name}: must be at least 1 (0 only with echo), got {max_tokens}", name)
    if chat:
        want = _get(body, "logprobs", (bool,), False)
        top = _get(body, "top_logprobs", (int,))
        if top is not None and not want:
            raise bad("top_logprobs: only allowed when logprobs is true", "top_logprobs")
        logprobs = (top or 0) if want else None
    else:
        logprobs = _get(body, "logprobs", (int,))
    if logprobs is not None and not 0 <= logprobs <= MAX_LOGPROBS:
        name = "top_logprobs" if chat else "logprobs"  # chat's count is top_logprobs (its logprobs is a bool)
        raise bad(f"{name}: must be in [0, {MAX_LOGPROBS}], got {logprobs}", name)
    stop = body.get("stop")
    stop = [stop] if isinstance(stop, str) else stop
    if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise bad("stop: expected a string or a list of strings", "stop")
    kw: dict[str, Any] = {}
    for field, kinds in (("temperature", (int, float)), ("top_p", (int, float)), ("top_k", (int,)),
                         ("min_p", (int, float)), ("seed", (int,)), ("n", (int,)), ("presence_penalty", (int, float)),
                         ("frequency_penalty", (int, float)), ("repetition_penalty", (int, float)),
                         ("min_tokens", (int,)), ("ignore_eos", (bool,)), ("stop_token_ids", (list,)),
                         ("allowed_token_ids", (list,)), ("include_stop_str_in_output", (bool,)),
                         ("skip_special_tokens", (bool,)), ("bad_words", (list,))):
        v = _get(body, field, kinds)
        if v is not None:
            kw[field] = v
    if kw.get("temperature") is not None and kw["temperature"] < 0:
        raise bad(f"temperature: must be >= 0, got {kw['temperature']}", "temperature")
    prompt_logprobs = _get(body, "prompt_logprobs", (int,))  # vLLM's: the top-n of every prompt token
    if prompt_logprobs is not None and not 0 <= prompt_logprobs <= MAX_LOGPROBS:
        raise bad(f"prompt_logprobs: must be in [0, {MAX_LOGPROBS}], got {prompt_logprobs}", "prompt_logprobs")
    if chat and stream and prompt_logprobs is not None:  # a chat stream has no place for them (vLLM's rule; its 0
        # passes to be dropped, refused here as any field vt would ignore)
        raise bad("`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs")
    if echo and logprobs is not None:  # the prompt's tokens are scored as the completion's are
        prompt_logprobs = max(logprobs, prompt_logprobs or 0)
    if prompt_logprobs is not None:
        kw["prompt_logprobs"] = prompt_logprobs
    if (logit_bias := parse_logit_bias(body)) is not None:
        kw["logit_bias"] = logit_bias
    structured_field = "response_format" if body.get("response_format") not in (None, {"type": "text"}) else \
        "structured_outputs"
    if (structured := parse_structured(body)) is not None:
        kw["structured_outputs"] = structured
    if tools is not None and tools.forced:  # the call is held to its schema by a structured output
        if structured is not None:
            raise bad(f"tool_choice: a forced tool call ({tools.choice}) is itself a structured output; give "
                      f"{structured_field} or tool_choice, not both", "tool_choice")
        try:
            # compact JSON: arguments are read by programs, and free whitespace lets a model loop on it to max_tokens
            kw["structured_outputs"] = StructuredOutputsParams(json=tools.schema(), disable_any_whitespace=True)
        except RequestError as e:
            raise bad(str(e), "tools") from None
        structured_field = "tools"  # a schema the engine refuses is a tool's parameters
    try:
        # max_tokens 0 (echo): one token is drawn (the prompt's last logits are computed anyway) and not returned
        params = SamplingParams(max_tokens=max_tokens or (1 if max_tokens == 0 else None), stop=stop or [],
                                logprobs=logprobs, **kw)
    except (ConfigError, TypeError) as e:
        raise bad(str(e), str(e).split("=", 1)[0] if "=" in str(e) else None) from None
    salt = body.get("cache_salt")  # checked where every front's is (LLMEngine.add_request): a 400 naming it
    return Parsed([], params, stream, bool(opts.get("include_usage")), bool(opts.get("continuous_usage_stats")),
                  logprobs, max_tokens, chat, echo, _get(body, "prompt_logprobs", (int,)), name, salt,
                  structured_field, tools, _get(body, "include_reasoning", (bool,), True) if chat else True,
                  _get(body, "return_token_ids", (bool,), False), _get(body, "return_tokens_as_token_ids", (bool,)))


def parse_chat_tools(body: dict, options: ToolOptions) -> ToolRequest | None:
    """The body's tools and tool_choice (vt/server/tools.py); a refusal is a 400 naming its field."""
    try:
        return parse_tools(body, options)
    except RequestError as e:
        raise bad(str(e), opening_field(str(e), ("tools", "tool_choice", "parallel_tool_calls"), "tools")) from None


def opening_field(message: str, fields: Sequence[str], default: str) -> str:
    """The field a refusal is about: one of fields its message opens with (tools[0].function.name: tools), else
    default."""
    return next((f for f in fields if message.startswith(f)), default)
