"""Structured outputs, as vLLM's: a request's output held to a JSON schema, any JSON object, a regular expression,
one of a list of strings, or a Lark grammar (`StructuredOutputsParams`; the API server maps OpenAI's
`response_format` onto it). llguidance (vLLM's `guidance` backend) compiles the grammar against the checkpoint's
tokenizer and, each step, gives the request's row a bitmask of the tokens that may come next. The sampler sees every
other token at -1e30 before anything else reads the row (vLLM's order: logprobs are of the masked logits; vLLM's
-inf would fail the sampler's guard against a model's non-finite logits), so the draw, greedy or not, only ever takes
a token the grammar allows; once the grammar is complete only EOS is allowed.

A row's mask depends on the token sampled just before, so such a request steps without overlap, as penalties do
(ResolvedParams.reads_its_output). The engine checks a grammar when the request is added (a bad one is a
RequestError naming structured_outputs); the runner keeps one matcher per request, fed the output tokens the host
holds before each mask is computed.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from vt.errors import ConfigError, RequestError

KINDS = ("json", "regex", "choice", "grammar", "json_object")
CHECKED_KEPT = 256  # compiled specs a GrammarTokenizer keeps
PARSER_LIMITS: Any = None  # llguidance's limits for the matchers (None: its defaults; a test lowers them)
FIELDS = (*KINDS, "disable_any_whitespace")


@dataclass(frozen=True)
class StructuredOutputsParams:
    """vLLM's StructuredOutputsParams: exactly one of json (a JSON schema, as a dict or its text), regex, choice (a
    list of strings), grammar (Lark) or json_object (True: any JSON object)."""

    json: str | dict | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool = False  # JSON: no whitespace between tokens (vLLM's option; by default any)

    def __post_init__(self) -> None:
        given = [k for k in KINDS if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise ConfigError(f"structured_outputs: give exactly one of {', '.join(KINDS)} (got "
                              f"{', '.join(given) or 'none'})")
        if self.json is not None and not isinstance(self.json, (str, dict)):
            raise ConfigError(f"structured_outputs.json: a JSON schema (a dict or its text), got "
                              f"{type(self.json).__name__}")
        for name in ("regex", "grammar"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ConfigError(f"structured_outputs.{name}: a non-empty string, got {value!r}")
        if self.choice is not None and (not isinstance(self.choice, (list, tuple)) or not self.choice
                                        or not all(isinstance(c, str) and c for c in self.choice)):
            raise ConfigError(f"structured_outputs.choice: a non-empty list of non-empty strings, got {self.choice!r}")
        for name in ("json_object", "disable_any_whitespace"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise ConfigError(f"structured_outputs.{name}: True or False, got {value!r}")

    @property
    def kind(self) -> str:
        return next(k for k in KINDS if getattr(self, k) not in (None, False))

    def grammar_text(self) -> str:
        """llguidance's grammar for this constraint (not yet checked against a tokenizer)."""
        from llguidance import LLMatcher

        options = {"whitespace_flexible": not self.disable_any_whitespace}  # vLLM's guidance backend's rule
        if self.json is not None:
            schema = self.json if isinstance(self.json, str) else json.dumps(self.json)
            try:
                return LLMatcher.grammar_from_json_schema(schema, defaults=options)  # type: ignore[arg-type]
            except ValueError as e:
                raise RequestError(f"structured_outputs.json: not a JSON schema: {e}") from None
        if self.json_object:
            return LLMatcher.grammar_from_json_schema('{"type": "object"}', defaults=options)  # type: ignore[arg-type]
        if self.regex is not None:
            return LLMatcher.grammar_from_regex(self.regex)
        if self.choice is not None:  # Lark's string literals read as JSON's
            return LLMatcher.grammar_from_lark("start: " + " | ".join(json.dumps(c) for c in self.choice))
        assert self.grammar is not None
        return LLMatcher.grammar_from_lark(self.grammar)


def mask_words(vocab: int) -> int:
    """int32 words a row's token mask takes: one bit a token."""
    return -(-vocab // 32)


class GrammarTokenizer:
    """llguidance's view of a checkpoint's tokenizer (built once: ~1 s at a 152k vocabulary), over the model's
    vocabulary (its logits' width) with the checkpoint's EOS ids ending a complete output."""

    def __init__(self, tokenizer_json: str, vocab: int, eos_ids: tuple[int, ...]) -> None:
        from llguidance import LLTokenizer

        self.tokenizer = LLTokenizer(tokenizer_json, n_vocab=vocab, eos_token=list(eos_ids) or None)
        self._checked: dict[str, tuple[str, str]] = {}  # a spec's JSON -> (its grammar, llguidance's error or "")

    def check(self, params: StructuredOutputsParams) -> str:
        """The compiled grammar text, or a RequestError naming structured_outputs with llguidance's reason. A
        spec checked before is not compiled again (LLM.generate checks a batch before it adds it)."""
        key = json.dumps(dataclasses.asdict(params), sort_keys=True)
        if key not in self._checked:
            grammar = params.grammar_text()
            error = _validate(grammar, self.tokenizer)
            if len(self._checked) >= CHECKED_KEPT:
                self._checked.pop(next(iter(self._checked)))
            self._checked[key] = (grammar, error)
        grammar, error = self._checked[key]
        if error:
            raise RequestError(f"structured_outputs.{params.kind}: {error.splitlines()[0][:400]}")
        return grammar

    def matcher(self, grammar: str) -> Matcher:
        return Matcher(self, grammar)


@functools.lru_cache(maxsize=4)
def grammar_tokenizer(tokenizer_json: str, vocab: int, eos_ids: tuple[int, ...]) -> GrammarTokenizer:
    """One GrammarTokenizer per tokenizer, vocabulary and EOS ids in a process (the engine's front and its runner)."""
    return GrammarTokenizer(tokenizer_json, vocab, eos_ids)


class Matcher:
    """One request's place in its grammar: the output tokens it has consumed, and the next token's mask. Nothing
    here raises on the grammar's account: a matcher that fails (llguidance's limits reached mid-output, e.g. too
    many lexer states) fails its request alone, at its next token (accept), never the engine."""

    def __init__(self, owner: GrammarTokenizer, grammar: str) -> None:
        from llguidance import LLMatcher

        self.matcher = LLMatcher(owner.tokenizer, grammar, log_level=0, limits=PARSER_LIMITS)
        self.consumed = 0
        self.broken = ""  # why the matcher cannot go on (its error, or output it lost count of)

    def accept(self, token: int) -> str | None:
        """Consumes the token just sampled; None, or why the request fails: the grammar failed before it, or
        cannot take it (a mask that allowed nothing a ban did not hold off, e.g. EOS under min_tokens once the
        grammar is done)."""
        if self.broken:
            return f"structured output: the grammar failed: {self.broken[:300]}"
        if self.matcher.consume_token(token):
            self.consumed += 1
            return None
        return (f"structured output: token {token} is outside the grammar ({self.matcher.get_error()[:200]}); was "
                "every token it allowed held off (min_tokens, a ban)?")

    def catch_up(self, output: np.ndarray) -> None:
        """Consumes the output tokens past those it has: a resumed request's (its matcher starts again), or none
        (accept took each as it was sampled)."""
        if self.consumed > len(output):
            self.broken = f"its matcher consumed {self.consumed} tokens of an output of {len(output)}"
            return
        new = [int(t) for t in output[self.consumed :]]
        if new and not self.matcher.consume_tokens(new):
            self.broken = self.matcher.get_error() or "the output so far is outside the grammar"
        self.consumed = len(output)

    def fill(self, out: np.ndarray) -> None:
        """out [words] int32: the tokens that may come next (only EOS once the grammar is complete). A failed
        matcher leaves out as it is (all ones): the token drawn then fails the request (accept)."""
        from llguidance.numpy import fill_next_token_bitmask

        if self.broken or self.matcher.is_error():
            return
        fill_next_token_bitmask(self.matcher, out.reshape(1, -1), 0)
        if self.matcher.is_error():  # llguidance's limits, met computing this mask
            self.broken = self.matcher.get_error()
            out[:] = -1


def _validate(grammar: str, tokenizer: Any) -> str:
    from llguidance import LLMatcher

    return LLMatcher.validate_grammar(grammar, tokenizer)


def from_request_field(value: Any, field: str) -> StructuredOutputsParams:
    """A dict of StructuredOutputsParams' fields (vLLM's request body field) as the params, or a ConfigError."""
    if isinstance(value, StructuredOutputsParams):
        return value
    if not isinstance(value, dict):
        raise ConfigError(f"{field}: an object with one of {', '.join(KINDS)}, got {type(value).__name__}")
    unknown = sorted(set(value) - set(FIELDS))
    if unknown:
        raise ConfigError(f"{field}: {', '.join(unknown)} is not a field vt knows (one of {', '.join(FIELDS)})")
    return StructuredOutputsParams(**value)
