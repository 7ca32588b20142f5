"""The OpenAI-compatible HTTP API on Starlette (served by uvicorn): /v1/models, /v1/completions,
/v1/chat/completions (streaming or not), and vLLM's /tokenize, /detokenize, /version, /health, /metrics.
With an API key, every /v1 route wants `Authorization: Bearer KEY` (a 401 with OpenAI's error body
otherwise); the others stay open, as vLLM's do.

The rule (DESIGN.md, Server): the first byte of a streaming response is written only after the engine
produced the request's first result or its error. A handler awaits that first output before it builds
any response, so an error before the first token is the whole response (an HTTP error with the OpenAI
error body: no 200, no frame). After it, a failure is one `data: {"error": ...}` frame, then
`data: [DONE]`. A client that goes away aborts its request (the generators' finally), and its blocks
are free within one engine step.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from vt.engine.core.request import RequestOutput
from vt.engine.front.llm_engine import encode_text
from vt.errors import ConfigError, RequestError
from vt.server.async_llm import AsyncLLM, EngineDeadError
from vt.server.cors import CorsPolicy
from vt.server.metrics import Metrics
from vt.server.protocol import (
    RENDER_FIELDS,
    ApiError,
    Parsed,
    bad,
    check_model,
    opening_field,
    parse_messages,
    parse_prompt,
    parse_sampling,
    render_options,
    render_param,
)
from vt.server.reasoning import ReasoningSplitter, check_parser, prompt_opens_a_block
from vt.server.tools import NO_AUTO_TOOLS, ToolCallShaper, ToolOptions, check_tools

MAX_BODY_BYTES = 4 << 20
LOG = logging.getLogger("vt.server")


class Server:
    def __init__(self, llm: AsyncLLM, model_names: tuple[str, ...], max_body_bytes: int = MAX_BODY_BYTES,
                 api_key: str | None = None, prompt_tokens_details: bool = False,
                 tool_options: ToolOptions = NO_AUTO_TOOLS, reasoning_parser: str | None = None,
                 return_tokens_as_token_ids: bool = False) -> None:
        # vLLM's --served-model-name a b (protocol.served_names): a request may name any of them; responses and the
        # metrics' label carry the first
        self.model_names = model_names
        self.llm, self.model_name, self.max_body_bytes = llm, self.model_names[0], max_body_bytes
        self.api_key = api_key
        self.prompt_tokens_details = prompt_tokens_details  # vLLM's --enable-prompt-tokens-details
        self.tool_options = tool_options  # --enable-auto-tool-choice, --tool-call-parser, --exclude-tools-...
        self.reasoning_parser = check_parser(reasoning_parser)  # --reasoning-parser: think blocks as reasoning
        self.tokens_as_ids = return_tokens_as_token_ids  # --return-tokens-as-token-ids: logprobs name tokens by id
        self.metrics = Metrics(llm, self.model_name)
        llm.on_finished = self.metrics.observe
        self.created = int(time.time())
        self.draining: str | None = None  # why the server stops, once a signal asked: new requests are refused
        self.loop: asyncio.AbstractEventLoop | None = None  # the event loop serving, from the lifespan's start

    def begin_shutdown(self, why: str, timeout_s: float, now: bool) -> None:
        """A signal asked the server to stop (uvicorn's signal handler, on the event loop's thread): from here on
        new requests are refused with a 503; those in flight are failed (one error frame, then [DONE]) at once when
        now or timeout_s is 0 (vLLM's --shutdown-timeout default), else once timeout_s has passed, so a drain lets
        them finish meanwhile."""
        self.draining = why
        if self.loop is None:
            return
        if now or timeout_s <= 0:
            self.loop.call_soon(self.llm.shutdown, why)
        else:
            self.loop.call_later(timeout_s, self.llm.shutdown, f"{why}: --shutdown-timeout {timeout_s:g} s passed")

    def _refusal_while_draining(self) -> Response | None:
        if self.draining is None:
            return None
        return JSONResponse(ApiError(503, self.draining).body(), status_code=503)

    # ---- plumbing ---------------------------------------------------------------------------
    async def _body(self, request: Request) -> dict[str, Any]:
        size = request.headers.get("content-length")
        if size is not None and size.isdigit() and int(size) > self.max_body_bytes:
            raise ApiError(413, f"request body of {size} bytes is over the limit of {self.max_body_bytes}")
        check_json_content_type(request)
        raw = b""
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > self.max_body_bytes:
                raise ApiError(413, f"request body is over the limit of {self.max_body_bytes} bytes")
        depth = json_depth(raw) if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH else 0  # C-speed pre-check
        if depth > MAX_JSON_DEPTH:
            raise bad(f"the body nests {depth} levels deep; at most {MAX_JSON_DEPTH}")
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as e:  # ValueError: bad JSON, bad UTF-8, an integer of 4,300+ digits
            raise bad(f"the body is not valid JSON: {type(e).__name__}: {e}") from None
        if not isinstance(body, dict):
            raise bad(f"the body must be a JSON object, got {type(body).__name__}")
        where = lone_surrogate(body)
        if where is not None:  # "\ud800" parses into a str no tokenizer or pipe can encode
            raise bad(f"{where} holds a lone UTF-16 surrogate: not text", where.split("[")[0].split(".")[0])
        return body

    def _tokenize(self, prompt: str | list[int], parsed: Parsed) -> list[int]:
        e = self.llm.engine
        try:  # a rendered chat has its special tokens from the template (vLLM: add_special_tokens false for chat)
            ids = e.tokenize(prompt, add_special_tokens=not parsed.is_chat)
        except RequestError as err:
            raise bad(str(err), "prompt") from None
        room = e.cfg.max_model_len - len(ids)
        if room < 1:
            raise bad(f"the prompt has {len(ids)} tokens; max_model_len={e.cfg.max_model_len} leaves no room for "
                      f"one generated token", "messages" if parsed.is_chat else "prompt")
        if parsed.max_tokens is not None and parsed.max_tokens > room:
            field = parsed.max_tokens_field  # chat's max_completion_tokens is named as the client gave it
            raise bad(f"{field}={parsed.max_tokens} is too large: the prompt has {len(ids)} tokens and "
                      f"max_model_len is {e.cfg.max_model_len} (at most {room})", field)
        if parsed.max_tokens is None and parsed.params.min_tokens > room:
            # the default max_tokens is capped to the room before min_tokens is checked against it (vLLM's
            # get_max_tokens): never a 200 with fewer tokens than min_tokens promised
            raise bad(f"min_tokens={parsed.params.min_tokens} is too large: the prompt has {len(ids)} tokens and "
                      f"max_model_len is {e.cfg.max_model_len} (at most {room} can be generated)", "min_tokens")
        if parsed.max_tokens is None and parsed.is_chat:
            parsed.params.max_tokens = room  # chat, as OpenAI's: no max_tokens means the rest of the context
        return ids

    # ---- endpoints --------------------------------------------------------------------------
    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": name, "object": "model", "created": self.created, "owned_by": "vt", "root": self.llm.cfg.model,
             "parent": None, "max_model_len": self.llm.cfg.max_model_len} for name in self.model_names]})

    async def tokenize(self, request: Request) -> Response:
        """vLLM's /tokenize: a prompt (or chat messages, rendered by the chat template) to token ids."""
        try:
            body = await self._body(request)
            check_model(body, self.model_names)
            text, add = self._tokenize_what(body)
            e = self.llm.engine
            ids = await tokenized(lambda: encode_text(e.tokenizer, text, add), [text])
            # vLLM's return_token_strs: each token's string in the vocabulary (the tokenizer's, not decoded text)
            strs = [e.tokenizer.id_to_token(t) for t in ids] if flag(body, "return_token_strs", False) else None
            return JSONResponse({"count": len(ids), "max_model_len": e.cfg.max_model_len, "tokens": list(ids),
                                 "token_strs": strs})
        except ApiError as err:
            return JSONResponse(err.body(), status_code=err.status)

    def _tokenize_what(self, body: dict[str, Any]) -> tuple[str, bool]:
        """/tokenize's text and whether to add the tokenizer's special tokens: a prompt as given (true by default),
        or messages rendered by the chat template, which writes them (false by default), as vLLM's
        TokenizeCompletionRequest and TokenizeChatRequest. Never both shapes' fields at once."""
        chat = "messages" in body
        refuse_unknown(body, TOKENIZE_CHAT_FIELDS if chat else TOKENIZE_PROMPT_FIELDS,
                       "/tokenize with messages" if chat else "/tokenize with a prompt")
        if not chat:
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                raise bad("prompt: expected a string (or give messages)", "prompt")
            return prompt, flag(body, "add_special_tokens", True)
        tools = body.get("tools")  # vLLM's /tokenize renders the tools as given (there is no tool_choice here)
        try:
            checked = check_tools(tools) if tools is not None else None
        except RequestError as e:
            raise bad(str(e), "tools") from None
        return self._rendered_chat(body, checked), flag(body, "add_special_tokens", False)

    def _rendered_chat(self, body: dict[str, Any], tools: list[dict[str, Any]] | None) -> str:
        """The body's messages rendered by the chat template with its rendering fields and the tools (chat
        completions and /tokenize alike); what the template cannot render is a 400 naming the field at fault (else
        messages)."""
        from vt.engine.front.chat import render

        e, messages = self.llm.engine, parse_messages(body)  # its refusals name where they sit already
        options = render_options(body)
        if tools is not None:  # the template's `tools` variable, as vLLM and transformers hand it
            kwargs = options["template_kwargs"]
            if isinstance(kwargs, dict) and "tools" in kwargs:
                raise bad("chat_template_kwargs.tools: the tools are the body's tools field; give them once",
                          "chat_template_kwargs")
            options["template_kwargs"] = {**(kwargs or {}), "tools": tools}
        try:
            return render(e.chat_template, messages, e.special_tokens, **options)
        except RequestError as err:  # the client's to fix
            raise bad(str(err), render_param(str(err))) from None
        except Exception as err:  # noqa: BLE001 - a template that cannot render this conversation
            raise bad(f"messages: the chat template could not render them: {err}", "messages") from None

    async def detokenize(self, request: Request) -> Response:
        """vLLM's /detokenize: token ids to text."""
        try:
            body = await self._body(request)
            check_model(body, self.model_names)
            refuse_unknown(body, frozenset({"model", "tokens"}), "/detokenize")
            tokens = body.get("tokens")
            vocab = self.llm.engine.vocab_size
            if not (isinstance(tokens, list) and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab
                                                     for t in tokens)):
                raise bad(f"tokens: expected a list of token ids in [0, {vocab})", "tokens")
            return JSONResponse({"prompt": self.llm.engine.tokenizer.decode(tokens, skip_special_tokens=False)})
        except ApiError as err:
            return JSONResponse(err.body(), status_code=err.status)

    async def version(self, request: Request) -> Response:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as package_version

        try:
            ver = package_version("vt")
        except PackageNotFoundError:
            ver = "unknown"
        return JSONResponse({"version": ver})

    async def health(self, request: Request) -> Response:
        if (refused := self._refusal_while_draining()) is not None:
            return refused  # a load balancer sends no more
        if not self.llm.is_alive:
            return JSONResponse(ApiError(503, self.llm.why_stopped).body(), status_code=503)
        return Response(status_code=200)

    async def prometheus(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def completions(self, request: Request) -> Response:
        return await self._serve(request, chat=False)

    async def chat(self, request: Request) -> Response:
        return await self._serve(request, chat=True)

    async def _serve(self, request: Request, chat: bool) -> Response:
        if (refused := self._refusal_while_draining()) is not None:
            return refused
        try:
            body = await self._body(request)
            check_model(body, self.model_names)
            parsed = parse_sampling(body, chat, self.tool_options)
            tools = parsed.tools.template_tools(self.tool_options) if parsed.tools else None
            prompts: list[str | list[int]] = [self._rendered_chat(body, tools)] if chat else parse_prompt(body)
            if chat:
                self._check_reasoning(parsed, str(prompts[0]))
            token_ids = await tokenized(lambda: [self._tokenize(p, parsed) for p in prompts], prompts)
            try:  # once a request: a min_tokens past the default max_tokens, which only the checkpoint's defaults know
                parsed.params.resolve(self.llm.engine.generation_config)
            except ConfigError as err:
                raise bad(str(err), str(err).split("=", 1)[0]) from None
            rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
            answer = Answer(self, rid, chat, parsed, prompts, token_ids)
            return await (answer.stream(request) if parsed.stream else answer.whole(request))
        except ApiError as e:
            return JSONResponse(e.body(), status_code=e.status)

    def _check_reasoning(self, parsed: Parsed, prompt: str) -> None:
        """What a reasoning parser cannot honour is a 400: include_reasoning false without one (nothing tells the
        reasoning apart), and a structured output under a think block the prompt opened (vt holds the whole answer
        to the grammar, the reasoning too, where vLLM starts the grammar after the block)."""
        if self.reasoning_parser is None and not parsed.include_reasoning:
            raise bad("include_reasoning: false needs a server started with --reasoning-parser (nothing here tells "
                      "reasoning from content)", "include_reasoning")
        if self.reasoning_parser is not None and parsed.params.structured_outputs is not None and \
                prompt_opens_a_block(prompt):
            raise bad(f"{parsed.structured_field}: the prompt opens a think block, and vt holds the whole answer to "
                      f"the grammar, reasoning included; render without thinking (chat_template_kwargs "
                      f"enable_thinking false) or drop the constraint", parsed.structured_field)


# Prompt text longer than this is tokenized on a worker thread: a 4 MiB prompt took ~3 s on the event loop, and
# every other request (/health too) waited for it.
OFF_LOOP_CHARS = 64 * 1024
MAX_JSON_DEPTH = 64  # arrays and objects inside each other: a request needs a handful; Python's parser recurses
T = TypeVar("T")


async def tokenized(work: Callable[[], T], texts: Sequence[object]) -> T:
    """work(), which tokenizes texts: on a worker thread when they are long, where the tokenizer releases the GIL
    (encode_text) so the event loop serves everyone else meanwhile; on the loop when short (no thread hop)."""
    if sum(len(t) for t in texts if isinstance(t, str)) > OFF_LOOP_CHARS:
        return await asyncio.to_thread(work)
    return work()


def check_json_content_type(request: Request) -> None:
    """vLLM's validate_json_request: a JSON route's body must say it is JSON (a charset may follow), else a 400
    (vLLM's RequestValidationError) before the body is read."""
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise bad(f"Unsupported Media Type: Only 'application/json' is allowed (the Content-Type was "
                  f"{media_type or 'not given'})")


TOKENIZE_PROMPT_FIELDS = frozenset({"model", "prompt", "add_special_tokens", "return_token_strs"})
TOKENIZE_CHAT_FIELDS = frozenset({"model", "messages", "add_special_tokens", "return_token_strs", "tools",
                                  *RENDER_FIELDS})


def flag(body: dict[str, Any], name: str, default: bool) -> bool:
    """A boolean field of the body, or a 400 naming it ("no" would read as true)."""
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise bad(f"{name}: expected a boolean", name)
    return value


def refuse_unknown(body: dict[str, Any], fields: frozenset[str], route: str) -> None:
    """A field the route does not read is refused by name, never silently ignored."""
    unknown = sorted(set(body) - fields)
    if unknown:
        raise bad(f"{unknown[0]}: is not a field {route} reads ({', '.join(sorted(fields))}); remove it", unknown[0])


# the fields an engine's RequestError can open with; any other refusal is about the prompt
REQUEST_FIELDS = ("logit_bias", "allowed_token_ids", "stop_token_ids", "min_tokens", "repetition_penalty",
                  "presence_penalty", "frequency_penalty", "bad_words", "cache_salt", "structured_outputs")


LOGPROB_FLOOR = -9999.0  # vLLM's server shows no logprob below it (a token a structured output masks: about -1e30)


def shown(logprob: float) -> float:
    """A logprob as the API shows it: at least LOGPROB_FLOOR, as vLLM's server clamps them."""
    return max(logprob, LOGPROB_FLOOR)


def request_param(message: str) -> str:
    """The field an engine's RequestError is about: a field its message opens with, else the prompt."""
    return opening_field(message, REQUEST_FIELDS, "prompt")


def lone_surrogate(value: Any, path: str = "") -> str | None:
    """The path (e.g. `stop[1]`, `messages[0].content`) of the first string in a parsed body that holds a lone
    UTF-16 surrogate, a key or a value; None when every string is text."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path or "the body"
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        at = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else str(key)
        if isinstance(key, str) and lone_surrogate(key) is not None:
            return at
        found = lone_surrogate(item, at)
        if found is not None:
            return found
    return None


def json_depth(raw: bytes) -> int:
    """How deep arrays and objects nest in raw JSON (brackets inside strings do not count), without parsing it."""
    depth = deepest = 0
    in_string = escaped = False
    for b in raw:
        if in_string:
            if escaped:
                escaped = False
            elif b == 0x5C:  # backslash
                escaped = True
            elif b == 0x22:  # quote
                in_string = False
        elif b == 0x22:
            in_string = True
        elif b in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif b in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest


class Answer:
    """One request's response: its engine requests (one per prompt) and how their outputs become OpenAI
    objects, whole or as server-sent events."""

    def __init__(self, server: Server, rid: str, chat: bool, parsed: Parsed, prompts: list, token_ids: list) -> None:
        self.server, self.rid, self.chat, self.parsed = server, rid, chat, parsed
        self.prompts, self.token_ids = prompts, token_ids
        self.echoed: set[tuple[int, int]] = set()  # (prompt, sample): its prompt was sent (echo)
        self.gens = [server.llm.generate(ids, parsed.params, f"{rid}-{i}", parsed.cache_salt)
                     for i, ids in enumerate(token_ids)]
        self.sent: dict[tuple[int, int], tuple[int, int]] = {}  # (prompt, sample) -> (chars, tokens) sent
        self.ended: set[tuple[int, int]] = set()  # (prompt, sample): its finish_reason was sent; nothing follows it
        # (prompt, sample) -> the next token's text_offset: its place in the choice's text, which the characters
        # sent trail while text is held back (a possible stop string, a partial UTF-8 character)
        self.offsets: dict[tuple[int, int], int] = {}
        self.max_stop = max((len(s) for s in parsed.params.stop), default=0)
        self.created = int(time.time())
        self.tokenizer = server.llm.engine.tokenizer
        self.shapers: dict[tuple[int, int], ToolCallShaper] = {}  # (prompt, sample): its text as tool calls
        self.splitters: dict[tuple[int, int], ReasoningSplitter] = {}  # (prompt, sample): its think block
        self.opened = chat and isinstance(prompts[0], str) and prompt_opens_a_block(prompts[0])

    async def _first(self) -> list[RequestOutput]:
        """Every prompt's first output, or the error that is then the whole response."""
        try:
            firsts = [await g.__anext__() for g in self.gens]
        except RequestError as e:
            await self.close()
            param = request_param(str(e))  # the engine names structured_outputs; the client may have sent
            raise bad(str(e), self.parsed.structured_field if param == "structured_outputs" else param) from None
        except EngineDeadError as e:
            await self.close()
            raise ApiError(503, str(e)) from None
        except Exception as e:  # noqa: BLE001 - the engine failed to take this request (logged there): a 500
            await self.close()
            raise ApiError(500, f"the engine failed to add this request: {type(e).__name__}: {e}") from None
        for out in firsts:
            failed = next((c for c in out.outputs if c.finish_reason == "error"), None)
            if failed is not None and not failed.token_ids:
                await self.close()
                raise ApiError(500, f"the engine failed this request: {out.error}")
        return firsts

    async def close(self) -> None:
        for g in self.gens:
            await g.aclose()

    async def _while_connected(self, request: Request, work: Any) -> asyncio.Future | None:
        """Runs work (a coroutine) to its end, or until the client goes away: then it is cancelled and the
        requests aborted (the generators' finally asks the engine), and the answer is None."""
        task = asyncio.ensure_future(work)
        while not task.done():
            done, _ = await asyncio.wait({task}, timeout=0.05)
            if not done and await request.is_disconnected():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
                await self.close()
                return None
        return task

    async def whole(self, request: Request) -> Response:
        async def run() -> list[RequestOutput]:
            last = await self._first()
            for i, g in enumerate(self.gens):
                async for out in g:
                    last[i] = out
            return last

        task = await self._while_connected(request, run())
        if task is None:
            return Response(status_code=499)
        try:
            outs = task.result()
        except ApiError as e:
            return JSONResponse(e.body(), status_code=e.status)
        except EngineDeadError as e:
            return JSONResponse(ApiError(503, str(e)).body(), status_code=503)
        choices = [self._choice(i, out, c, whole=True) for i, out in enumerate(outs) for c in out.outputs]
        body = {"id": self.rid, "object": "chat.completion" if self.chat else "text_completion",
                "created": self.created, "model": self.server.model_name, "choices": choices,
                "usage": self._usage(outs)}
        if self.chat and self.parsed.prompt_logprobs is not None:  # vLLM's place for them in a chat response
            body["prompt_logprobs"] = self._prompt_logprobs(0, outs[0])
        if self.chat and self.parsed.return_token_ids:  # vLLM's: chat's prompt ids sit on the response
            body["prompt_token_ids"] = list(self.token_ids[0])
        return JSONResponse(body)

    async def stream(self, request: Request) -> Response:
        # Before any byte: an error here is the whole response, and a client that leaves while its request
        # still waits for the engine (queued, or prefilling) aborts it, as one that leaves mid-stream does.
        task = await self._while_connected(request, self._first())
        if task is None:
            return Response(status_code=499)
        firsts = task.result()
        return StreamingResponse(self._events(firsts), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def _events(self, firsts: list[RequestOutput] | None) -> AsyncIterator[str]:
        try:
            if firsts is None:  # (never, by the rule above: the stream would have begun before the engine)
                firsts = await self._first()
            latest = list(firsts)
            if self.chat:  # the role frame, now that the engine has produced something
                role = self._chunk([{"index": c.index + i * len(out.outputs), "delta": {"role": "assistant",
                                                                                       "content": ""},
                                     "logprobs": None, "finish_reason": None}
                                    for i, out in enumerate(firsts) for c in out.outputs])
                if self.parsed.return_token_ids:  # vLLM's: the prompt's ids once, on the stream's first chunk
                    role["prompt_token_ids"] = list(self.token_ids[0])
                yield _sse(role)
            for i, out in enumerate(firsts):
                for frame in self._deltas(i, out, latest):
                    yield frame
            async with contextlib.aclosing(merged(self.gens)) as outs:  # closed before close() closes the gens
                async for i, out in outs:
                    latest[i] = out
                    for frame in self._deltas(i, out, latest):
                        yield frame
            if self.parsed.include_usage:
                yield _sse(self._chunk([], usage=self._usage(latest)))
        except (EngineDeadError, RequestError, ApiError) as e:
            err = e if isinstance(e, ApiError) else ApiError(503 if isinstance(e, EngineDeadError) else 400, str(e))
            yield _sse(err.body())
        except Exception as e:  # noqa: BLE001 - a bug of ours after the 200: logged, then one frame, as any error
            LOG.exception("internal error streaming %s", self.rid)
            yield _sse(ApiError(500, f"internal error: {type(e).__name__}: {e}").body())
        finally:
            await self.close()
        yield "data: [DONE]\n\n"

    def _deltas(self, i: int, out: RequestOutput, latest: list[RequestOutput]) -> list[str]:
        frames = []
        for c in out.outputs:
            choice = self._choice(i, out, c, whole=False)
            if choice is None:
                continue
            usage = self._usage(latest) if self.parsed.continuous_usage else None
            frames.append(_sse(self._chunk([choice], usage=usage)))
            if c.finish_reason == "error":
                frames.append(_sse(ApiError(500, f"the engine failed this request: {out.error}").body()))
        return frames

    def _choice(self, i: int, out: RequestOutput, c: Any, whole: bool) -> dict[str, Any] | None:
        """The choice for sample c of prompt i: all of it (whole), or what is new since the last frame."""
        index, key = i * len(out.outputs) + c.index, (i, c.index)
        if key in self.ended:  # its final frame went out: a sibling's step says nothing of it (OpenAI's, vLLM's)
            return None
        chars, toks = (0, 0) if whole else self.sent.get(key, (0, 0))
        done = c.finish_reason is not None
        # echo with max_tokens 0: the one token drawn is not part of the answer
        c_text, c_ids, c_lps = ("", [], []) if self.parsed.prompt_only else (c.text, c.token_ids, c.logprobs or [])
        # hold back what could still turn out to be the start of a stop string
        upto = len(c_text) if done or not self.max_stop else max(chars, len(c_text) - self.max_stop + 1)
        new_toks = c_ids[toks:]
        if not whole and upto == chars and not new_toks and not done:
            return None
        self.sent[key] = (upto, len(c_ids))
        if done:
            self.ended.add(key)
        text = c_text[chars:upto]
        lp = self._new_logprobs(i, key, new_toks, c_lps[toks:]) if c.logprobs is not None else None
        reason = None if not done else ("stop" if c.finish_reason == "stop" else
                                        "length" if c.finish_reason == "length" else c.finish_reason)
        stop_reason = {"stop_reason": c.stop_reason} if done else {}  # the stop string or token id that ended it
        if self.chat:
            body = self._message(key, text, done, whole)
            if body is None and lp is None and not done and not (self.parsed.return_token_ids and new_toks):
                return None  # a held tag says nothing yet; its tokens' ids (or logprobs) would be lost unsent
            if reason in ("stop", "length") and key in self.shapers and self.shapers[key].called:
                reason = "tool_calls"  # an auto answer that called a tool (OpenAI's, vLLM's)
            return {"index": index, **(body or {"delta": {"content": ""}}), "logprobs": lp, "finish_reason": reason,
                    **stop_reason, **self._ids(c_ids if whole else new_toks)}
        first = key not in self.echoed
        self.echoed.add(key)
        if self.parsed.echo and first:  # the prompt first, once per choice
            text, lp = self._echo(i, out, text, lp)
        extra = {"prompt_logprobs": self._prompt_logprobs(i, out)} if self.parsed.prompt_logprobs is not None and (
            first) else {}
        if self.parsed.return_token_ids and first:  # vLLM's: a completion choice's prompt ids, on its first frame
            extra["prompt_token_ids"] = list(self.token_ids[i])
        return {"index": index, "text": text, "logprobs": lp, "finish_reason": reason, **stop_reason, **extra,
                **self._ids(c_ids if whole else new_toks)}

    def _ids(self, ids: list[int]) -> dict[str, Any]:
        """vLLM's return_token_ids: a choice's generated ids (a frame's: those new since the last frame)."""
        return {"token_ids": list(ids)} if self.parsed.return_token_ids else {}

    def _message(self, key: tuple[int, int], text: str, done: bool, whole: bool) -> dict[str, Any] | None:
        """A chat choice's message (whole) or delta for its new text: its think block as reasoning, with a reasoning
        parser (vt/server/reasoning.py); the rest as content, and with tools as tool calls (vt/server/tools.py).
        None: a delta that says nothing yet (a tag's start, a tool call's text, held until they are known)."""
        reasoning: str | None = None
        content: str | None = text
        if self.server.reasoning_parser is not None:
            split = self.splitters.get(key) or self.splitters.setdefault(key, ReasoningSplitter(self.opened))
            reasoning, content = split.whole(text) if whole else split.feed(text, done)
            if not self.parsed.include_reasoning:
                reasoning = None
        tools, calls = self.parsed.tools, list[dict[str, Any]]()
        if tools is not None and tools.choice != "none" and (content is not None or not whole):
            shaper = self.shapers.get(key) or self.shapers.setdefault(key, ToolCallShaper(tools))
            content, calls = shaper.whole(content or "") if whole else shaper.feed(content or "", done)
        said = {"reasoning": reasoning, "reasoning_content": reasoning}  # vLLM's name, then its older one
        if whole:
            thought = said if self.server.reasoning_parser is not None else {}
            return {"message": {"role": "assistant", "content": content, **thought,
                                **({"tool_calls": calls} if calls else {})}}
        delta = {**({"content": content} if content else {}), **(said if reasoning else {}),
                 **({"tool_calls": calls} if calls else {})}
        if not delta:
            return None if self.parsed.tools is not None or self.server.reasoning_parser is not None else \
                {"delta": {"content": ""}}
        return {"delta": delta}

    def _new_logprobs(self, i: int, key: tuple[int, int], ids: list[int], lps: list[dict[int, float]]) -> dict:
        """The logprobs of a choice's new tokens, their text_offset counted on from its tokens before (after echo's
        prompt, for the first): the non-streamed answer's, whatever text is still held back."""
        base = self.offsets[key] if key in self.offsets else self._echo_shift(i)
        lp = self._logprobs(ids, lps, base)
        if not self.chat:
            self.offsets[key] = base + sum(len(t) for t in lp["tokens"])
        return lp

    def _echo_shift(self, i: int) -> int:
        """Where the completion starts in a choice's text: after the prompt, with echo."""
        return len(self._prompt_text(i)) if self.parsed.echo and not self.chat else 0

    def _prompt_text(self, i: int) -> str:
        prompt = self.prompts[i]
        return prompt if isinstance(prompt, str) else self.tokenizer.decode(prompt, skip_special_tokens=False)

    def _prompt_logprobs(self, i: int, out: RequestOutput) -> list[dict[str, Any] | None]:
        """vLLM's prompt_logprobs: per prompt token (the first: null) its top-n and its own token, by token id, each
        {logprob, rank, decoded_token}; the own token's rank is null when it is not in the top-n (vt does not
        count the vocabulary above it)."""
        n = self.parsed.params.prompt_logprobs or 0
        rows: list[dict[str, Any] | None] = []
        for d in out.prompt_logprobs or [None]:
            if d is None:
                rows.append(None)
                continue
            ranked = sorted(d.items(), key=lambda kv: -kv[1])
            rows.append({str(t): {"logprob": shown(v), "rank": r + 1 if r < n else None,
                                  "decoded_token": self.tokenizer.decode([t], skip_special_tokens=False)}
                         for r, (t, v) in enumerate(ranked)})
        return rows

    def _echo(self, i: int, out: RequestOutput, text: str, lp: dict | None) -> tuple[str, dict | None]:
        """echo: the prompt's text before the completion's, and with logprobs its tokens' (the first has none,
        as OpenAI's and vLLM's); the completion's offsets are already past it (_new_logprobs)."""
        prompt_text = self._prompt_text(i)
        if lp is None:
            return prompt_text + text, None
        ids = self.token_ids[i]
        scored = out.prompt_logprobs or [None]
        head = self._logprobs(ids[1:], [d or {} for d in scored[1 : len(ids)]], 0)
        first = self.tokenizer.decode([ids[0]], skip_special_tokens=False)
        shown_first = self._token_shown(ids[0])
        return prompt_text + text, {
            "tokens": [shown_first, *head["tokens"], *lp["tokens"]],
            "token_logprobs": [None, *head["token_logprobs"], *lp["token_logprobs"]],
            "top_logprobs": [None, *head["top_logprobs"], *lp["top_logprobs"]],
            "text_offset": [0, *(len(first) + o for o in head["text_offset"]),
                            *lp["text_offset"]]}

    def _logprobs(self, ids: list[int], lps: list[dict[int, float]], base: int) -> dict[str, Any]:
        """OpenAI's logprobs object for these tokens; base: where their text starts in the choice's text."""
        tok, as_ids, s = self.tokenizer, self._tokens_as_ids(), self._token_shown

        def text_of(t: int) -> str:
            return tok.decode([t], skip_special_tokens=False)

        def top(lp: dict[int, float]) -> list[tuple[int, float]]:
            return sorted(lp.items(), key=lambda kv: -kv[1])[: self.parsed.logprobs]

        if self.chat:  # exactly top_logprobs alternatives, the likeliest (OpenAI's): the token itself is the item
            return {"content": [{"token": s(t), "logprob": shown(lp[t]), "bytes": list(s(t).encode()),
                                 "top_logprobs": [{"token": s(k), "logprob": shown(v), "bytes": list(s(k).encode())}
                                                  for k, v in top(lp)]} for t, lp in zip(ids, lps)]}
        strings = [s(t) for t in ids]
        texts = [text_of(t) for t in ids] if as_ids else strings  # the offsets index the choice's text
        offsets = [int(x) for x in np.cumsum([0] + [len(x) for x in texts[:-1]])] if texts else []
        # completions: the token itself, then the top n (up to logprobs + 1 entries, as OpenAI's and vLLM's)
        return {"tokens": strings, "token_logprobs": [shown(lp[t]) for t, lp in zip(ids, lps)],
                "top_logprobs": [{s(k): shown(v) for k, v in [(t, lp[t]), *top(lp)]} for t, lp in zip(ids, lps)],
                "text_offset": [base + o for o in offsets]}

    def _token_shown(self, t: int) -> str:
        """A logprob's token: its text, or with vLLM's return_tokens_as_token_ids its id, whatever its text."""
        return f"token_id:{t}" if self._tokens_as_ids() else self.tokenizer.decode([t], skip_special_tokens=False)

    def _tokens_as_ids(self) -> bool:
        """The request's return_tokens_as_token_ids where given, else the server's --return-tokens-as-token-ids."""
        given = self.parsed.tokens_as_ids
        return self.server.tokens_as_ids if given is None else given

    def _usage(self, outs: list[RequestOutput]) -> dict[str, Any]:
        prompt = sum(len(ids) for ids in self.token_ids)
        completion = 0 if self.parsed.prompt_only else sum(len(c.token_ids) for out in outs for c in out.outputs)
        usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                                 "total_tokens": prompt + completion}
        if self.server.prompt_tokens_details:  # OpenAI's field: the prompt tokens the prefix cache served
            usage["prompt_tokens_details"] = {"cached_tokens": sum(out.num_cached_tokens or 0 for out in outs)}
        return usage

    def _chunk(self, choices: list, usage: dict | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"id": self.rid, "object": "chat.completion.chunk" if self.chat else "text_completion",
                "created": self.created, "model": self.server.model_name, "choices": choices}
        if usage is not None:
            body["usage"] = usage
        return body


async def merged(gens: Sequence[AsyncIterator[RequestOutput]]) -> AsyncGenerator[tuple[int, RequestOutput], None]:
    """(index, output) of every generator as each comes, as vLLM's merge_async_iterators: a request's prompts run
    side by side in the engine, so no prompt's frames wait for another's end. A generator's error is raised here;
    closing this cancels the reads still pending, so each generator is left free to close."""
    pending = {asyncio.ensure_future(anext(g)): i for i, g in enumerate(gens)}
    try:
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                i = pending.pop(task)
                if isinstance(task.exception(), StopAsyncIteration):
                    continue
                out = task.result()
                pending[asyncio.ensure_future(anext(gens[i]))] = i
                yield i, out
    finally:
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(BaseException):
                await task


def _sse(obj: Any) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


async def _http_error(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 500)
    detail = getattr(exc, "detail", "") or "error"
    return JSONResponse(ApiError(status, f"{request.method} {request.url.path}: {detail}").body(), status_code=status)


async def _internal_error(request: Request, exc: Exception) -> Response:
    return JSONResponse(ApiError(500, f"internal error: {type(exc).__name__}: {exc}").body(), status_code=500)


def _logged_before_answered(endpoint: Any) -> Any:
    """endpoint whose unexpected errors are logged with their traceback, then answered with OpenAI's 500 body
    (a stream's, after its 200: Answer._events, as one error frame).
    Starlette's own handler for Exception answers first and re-raises for uvicorn to log after, so that log ran
    beside whatever the client did next: under CPython 3.11 a traceback's carets parse source with `ast`, whose
    depth counter is one per interpreter, and a client in the same process formatting its own traceback then read
    "SystemError: AST constructor recursion depth mismatch" (a mutant's gate, in four CI runs of five)."""
    async def answered(request: Request) -> Response:
        try:
            return await endpoint(request)
        except HTTPException:
            raise
        except Exception as e:  # noqa: BLE001 - a bug of ours: said in full here, one line to the client
            LOG.exception("internal error answering %s %s", request.method, request.url.path)
            return await _internal_error(request, e)

    return answered


def _with_key(server: Server, endpoint: Any) -> Any:
    """endpoint behind the server's API key (none: as it is)."""
    if server.api_key is None:
        return endpoint
    want = f"Bearer {server.api_key}"

    async def guarded(request: Request) -> Response:
        if request.headers.get("authorization") != want:
            return JSONResponse(ApiError(401, "Unauthorized: give the API key as 'Authorization: Bearer KEY'", None,
                                         "invalid_api_key").body(), status_code=401)
        return await endpoint(request)

    return guarded


def build_app(server: Server, cors: CorsPolicy | None = None) -> Starlette:
    """The routes, behind CORS as vLLM's (cors: the serve flags' policy; None: vLLM's defaults, any origin)."""
    v1 = [("/v1/models", server.models, "GET"), ("/v1/completions", server.completions, "POST"),
          ("/v1/chat/completions", server.chat, "POST")]
    routes = [Route(path, _logged_before_answered(_with_key(server, fn)), methods=[method]) for path, fn, method in v1]
    routes += [Route(path, _logged_before_answered(fn), methods=[method]) for path, fn, method in (
        ("/tokenize", server.tokenize, "POST"), ("/detokenize", server.detokenize, "POST"),
        ("/version", server.version, "GET"), ("/health", server.health, "GET"), ("/metrics", server.prometheus, "GET"))]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        server.loop = asyncio.get_running_loop()
        yield
        server.llm.shutdown()  # after uvicorn drained the connections: fail what is left, stop the engine

    return Starlette(routes=routes, exception_handlers={HTTPException: _http_error, Exception: _internal_error},
                     middleware=[(cors or CorsPolicy()).middleware()], lifespan=lifespan)
