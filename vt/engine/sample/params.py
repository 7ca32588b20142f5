"""SamplingParams, and their resolution against the checkpoint's generation_config.json.

resolve() fills a field left None from the checkpoint, else neutral: the API server's rule (vLLM's server applies
generation_config to what a request leaves unset). The offline LLM instead passes SamplingParams as given, the
checkpoint's defaults only when none are (LLM.get_default_sampling_params, as vLLM's). Temperature 0 is greedy and
clears top_k/top_p/min_p. max_tokens defaults to 16 (vLLM's); None, the server's "not given", resolves to the
checkpoint's `max_new_tokens`, else 16 (the offline LLM turns None into the room the context leaves). The keys
taken from generation_config.json are vLLM's (ModelConfig.get_diff_sampling_param): repetition_penalty, temperature,
top_k, top_p, min_p, max_new_tokens. It is validated like SamplingParams: a bad value is named, never
carried into a request.
"""

from __future__ import annotations

import copy
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vt.errors import ConfigError

if TYPE_CHECKING:
    from vt.engine.sample.structured import StructuredOutputsParams

NEUTRAL = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}
# A temperature below this samples greedily, as vLLM's does (its _SAMPLING_EPS): logits divided by less than ~1e-38
# overflow float32 to infinities whose masses are NaN (the NumPy draw then raised: a fatal engine error), and long
# before that the draw is the argmax to within rounding.
GREEDY_BELOW = 1e-5
MAX_BIAS = 100.0  # a logit_bias value's largest magnitude: OpenAI's range
DEFAULT_MAX_TOKENS = 16
NUMBERS = ("temperature", "top_p", "top_k", "min_p", "max_tokens", "seed", "logprobs", "min_tokens", "n",
           "prompt_logprobs", "repetition_penalty", "presence_penalty", "frequency_penalty")
GENERATION_KEYS = ("repetition_penalty", "temperature", "top_p", "top_k", "min_p", "max_new_tokens")
# A seed is an int64, torch.long's range, as vLLM's protocol takes it (OpenAI sets none). The draws hash its
# two's-complement uint64, a bijection of that range: -1 draws as 2**64-1 would, which is refused, so no two seeds
# draw alike. Its text is the one line every refusal of a seed gives (API, SamplingParams, EngineConfig, CLI).
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1
SEED_RANGE = "an int in [-2**63, 2**63) (int64, as vLLM's)"


@dataclass(slots=True)
class SamplingParams:
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # 0 (or -1) disables
    min_p: float | None = None
    # vLLM's default. None (the server's "not given"): resolve() takes the checkpoint's max_new_tokens, else
    # DEFAULT_MAX_TOKENS; the offline LLM takes what max_model_len leaves past the prompt (vLLM v1's rule)
    max_tokens: int | None = DEFAULT_MAX_TOKENS
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    ignore_eos: bool = False
    stop_token_ids: list[int] = field(default_factory=list)  # finish "stop" on these; stop_reason is the id
    include_stop_str_in_output: bool = False
    logprobs: int | None = None  # per sampled token, the log-probabilities of the top-n tokens and of it
    min_tokens: int = 0  # no EOS, stop token or stop string ends the output before this many tokens
    n: int = 1  # parallel samples of the prompt: they share its KV blocks; seeds seed, seed + 1, ...
    prompt_logprobs: int | None = None  # per prompt token, the top-n and the prompt's own token
    repetition_penalty: float | None = None  # > 1 discourages any token of the prompt or the output (HF's rule)
    presence_penalty: float = 0.0  # subtracted once from each token the output holds (OpenAI's rule)
    frequency_penalty: float = 0.0  # subtracted per occurrence in the output (OpenAI's rule)
    logit_bias: dict[int, float] | None = None  # token id -> added to its logit before penalties and filters
    allowed_token_ids: list[int] | None = None  # only these may be drawn (vLLM's field)
    detokenize: bool = True  # False: token ids only, no text (vLLM's field; stop strings need text)
    skip_special_tokens: bool = True  # False: special tokens' text stays in the output (vLLM's field)
    # vLLM's field. Both values are taken: the fast detokenizer (tokenizers' DecodeStream, as vLLM's
    # FastIncrementalDetokenizer) joins special tokens without spaces, which is what False asks; True is vLLM's
    # default, which its fast detokenizer renders the same way
    spaces_between_special_tokens: bool = True
    truncate_prompt_tokens: int | None = None  # the offline LLM keeps the prompt's last N tokens (-1: max_model_len)
    # vLLM's field: words never generated. Each is tokenized as vLLM does (as given, and with a leading space where
    # that makes other tokens of the same count); a one-token word is banned at every step, a longer one's last token
    # wherever the output so far ends with the rest of it
    bad_words: list[str] | None = None
    # vLLM's field: the output held to a JSON schema, any JSON object, a regex, a choice or a Lark grammar
    # (vt/engine/sample/structured.py; the engine compiles and checks it when the request is added)
    structured_outputs: StructuredOutputsParams | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        for name in ("stop", "stop_token_ids"):  # None is vLLM's "none" for both
            v = getattr(self, name)
            if v is None:
                setattr(self, name, [])
            elif not isinstance(v, (list, tuple)):
                raise ConfigError(f"{name}={v!r}: must be a list{' or a string' if name == 'stop' else ''}")
        self._plain_numbers()
        for name in ("ignore_eos", "include_stop_str_in_output", "skip_special_tokens",
                     "spaces_between_special_tokens"):
            if not isinstance(getattr(self, name), bool):  # "no" would read as True
                raise ConfigError(f"{name}={getattr(self, name)!r}: must be True or False")
        t, p, k, m = self.temperature, self.top_p, self.top_k, self.min_p
        for name in ("temperature", "top_p", "min_p"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise ConfigError(f"{name}={v!r}: must be a number")
        if k is not None and (isinstance(k, bool) or not isinstance(k, int)):
            raise ConfigError(f"top_k={k!r}: must be an int")
        if t is not None and not (0.0 <= t <= 100.0):
            raise ConfigError(f"temperature={t}: must be in [0, 100]")
        if p is not None and not (0.0 < p <= 1.0):
            raise ConfigError(f"top_p={p}: must be in (0, 1]")
        if k is not None and not -1 <= k < 2**31:
            raise ConfigError(f"top_k={k}: must be -1, 0 (disabled) or a positive count below 2**31")
        if m is not None and not (0.0 <= m <= 1.0):
            raise ConfigError(f"min_p={m}: must be in [0, 1]")
        if self.seed is not None and not is_seed(self.seed):
            raise ConfigError(f"seed={self.seed!r}: must be {SEED_RANGE}")
        mt = self.max_tokens
        if mt is not None and (isinstance(mt, bool) or not isinstance(mt, int) or mt < 1):
            raise ConfigError(f"max_tokens={self.max_tokens!r}: must be an int >= 1")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ConfigError(f"stop={self.stop!r}: must be non-empty strings")
        if not isinstance(self.detokenize, bool) or (self.stop and not self.detokenize):
            raise ConfigError(f"detokenize={self.detokenize!r}: must be a bool, and True where stop strings are "
                              f"asked (they are found in the text)")
        # repetition_penalty's floor: 1 / its ceiling. Under it a positive logit divided by the penalty overflows
        # float32 (1e-38 did, from the HTTP API: the engine then failed the request as a server error, 500)
        for name, lo, hi in (("repetition_penalty", 0.01, 100.0), ("presence_penalty", -2.0, 2.0),
                             ("frequency_penalty", -2.0, 2.0)):
            v = getattr(self, name)
            if v is None and name == "repetition_penalty":  # None: the checkpoint's, else 1
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo <= v <= hi) or v == lo == 0.0:
                raise ConfigError(f"{name}={v!r}: must be a number in {'(' if lo == 0 else '['}{lo}, {hi}]")
        lp = self.logprobs
        if lp is not None and (isinstance(lp, bool) or not isinstance(lp, int) or not 0 <= lp <= 20):
            raise ConfigError(f"logprobs={lp!r}: must be an int in [0, 20]")
        for name, hi in (("n", 256), ("prompt_logprobs", 20)):
            v = getattr(self, name)
            lo = 1 if name == "n" else 0
            if (v is not None or name == "n") and (isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi):
                raise ConfigError(f"{name}={v!r}: must be an int in [{lo}, {hi}]")
        mn = self.min_tokens
        if isinstance(mn, bool) or not isinstance(mn, int) or mn < 0 or (mt is not None and mn > mt):
            raise ConfigError(f"min_tokens={mn!r}: must be an int in [0, max_tokens={mt}]")
        if any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in self.stop_token_ids):
            raise ConfigError(f"stop_token_ids={self.stop_token_ids!r}: must be token ids (ints >= 0)")
        self._check_bias()
        self._check_vllm_extras()
        self._check_structured()

    def _check_vllm_extras(self) -> None:
        tp = self.truncate_prompt_tokens
        if tp is not None and (isinstance(tp, bool) or not isinstance(tp, int) or not (tp == -1 or tp >= 1)):
            raise ConfigError(f"truncate_prompt_tokens={tp!r}: must be an int >= 1, -1 (max_model_len) or None")
        bw = self.bad_words  # None or [] is vLLM's "none"
        if bw is not None and (not isinstance(bw, list) or not all(isinstance(w, str) and w.strip() for w in bw)):
            raise ConfigError(f"bad_words={bw!r}: must be a list of words (non-blank strings)")
        for i, word in enumerate(bw or ()):
            try:
                word.encode("utf-8")
            except UnicodeEncodeError:
                raise ConfigError(f"bad_words[{i}]={word!r}: is not valid UTF-8 text (a lone surrogate)") from None

    def _check_structured(self) -> None:
        from vt.engine.sample.structured import StructuredOutputsParams

        so = self.structured_outputs
        if so is not None and not isinstance(so, StructuredOutputsParams):
            raise ConfigError(f"structured_outputs={so!r}: must be a StructuredOutputsParams "
                              "(vt.engine.sample.structured, as vLLM's)")

    def clone(self) -> SamplingParams:
        """A deep copy (vLLM's clone): changing the copy's lists leaves this one's as they are."""
        return copy.deepcopy(self)

    def _plain_numbers(self) -> None:
        """NumPy numbers as Python's own, before any check: np.int64(5) is an int (numbers.Integral), np.float32 a
        float; the engine process sends them as msgpack. A bool stays a bool, which no int field takes."""
        for name in NUMBERS:
            setattr(self, name, _plain(getattr(self, name)))
        self.stop_token_ids = [_plain(t) for t in self.stop_token_ids]
        if isinstance(self.allowed_token_ids, (list, tuple)):
            self.allowed_token_ids = [_plain(t) for t in self.allowed_token_ids]
        if isinstance(self.logit_bias, dict):
            self.logit_bias = {_plain(t): _plain(b) for t, b in self.logit_bias.items()}

    def _check_bias(self) -> None:
        from vt.engine.sample.sampler import MAX_BIASED

        lb, allowed = self.logit_bias, self.allowed_token_ids
        if lb is not None and (not isinstance(lb, dict) or any(
                isinstance(t, bool) or not isinstance(t, int) or t < 0 or isinstance(v, bool)
                or not isinstance(v, (int, float)) or not -MAX_BIAS <= v <= MAX_BIAS for t, v in lb.items())):
            # OpenAI's range (vLLM's server clamps to it): a bias past float32's range turned a logit infinite, whose
            # mass is NaN, and the draw failed the engine
            raise ConfigError(f"logit_bias={lb!r}: must map token ids (ints >= 0) to numbers in [-{MAX_BIAS:g}, "
                              f"{MAX_BIAS:g}]")
        if allowed is not None and (not isinstance(allowed, list) or not allowed or any(
                isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in allowed)):
            raise ConfigError(f"allowed_token_ids={allowed!r}: must be a non-empty list of token ids (ints >= 0)")
        named = len(set(allowed)) if allowed is not None else len(lb or {})
        if named > MAX_BIASED:
            field_name = "allowed_token_ids" if allowed is not None else "logit_bias"
            raise ConfigError(f"{field_name}={named} tokens: at most {MAX_BIASED} per request")

    def resolve(self, generation_config: dict[str, Any] | None = None) -> ResolvedParams:
        gen = generation_config or {}
        picked = {}
        for name, neutral in NEUTRAL.items():
            explicit = getattr(self, name)
            picked[name] = explicit if explicit is not None else gen.get(name, neutral)
        if picked["top_k"] in (None, -1):
            picked["top_k"] = 0
        if float(picked["temperature"]) < GREEDY_BELOW:  # vLLM's rule: greedy, the filters off
            picked.update(temperature=0.0, top_p=1.0, top_k=0, min_p=0.0)
        max_tokens = self.max_tokens or gen.get("max_new_tokens") or DEFAULT_MAX_TOKENS
        if self.min_tokens > max_tokens:  # checked here too: max_tokens was not given, and its default is smaller
            raise ConfigError(f"min_tokens={self.min_tokens}: more than max_tokens={max_tokens}, the default when "
                              f"max_tokens is not given (the checkpoint's max_new_tokens, else {DEFAULT_MAX_TOKENS})")
        bias = tuple(sorted((t, float(v)) for t, v in (self.logit_bias or {}).items()))
        return ResolvedParams(float(picked["temperature"]), float(picked["top_p"]), int(picked["top_k"]),
                              float(picked["min_p"]), int(max_tokens), list(self.stop), self.seed, self.ignore_eos,
                              tuple(self.stop_token_ids), self.include_stop_str_in_output,
                              float(picked["repetition_penalty"]), float(self.presence_penalty),
                              float(self.frequency_penalty), self.logprobs, self.min_tokens, self.n,
                              self.prompt_logprobs, bias,
                              None if self.allowed_token_ids is None else tuple(sorted(set(self.allowed_token_ids))),
                              detokenize=self.detokenize, skip_special_tokens=self.skip_special_tokens)


_dataclass_init = SamplingParams.__init__


def _init_naming_unknown_fields(self: SamplingParams, *args: Any, **kw: Any) -> None:
    """The dataclass's __init__, but a keyword SamplingParams lacks (or a positional past its fields) is one
    ConfigError naming it, never a raw TypeError."""
    fields = list(SamplingParams.__dataclass_fields__)
    unknown = sorted(set(kw) - set(fields))
    if unknown:
        raise ConfigError(f"{unknown[0]}={kw[unknown[0]]!r}: not a SamplingParams field of vt")
    if len(args) > len(fields):
        raise ConfigError(f"SamplingParams takes at most {len(fields)} positional fields, got {len(args)}")
    twice = sorted(set(fields[:len(args)]) & set(kw))
    if twice:
        raise ConfigError(f"{twice[0]}: given both by position and by keyword")
    _dataclass_init(self, *args, **kw)


SamplingParams.__init__ = _init_naming_unknown_fields  # type: ignore[method-assign]


def is_seed(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and SEED_MIN <= v <= SEED_MAX


def wrap_seed(seed: int) -> int:
    """seed as an int64, wrapped as the int64 arithmetic of the sampler's packed rows would: sample k of n draws with
    wrap_seed(seed + k), so seed 2**63-1's second sample neither overflows the row array nor leaves the range."""
    return (seed - SEED_MIN) % 2**64 + SEED_MIN


def rng_seed(seed: int) -> int:
    """seed's two's-complement uint64, for NumPy's generators (they refuse a negative seed): distinct seeds stay
    distinct."""
    return seed % 2**64


def _plain(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return v
    return int(v) if isinstance(v, numbers.Integral) else float(v)


@dataclass(frozen=True, slots=True)
class ResolvedParams:
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    max_tokens: int
    stop: list[str]
    seed: int | None
    ignore_eos: bool
    stop_token_ids: tuple[int, ...] = ()
    include_stop_str_in_output: bool = False
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logprobs: int | None = None
    min_tokens: int = 0
    n: int = 1
    prompt_logprobs: int | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token, bias), ascending tokens
    allowed_token_ids: tuple[int, ...] | None = None  # ascending, distinct
    detokenize: bool = True
    skip_special_tokens: bool = True
    # bad_words as token id sequences (the engine tokenizes them: LLMEngine.check_request), vLLM's variants each
    bad_words_token_ids: tuple[tuple[int, ...], ...] = ()

    biased_tokens: tuple[tuple[int, float], ...] = ()  # what the sampler adds per token (see __post_init__)
    sequence_bans: tuple[tuple[int, ...], ...] = ()  # the bad words of more than one token
    ban_context: int = 0  # the output tokens a ban looks back at: the longest such word's, less its last
    grammar: str | None = None  # structured outputs: llguidance's grammar, compiled and checked by the engine

    def __post_init__(self) -> None:
        """biased_tokens: the logit bias, or with allowed_token_ids exactly those tokens (their bias where one was
        asked, else 0; a bias on a token not allowed changes nothing), then the one-token bad words at -inf (where
        allowed_token_ids does not rule them out already). Computed once: rows read it every step."""
        if self.allowed_token_ids is None:
            biased = dict(self.logit_bias)
        else:
            bias = dict(self.logit_bias)
            biased = {t: bias.get(t, 0.0) for t in self.allowed_token_ids}
        for word in self.bad_words_token_ids:
            if len(word) == 1 and (self.allowed_token_ids is None or word[0] in biased):
                biased[word[0]] = -math.inf
        object.__setattr__(self, "biased_tokens", tuple(sorted(biased.items())))
        object.__setattr__(self, "sequence_bans", tuple(w for w in self.bad_words_token_ids if len(w) > 1))
        object.__setattr__(self, "ban_context", max((len(w) - 1 for w in self.sequence_bans), default=0))

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def has_penalties(self) -> bool:
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0

    @property
    def reads_its_output(self) -> bool:
        """Whether the sampler row of its next token depends on the tokens it generated so far (penalties, a bad
        word of more than one token, a structured output's grammar): the host must hold them before it builds the
        row (no overlapped step)."""
        return self.has_penalties or bool(self.sequence_bans) or self.grammar is not None

    def bans_after(self, output: Sequence[int]) -> list[int]:
        """The last tokens of the multi-token bad words that the output so far leads into (vLLM's rule: the
        word's other tokens are the output's last ones). output: the output so far, or its last ban_context tokens
        (all a ban reads)."""
        out = list(output)
        return [w[-1] for w in self.sequence_bans
                if len(w) - 1 <= len(out) and out[len(out) - len(w) + 1 :] == list(w[:-1])]


def validate_generation_config(gen: dict[str, Any]) -> dict[str, Any]:
    """The sampling defaults of a generation_config.json, validated as SamplingParams are; null is unset.
    Raises ConfigError naming the field."""
    picked = {k: gen[k] for k in GENERATION_KEYS if gen.get(k) is not None}
    SamplingParams(**{k: v for k, v in picked.items() if k != "max_new_tokens"},
                   max_tokens=picked.get("max_new_tokens"))
    return {**{k: v for k, v in gen.items() if k not in GENERATION_KEYS}, **picked}
