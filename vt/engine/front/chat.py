"""Chat templates rendered as transformers renders them: the checkpoint's Jinja template
(tokenizer_config.json's chat_template) in a sandboxed jinja2 environment with trim_blocks and
lstrip_blocks, `raise_exception` and a `tojson` filter, given the messages, add_generation_prompt, the
special tokens and the caller's chat_template_kwargs (vLLM's: `{"enable_thinking": false}` for Qwen3);
continue_final_message leaves the last message open, cut where its content ends (transformers' rule)."""

from __future__ import annotations

import json
from typing import Any

from vt.errors import RequestError


def _raise(message: str) -> None:
    raise RequestError(f"chat template: {message}")


def load_template(given: str) -> str:
    """--chat-template: a file's path, or the template's text itself (as vLLM takes it); checked to compile now,
    so a broken one is one line at start-up, not an error on every chat request."""
    import os

    from jinja2 import TemplateSyntaxError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from vt.errors import ConfigError

    text = given
    if "{" not in given:  # no Jinja in it: a path
        try:
            with open(os.path.expanduser(given), encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ConfigError(f"chat_template={given!r}: cannot read it ({e.strerror or e}), and it is no template "
                              f"text either") from None
        except UnicodeDecodeError as e:
            raise ConfigError(f"chat_template={given!r}: not UTF-8 text (byte {e.start}): a template file is "
                              f"read as UTF-8") from None
    try:
        ImmutableSandboxedEnvironment().parse(text)  # syntax only: render() sets the environment's options
    except TemplateSyntaxError as e:
        raise ConfigError(f"chat_template: not a valid Jinja template: {e.message} (line {e.lineno})") from None
    return text


MESSAGE_FIELDS = frozenset({"role", "content"})
# OpenAI's speaker name on a message: the server takes it and hands it to the template as a message key
SPEAKER_FIELDS = frozenset({"name"})
TEXT_PART_FIELDS = frozenset({"type", "text"})
# A tool-calling conversation's fields, handed to the chat template as given (vLLM's LLM.chat and server do; Qwen's
# templates render tool calls and tool turns). The server reads each call's arguments as JSON (server/tools.py).
TOOL_FIELDS = frozenset({"name", "tool_calls", "tool_call_id"})


def parse_messages(messages: Any, passed: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """A conversation as vt renders it, for the server and LLM.chat alike: each message's role and its content as
    text, text parts joined with "\n" (vLLM's chat_utils, its "string" content format). `passed`: the fields
    (of TOOL_FIELDS) handed to the template as given; an assistant turn with tool_calls may have no content. What
    vt would drop or misrender (another field, a part other than text, content of another shape) is a RequestError
    naming where it sits: messages[1].content[0].image_url."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages: expected a non-empty list of {role, content} objects")
    return [_message(i, m, passed) for i, m in enumerate(messages)]


def _message(i: int, m: Any, passed: frozenset[str]) -> dict[str, Any]:
    if not isinstance(m, dict) or not isinstance(m.get("role"), str):
        raise RequestError(f"messages[{i}]: expected an object with a string role")
    extra = sorted(set(m) - MESSAGE_FIELDS - passed)
    if extra:  # a key not passed (a tool call without the tool fields, any other key): the template never sees it
        raise RequestError(f"messages[{i}].{extra[0]}: is not supported by vt (a message is its role and content); "
                           f"remove it")
    if not isinstance(m.get("name", ""), str):  # OpenAI's speaker name: text
        raise RequestError(f"messages[{i}].name: expected a string, got {type(m['name']).__name__}")
    tool_turn = "tool_calls" in passed and m.get("tool_calls") is not None and m.get("content") is None
    out: dict[str, Any] = {"role": m["role"], "content": "" if tool_turn else _text(f"messages[{i}].content",
                                                                                      m.get("content"))}
    out.update((k, m[k]) for k in sorted(passed & set(m)))
    return out


def _text(where: str, content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RequestError(f"{where}: expected a string or a list of text parts")
    for j, part in enumerate(content):
        if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
            raise RequestError(f"{where}[{j}]: only text parts ({{'type': 'text', 'text': str}}) are supported")
        extra = sorted(set(part) - TEXT_PART_FIELDS)
        if extra:
            raise RequestError(f"{where}[{j}].{extra[0]}: is not a field of a text part; remove it")
    return "\n".join(part["text"] for part in content)


def render(template: str | None, messages: Any, special_tokens: dict[str, str], add_generation_prompt: bool,
           continue_final_message: bool = False, template_kwargs: dict[str, Any] | None = None) -> str:
    """The conversation as the template writes it. A RequestError opening with the field it is about
    (continue_final_message, chat_template_kwargs) where one is, else about the messages."""
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    if not template:
        raise RequestError("this checkpoint has no chat_template in tokenizer_config.json")
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and "content" in m for m in messages):
        raise RequestError("messages must be a non-empty list of {'role': str, 'content': ...} dicts")
    extra = template_variables(template_kwargs, special_tokens)
    check_continuation(add_generation_prompt, continue_final_message)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False: json.dumps(x, indent=indent,
                                                                                   ensure_ascii=ensure_ascii)
    env.globals["raise_exception"] = _raise
    try:
        text = env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                                 **special_tokens, **extra)
    except TemplateError as e:
        raise RequestError(f"chat template: {e}") from None
    except RequestError:
        raise
    except Exception as e:  # noqa: BLE001 - the template's own code failed on these messages (1/0, a bad index):
        # the caller's to fix, a typed line (it was a bare ZeroDivisionError from LLM.chat, a 500 from /tokenize)
        raise RequestError(f"chat template: it could not render these messages: {type(e).__name__}: {e}") from None
    return left_open(text, messages[-1]["content"]) if continue_final_message else text


# what render names itself: chat_template_kwargs may not replace them (the conversation would silently change)
RENDER_NAMES = frozenset({"messages", "add_generation_prompt", "raise_exception"})


def template_variables(kwargs: Any, special_tokens: dict[str, str]) -> dict[str, Any]:
    """chat_template_kwargs as the template's extra variables: an object of names render does not set itself."""
    if kwargs is None:
        return {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise RequestError(f"chat_template_kwargs: expected an object of template variables, got "
                           f"{type(kwargs).__name__}")
    taken = sorted(set(kwargs) & (RENDER_NAMES | set(special_tokens)))
    if taken:
        raise RequestError(f"chat_template_kwargs.{taken[0]}: is set by the renderer itself; remove it")
    return dict(kwargs)


def check_continuation(add_generation_prompt: bool, continue_final_message: bool) -> None:
    """vLLM's rule: a new assistant turn and the last message continued cannot both be asked for."""
    for name, value in (("add_generation_prompt", add_generation_prompt),
                        ("continue_final_message", continue_final_message)):
        if not isinstance(value, bool):  # "no" would read as true
            raise RequestError(f"{name}: expected a boolean, got {type(value).__name__}")
    if continue_final_message and add_generation_prompt:
        raise RequestError("continue_final_message: cannot be true with add_generation_prompt true (give "
                           "add_generation_prompt false to continue the last message)")


def left_open(text: str, final: str) -> str:
    """text cut where the last message's content ends, so the model continues it (no end-of-turn after it):
    transformers' continue_final_message, which finds the content's last occurrence, stripped, as templates
    often trim it."""
    at = text.rfind(final.strip()) if isinstance(final, str) else -1
    if not isinstance(final, str) or not final.strip() or at < 0:
        raise RequestError("continue_final_message: the last message's content does not appear in the rendered "
                           "chat (an empty message, or a template that rewrites it), so there is nothing to continue")
    kept = final.lstrip()
    return text[: at + (len(kept) if text[at: at + len(kept)] == kept else len(final.strip()))]
