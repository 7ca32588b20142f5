"""The offline API a vLLM user already knows: `LLM(model, dtype=..., max_model_len=...)`,
`generate(prompts, sampling_params=...)`, `chat(messages, ...)`, `get_tokenizer()`.

Prompts: a string, a list of token ids, `{"prompt": str}`, `{"prompt_token_ids": [...]}`, or a list of
those; a dict may also carry vLLM's `cache_salt` (the prompt shares cached prefix blocks only with prompts of the
same salt) and its multimodal keys when they ask for nothing (`multi_modal_data` / `mm_processor_kwargs` None or
empty). Any other shape is a RequestError naming it; every prompt is checked before any is queued, so bad input
loses nothing.

Sampling parameters as vLLM's LLM takes them: given SamplingParams are used as they are (a field left None is
neutral, never the checkpoint's); none given is `get_default_sampling_params()`, the checkpoint's defaults.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from vt.engine.config import EngineConfig
from vt.engine.core.request import RequestOutput
from vt.engine.front.llm_engine import LLMEngine, check_cache_salt
from vt.engine.front.process_engine import ProcessEngine
from vt.engine.front.tokenizer import Tokenizer
from vt.engine.sample.params import NEUTRAL, SamplingParams
from vt.errors import ConfigError, EngineDeadError, RequestError, VtError

PROMPT_KEYS = ("prompt", "prompt_token_ids")
MULTIMODAL_KEYS = ("multi_modal_data", "mm_processor_kwargs")  # vLLM's; taken only when they ask for nothing
OPTIONAL_KEYS = (*MULTIMODAL_KEYS, "cache_salt")


def _shape(x: Any) -> str:
    if isinstance(x, dict):
        return f"a dict with keys {sorted(map(str, x))}"
    return f"a {type(x).__name__}"


def _one_prompt(p: Any) -> str | list[int]:
    """One prompt as the engine takes it (text or token ids), or a RequestError naming its shape."""
    if isinstance(p, str):
        return p
    if isinstance(p, dict):
        _check_optional_keys(p)
        keys = [k for k in PROMPT_KEYS if k in p]
        if len(keys) != 1 or set(p) - set(PROMPT_KEYS) - set(OPTIONAL_KEYS):
            raise RequestError(f"prompt is {_shape(p)}: expected exactly one of {PROMPT_KEYS}")
        return _one_prompt(p[keys[0]]) if keys[0] == "prompt" and isinstance(p["prompt"], str) else (
            _token_ids(p["prompt_token_ids"]) if keys[0] == "prompt_token_ids" else _bad(p))
    if isinstance(p, (list, tuple)):
        return _token_ids(p)
    return _bad(p)


def _check_optional_keys(p: dict) -> None:
    """vLLM's optional prompt keys: the multimodal ones taken when they ask for nothing (vt reads text alone); a
    cache salt None or a non-empty string."""
    for key in MULTIMODAL_KEYS:
        if p.get(key):  # None or empty: the text-only prompt vLLM also takes
            raise RequestError(f"prompt's {key}: multimodal input is unsupported by vt (text and token ids only)")
    try:
        check_cache_salt(p.get("cache_salt"))
    except RequestError as e:
        raise RequestError(f"prompt's {e}") from None


def _salt(p: Any) -> str | None:
    """A parsed prompt's cache salt (a dict's `cache_salt`), None for any other shape."""
    return p.get("cache_salt") if isinstance(p, dict) else None


def _token_ids(p: Any) -> list[int]:
    if not isinstance(p, (list, tuple)) or not all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        raise RequestError(f"prompt token ids must be a list of ints, got {_shape(p)}")
    return list(p)


def _bad(p: Any) -> Any:
    raise RequestError(f"prompt is {_shape(p)}: expected a string, a list of token ids, "
                       f"{{'prompt': str}} or {{'prompt_token_ids': [int, ...]}}")


def parse_prompts(prompts: Any) -> list[tuple[str | list[int], str | None]]:
    """A single prompt of any accepted shape, or a list of them: each as (text or token ids, its cache salt)."""
    is_single = isinstance(prompts, (str, dict)) or (isinstance(prompts, (list, tuple)) and bool(prompts)
                                                       and all(isinstance(t, int) for t in prompts))
    if is_single:
        return [(_one_prompt(prompts), _salt(prompts))]
    if not isinstance(prompts, (list, tuple)) or not prompts:
        empty = " (empty)" if isinstance(prompts, list) and not prompts else ""  # never `== []`: an array broadcasts
        raise RequestError(f"prompts is {_shape(prompts)}{empty}: expected a prompt or a non-empty list of prompts")
    return [(_one_prompt(p), _salt(p)) for p in prompts]


class LLM:
    """Offline generation: `LLM(model="tiny-qwen3").generate(["Hello"], SamplingParams(max_tokens=8))`."""

    def __init__(self, model: str, backend: str = "auto", engine_process: bool = False, **kw: Any) -> None:
        """engine_process: the engine core in a process of its own (vt/engine/front/process_engine.py), as vLLM's
        offline LLM runs it; `engine` is then its front (the text side), not the engine itself."""
        if not isinstance(engine_process, bool):
            raise ConfigError(f"engine_process={engine_process!r}: expected True or False")
        unknown = sorted(set(kw) - set(EngineConfig.__dataclass_fields__))
        if unknown:  # named as every bad option is, not a TypeError from the dataclass
            raise ConfigError(f"{unknown[0]}={kw[unknown[0]]!r}: not an engine option of vt (see EngineConfig)")
        cfg = EngineConfig(model=model, backend=backend, **kw)
        self.engine: Any = ProcessEngine(cfg) if engine_process else LLMEngine(cfg)
        self.dead: BaseException | None = None  # the in-process engine's fatal error (the process engine keeps its own)

    def get_tokenizer(self) -> Tokenizer:
        """A tokenizer with the methods transformers users call (vt/engine/front/tokenizer.py)."""
        e = self.engine
        return Tokenizer(e.tokenizer, e.chat_template, e.special_tokens)

    def generate(self, prompts: Any, sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                 use_tqdm: bool = True, lora_request: Any = None, priority: list[int] | None = None
                 ) -> list[RequestOutput]:
        """vLLM's LLM.generate. lora_request and priority are taken at the values that ask for nothing (None; a
        priority of 0 for every prompt, which vLLM's first-come-first-served scheduler also takes), else refused by
        name: vt serves the checkpoint's own weights, first come, first served."""
        parsed, salts = zip(*parse_prompts(prompts))
        _check_unsupported_options(lora_request, priority, len(parsed))
        plist = (list(sampling_params) if isinstance(sampling_params, Sequence)
                 else [sampling_params] * len(parsed))
        if len(plist) != len(parsed):
            raise RequestError(f"{len(parsed)} prompts but {len(plist)} SamplingParams")
        if any(sp is not None and not isinstance(sp, SamplingParams) for sp in plist):
            raise RequestError("sampling_params must be SamplingParams or a list of them")
        prepared = [self._prepare(p, sp) for p, sp in zip(parsed, plist)]  # all of them before any is queued
        outs = self._generate_prepared([p for p, _ in prepared], [sp for _, sp in prepared], use_tqdm, list(salts))
        # a truncated text prompt ran as token ids: its output keeps the text it was given
        return [replace(o, prompt=p) if isinstance(p, str) and o.prompt != p else o for o, p in zip(outs, parsed)]

    def get_default_sampling_params(self) -> SamplingParams:
        """vLLM's: the checkpoint's generation_config.json defaults (temperature, top_p, top_k, min_p,
        repetition_penalty; max_new_tokens as max_tokens), SamplingParams' own for the rest. generate and chat
        use them when no sampling_params are given; given ones are used as they are."""
        gen = self.engine.generation_config
        picked: dict[str, Any] = {k: gen[k] if gen.get(k) is not None else v for k, v in NEUTRAL.items()}
        if gen.get("max_new_tokens") is not None:
            picked["max_tokens"] = gen["max_new_tokens"]
        return SamplingParams(**picked)

    def _prepare(self, prompt: str | list[int], sp: SamplingParams | None) -> tuple[str | list[int], SamplingParams]:
        """The prompt and parameters the engine runs, as vLLM's LLM hands them on: None is the checkpoint's
        defaults; a field given SamplingParams leave None is neutral (the engine would fill it from the checkpoint,
        the API server's rule); truncate_prompt_tokens keeps the prompt's last tokens; max_tokens None is the room
        max_model_len leaves past the prompt (vLLM v1's input processor)."""
        sp = self.get_default_sampling_params() if sp is None else _unset_is_neutral(sp)
        if sp.truncate_prompt_tokens is None and sp.max_tokens is not None:
            return prompt, sp
        max_len = self.engine.cfg.max_model_len
        ids = self.engine.tokenize(prompt)
        if sp.truncate_prompt_tokens is not None:
            prompt = ids = _truncated(ids, sp.truncate_prompt_tokens, max_len)
        if sp.max_tokens is None:  # at least 1: a prompt that leaves no room is the engine's to refuse, by name
            sp = replace(sp, max_tokens=max(1, max_len - len(ids)))
        return prompt, sp

    def _generate_prepared(self, parsed: list, plist: list[SamplingParams], use_tqdm: bool,
                           salts: list[str | None] | None = None) -> list[RequestOutput]:
        """salts: each prompt's cache salt (None: none)."""
        salts = salts or [None] * len(parsed)
        if isinstance(self.engine, ProcessEngine):
            return self._generate_through_the_core(parsed, plist, salts)
        self._check_alive()
        for p, sp in zip(parsed, plist):  # validate everything before queueing anything: bad input loses nothing
            self.engine.check_request(p, sp)
        reqs = [self.engine.add_request(p, sp, cache_salt=salt) for p, sp, salt in zip(parsed, plist, salts)]
        with _progress(use_tqdm, len(reqs)) as advance:
            while self.engine.has_unfinished():
                advance(sum(r.is_finished for r in self._step()))
        tok = self.engine.tokenizer

        def decode(t: int) -> str:
            return tok.decode([t], skip_special_tokens=False)

        return [RequestOutput.of(r).with_logprob_objects(r.params.logprobs or 0, r.params.prompt_logprobs or 0, decode)
                for r in reqs]

    def _step(self) -> list:
        """One engine step. A step that raises leaves the engine's state unknown and its requests queued: from then on
        the engine is dead (vLLM's EngineDeadError), and every call says why instead of stepping them again. The
        failing call gets vt's own typed error as it is (a dead worker, a broken invariant), any other wrapped."""
        try:
            return list(self.engine.step())
        except Exception as e:
            self.dead = e
            if isinstance(e, VtError):  # already the typed cause by name (a dead worker, a broken invariant)
                raise
            raise _dead(e) from e

    def _check_alive(self) -> None:
        if self.dead is not None:
            raise _dead(self.dead) from self.dead

    def _generate_through_the_core(self, prompts: list, plist: list, salts: list[str | None]) -> list[RequestOutput]:
        """Through the engine core's process: the same outputs, built from its deltas."""
        outs = self.engine.run(prompts, plist, salts)
        tok = self.engine.tokenizer

        def decode(t: int) -> str:
            return tok.decode([t], skip_special_tokens=False)

        return [o.with_logprob_objects(sp.logprobs or 0, sp.prompt_logprobs or 0, decode) for o, sp in zip(outs, plist)]

    def reset_prefix_cache(self) -> bool:
        """vLLM's: forgets every cached prefix (after new weights, or between benchmark runs), so later requests
        compute their prompts again; False, with the cache as it was, while requests hold KV blocks."""
        self._check_alive()
        return bool(self.engine.reset_prefix_cache())

    def chat(self, messages: Any, sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
             use_tqdm: bool = True, add_generation_prompt: bool = True,
             chat_template: str | None = None, continue_final_message: bool = False,
             chat_template_kwargs: dict[str, Any] | None = None, lora_request: Any = None,
             tools: list[dict[str, Any]] | None = None, mm_processor_kwargs: dict[str, Any] | None = None,
             chat_template_content_format: str = "auto") -> list[RequestOutput]:
        """One conversation (a list of {"role", "content"} dicts) or a list of them, read as the server reads them
        (parse_messages: text parts joined, anything else a RequestError) but for a tool-calling conversation's
        name, tool_calls and tool_call_id, which reach the template as vLLM's LLM.chat hands them; rendered with
        the checkpoint's chat template as transformers renders it, with vLLM's continue_final_message (the last
        message left open; add_generation_prompt must then be False) and chat_template_kwargs (the template's
        extra variables: {"enable_thinking": False} for Qwen3), checked as the server checks them (render). tools:
        vLLM's, the tool definitions the template reads as its `tools` variable. vLLM's lora_request and
        mm_processor_kwargs are taken when they ask for nothing; chat_template_content_format "auto" or "string"
        (vt hands a message's text parts to the template joined as one string)."""
        from vt.engine.front.chat import TOOL_FIELDS, parse_messages, render

        _check_unsupported_options(lora_request, None, 0)
        if mm_processor_kwargs:
            raise RequestError("mm_processor_kwargs: multimodal input is unsupported by vt (text only); leave it None")
        if chat_template_content_format not in ("auto", "string"):
            raise RequestError(f"chat_template_content_format={chat_template_content_format!r}: vt renders a "
                               f"message's content as one string: 'auto' or 'string'")
        template_kwargs = chat_template_kwargs
        if tools is not None:
            if isinstance(chat_template_kwargs, dict) and "tools" in chat_template_kwargs:
                raise RequestError("tools: given both as tools and in chat_template_kwargs; give it once")
            template_kwargs = {**(chat_template_kwargs or {}), "tools": tools}
        convs = messages if messages and isinstance(messages, list) and isinstance(messages[0], list) else [messages]
        template = self.engine.chat_template if chat_template is None else chat_template
        texts = [render(template, parse_messages(c, TOOL_FIELDS), self.engine.special_tokens, add_generation_prompt,
                        continue_final_message, template_kwargs) for c in convs]
        # the template wrote the special tokens: encoded without the tokenizer's own (a BOS post-processor would
        # add a second BOS), as vLLM encodes a rendered chat; the outputs keep the rendered text as their prompt
        ids = [self.engine.tokenize(t, add_special_tokens=False) for t in texts]
        outs = self.generate([{"prompt_token_ids": i} for i in ids], sampling_params, use_tqdm)
        return [replace(o, prompt=t) for o, t in zip(outs, texts)]


def _check_unsupported_options(lora_request: Any, priority: Any, num_prompts: int) -> None:
    """vLLM's LLM options vt does not implement, taken only at the values that ask for nothing."""
    if lora_request is not None:
        raise RequestError(f"lora_request={lora_request!r}: LoRA adapters are unsupported by vt (it serves the "
                           f"checkpoint's own weights); leave it None")
    if priority is None:
        return
    if not isinstance(priority, (list, tuple)) or len(priority) != num_prompts or not all(
            isinstance(p, int) and not isinstance(p, bool) for p in priority):
        raise RequestError(f"priority={priority!r}: expected one int per prompt ({num_prompts})")
    if any(priority):  # vLLM's first-come-first-served scheduler refuses these too
        raise RequestError(f"priority={list(priority)[:5]}: priority scheduling is unsupported by vt (first come, "
                           f"first served); leave it None or 0 for every prompt")


def _unset_is_neutral(sp: SamplingParams) -> SamplingParams:
    """sp with the fields it leaves None neutral, as vLLM's SamplingParams defaults them: the engine fills a None
    from the checkpoint's generation_config (the API server's rule), which vLLM's LLM does only when no
    sampling_params are given."""
    unset: dict[str, Any] = {k: v for k, v in NEUTRAL.items() if getattr(sp, k) is None}
    return replace(sp, **unset) if unset else sp


def _truncated(ids: list[int], keep: int, max_model_len: int) -> list[int]:
    """The prompt's last `keep` tokens (-1: max_model_len), as vLLM's truncate_prompt_tokens (left truncation)."""
    if keep > max_model_len:
        raise RequestError(f"truncate_prompt_tokens={keep}: more than max_model_len={max_model_len}")
    keep = max_model_len if keep == -1 else keep
    return ids[-keep:]


def _dead(cause: BaseException) -> EngineDeadError:
    return EngineDeadError(f"the engine stopped on a fatal error: {type(cause).__name__}: {cause}")


class _progress:
    """A bar on stderr when it is a terminal, unless use_tqdm=False (vLLM's default draws one); nothing otherwise."""

    def __init__(self, on: bool, total: int) -> None:
        import sys

        self.on, self.total = on and sys.stderr.isatty(), total
        self.bar: Any = None

    def __enter__(self) -> Any:
        if not self.on:
            return lambda n: None
        from rich.console import Console
        from rich.progress import Progress

        bar = self.bar = Progress(console=Console(stderr=True), transient=True)
        bar.start()
        task = bar.add_task("requests", total=self.total)
        return lambda n: bar.advance(task, n)

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.stop()
