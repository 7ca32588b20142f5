"""Structured outputs (vLLM's StructuredOutputsParams): every output a constrained request generates is in its
grammar's language, a JSON schema's, a regex's, a choice's or a Lark grammar's, sampled or greedy, beside
unconstrained requests in the same steps, through the decode graph's masked slots; what cannot run is refused by
name with nothing queued. The tiny model left alone writes none of it (each test's non-vacuity guard)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from backends.kernels.tokens import MASKED_LOGIT, mask_tokens, token_bits
from seams.lanes import is_bypass_lane
from tests.helpers import guarding
from vt import LLM, SamplingParams
from vt.engine.sample.structured import StructuredOutputsParams
from vt.errors import ConfigError, EngineDeadError, EngineInvariantError, RequestError

PROMPTS = ["Hello world", "The cat", "1 2 3", "Once upon a time"]
SCHEMA = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]},
                                           "count": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["answer", "count"], "additionalProperties": False}


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM("tiny-qwen3", backend="cpu", max_model_len=256, num_blocks=96)


def texts(llm: LLM, so: StructuredOutputsParams | None, temperature: float = 1.0, max_tokens: int = 48,
          n: int = 1) -> list[str]:
    sp = SamplingParams(temperature=temperature, seed=7, max_tokens=max_tokens, n=n, structured_outputs=so)
    with guarding("structured outputs run without a fault", EngineInvariantError, EngineDeadError):
        outs = llm.generate(PROMPTS, sp, use_tqdm=False)
    assert all(o.error is None for o in outs), [o.error for o in outs]
    return [c.text for o in outs for c in o.outputs]


def schema_holds(value: object) -> bool:
    return (isinstance(value, dict) and set(value) == {"answer", "count"} and value["answer"] in ("yes", "no")
            and isinstance(value["count"], int) and 0 <= value["count"] <= 99)


def parsed(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_json_schema_holds_every_output_to_it(llm: LLM, temperature: float) -> None:
    so = StructuredOutputsParams(json=SCHEMA, disable_any_whitespace=True)
    got = texts(llm, so, temperature, n=2)
    assert all(schema_holds(parsed(t)) for t in got), got
    free = texts(llm, None, temperature)
    assert not any(schema_holds(parsed(t)) for t in free), "non-vacuity: the model alone writes no such object"


def test_the_schema_may_come_as_its_text_and_json_object_opens_an_object(llm: LLM) -> None:
    as_text = texts(llm, StructuredOutputsParams(json=json.dumps(SCHEMA), disable_any_whitespace=True))
    assert all(schema_holds(parsed(t)) for t in as_text), as_text
    small = {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"],
             "additionalProperties": False}
    objects = texts(llm, StructuredOutputsParams(json=small, disable_any_whitespace=True), max_tokens=24)
    assert all(parsed(t) in ({"a": True}, {"a": False}) for t in objects), objects
    # any object: whole, or (the tiny model writes a key until max_tokens) a key's string begun
    opened = texts(llm, StructuredOutputsParams(json_object=True, disable_any_whitespace=True), max_tokens=24)
    assert all(isinstance(parsed(t), dict) or (t.startswith('{"') and "\n" not in t) for t in opened), opened
    assert not any(t.startswith("{") for t in texts(llm, None, max_tokens=24)), "non-vacuity"


def test_a_regex_holds_every_output_to_it(llm: LLM) -> None:
    got = texts(llm, StructuredOutputsParams(regex=r"[0-9]{3}-[a-c]{2}"), n=2)
    assert all(re.fullmatch(r"[0-9]{3}-[a-c]{2}", t) for t in got), got
    assert not any(re.fullmatch(r"[0-9]{3}-[a-c]{2}", t) for t in texts(llm, None)), "non-vacuity"


def test_a_choice_and_a_lark_grammar_hold_every_output_to_them(llm: LLM) -> None:
    choices = ["alpha", "beta", "gamma delta"]
    got = texts(llm, StructuredOutputsParams(choice=choices), n=4)
    assert set(got) <= set(choices) and len(got) == 4 * len(PROMPTS), got
    lark = 'start: "(" item ("," item)? ("," item)? ")"\nitem: "x" | "yy"'
    trees = texts(llm, StructuredOutputsParams(grammar=lark), max_tokens=32)
    assert all(re.fullmatch(r"\((x|yy)(,(x|yy)){0,2}\)", t) for t in trees), trees
    assert not set(texts(llm, None)) & set(choices), "non-vacuity: the model alone writes none of the choices"


def test_constrained_and_free_requests_share_steps_each_as_if_alone(llm: LLM) -> None:
    """One generate call: constrained rows beside free ones. Each free row's tokens are its tokens alone (no other
    row's mask reaches it), each constrained row's output is in its language."""
    so = StructuredOutputsParams(regex=r"[a-c]{6}")
    free = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    held = SamplingParams(temperature=0, max_tokens=12, structured_outputs=so)
    alone = [o.outputs[0].token_ids for o in llm.generate(PROMPTS, free, use_tqdm=False)]
    mixed = llm.generate(PROMPTS, [free, held, free, held], use_tqdm=False)
    assert [mixed[0].outputs[0].token_ids, mixed[2].outputs[0].token_ids] == [alone[0], alone[2]]
    assert all(re.fullmatch(r"[a-c]{6}", mixed[i].outputs[0].text) for i in (1, 3)), [o.outputs[0].text for o in mixed]


def test_masked_decode_steps_replay_a_graph_of_their_own(llm: LLM) -> None:
    driver = llm.engine.runner.decoder
    texts(llm, StructuredOutputsParams(regex=r"[0-9]{12}"), max_tokens=16)
    masked = [s for k, s in driver.slots.items() if k[5]]
    # graphs are off in the pool-bypass lane: there a masked slot runs eagerly every step
    assert masked and (sum(s.num_replays for s in masked) > 0 or is_bypass_lane()), "masked steps replayed graphs"
    plain = [s for k, s in driver.slots.items() if not k[5]]
    assert plain and all(s.token_mask is None for s in plain), "the other slots' graphs launch no mask"


def test_a_constrained_request_steps_without_overlap() -> None:
    """Its mask needs the token sampled just before: the engine never launches its step ahead of the host (async
    scheduling asked for: the CPU backend's default is off)."""
    llm = LLM("tiny-qwen3", backend="cpu", max_model_len=256, num_blocks=96, async_scheduling=True)
    engine = llm.engine
    got = texts(llm, StructuredOutputsParams(regex=r"[0-9]{20}"), max_tokens=24)
    assert engine.num_overlapped == 0 and all(re.fullmatch(r"[0-9]{20}", t) for t in got), got
    texts(llm, None, max_tokens=24)
    assert engine.num_overlapped > 0, "non-vacuity: free requests overlap their steps"


@pytest.mark.parametrize("so, words", [
    (StructuredOutputsParams(regex="[0-9"), "structured_outputs.regex"),
    (StructuredOutputsParams(grammar="start: missing_rule"), "structured_outputs.grammar"),
    (StructuredOutputsParams(json={"type": 5}), "structured_outputs.json"),
    (StructuredOutputsParams(json="{not json"), "structured_outputs.json"),
])
def test_a_grammar_llguidance_refuses_is_a_request_error_naming_it(llm: LLM, so: StructuredOutputsParams,
                                                                   words: str) -> None:
    queued = len(llm.engine.requests)
    with pytest.raises(RequestError, match=re.escape(words)):
        llm.generate(PROMPTS, SamplingParams(structured_outputs=so), use_tqdm=False)
    assert len(llm.engine.requests) == queued, "nothing queued"


@pytest.mark.parametrize("kw, words", [
    ({}, "exactly one of"),
    ({"regex": "a", "choice": ["b"]}, "exactly one of"),
    ({"choice": []}, "choice"),
    ({"choice": ["a", 3]}, "choice"),
    ({"regex": ""}, "regex"),
    ({"json": 5}, "json"),
    ({"json_object": "yes"}, "json_object"),
])
def test_params_that_name_no_single_constraint_are_refused(kw: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        StructuredOutputsParams(**kw)
    with pytest.raises(ConfigError, match="StructuredOutputsParams"):
        SamplingParams(structured_outputs={"regex": "a"})  # type: ignore[arg-type]


def test_speculative_decoding_refuses_a_structured_output_by_name() -> None:
    llm = LLM("tiny-qwen3", backend="cpu", max_model_len=256, num_blocks=64, speculative_model="[ngram]",
              num_speculative_tokens=2)
    with pytest.raises(RequestError, match="structured_outputs.regex: not supported with speculative decoding"):
        llm.generate(PROMPTS, SamplingParams(structured_outputs=StructuredOutputsParams(regex="a+")), use_tqdm=False)
    assert llm.generate(PROMPTS[:1], SamplingParams(max_tokens=2), use_tqdm=False)[0].outputs[0].token_ids, \
        "non-vacuity: the engine serves a free request"


def test_the_mask_twin_sets_exactly_the_cleared_tokens() -> None:
    rng = np.random.default_rng(0)
    V = 77  # not a multiple of 32: the last word's high bits name no token
    logits = rng.standard_normal((3, V)).astype(np.float32)
    mask = rng.integers(-(2**31), 2**31, (3, 3), dtype=np.int64).astype(np.int32)
    mask[1] = -1  # a row without a grammar
    out = logits.copy()
    mask_tokens(np, out, mask)
    bits = token_bits(mask, V)
    assert np.array_equal(out[bits], logits[bits]) and (out[~bits] == MASKED_LOGIT).all()
    assert (~bits).sum() > 20 and bits[1].all(), "non-vacuity: tokens cleared, and a row left whole"


@pytest.mark.gpu
def test_cuda_mask_tokens_equals_its_twin() -> None:
    import cupy

    from vt.registry import make_backend

    b = make_backend("cuda")
    rng = np.random.default_rng(1)
    for V in (151_936, 77, 32):
        words = -(-V // 32)
        logits = rng.standard_normal((5, V)).astype(np.float32)
        mask = rng.integers(-(2**31), 2**31, (5, words), dtype=np.int64).astype(np.int32)
        mask[2] = -1
        want = logits.copy()
        mask_tokens(np, want, mask)
        dev, dmask = cupy.asarray(logits), cupy.asarray(mask)
        b.mask_tokens(dev, dmask)
        assert np.array_equal(cupy.asnumpy(dev), want), f"V={V}: the kernel's mask is the twin's"


def test_tensor_parallelism_refuses_a_structured_output_by_name() -> None:
    """Every rank samples the same ids from the same logits, and only rank 0's runner would hold the grammars: refused
    when the request is added (the engine's own check, on an engine of two ranks' configuration)."""
    from types import SimpleNamespace

    from vt.engine.front.llm_engine import LLMEngine

    def engine(ranks: int) -> SimpleNamespace:
        return SimpleNamespace(scheduler=SimpleNamespace(num_spec_tokens=0),
                               cfg=SimpleNamespace(tensor_parallel_size=ranks), grammars=lambda: checked)

    checked = SimpleNamespace(check=lambda so: "the grammar")
    so = StructuredOutputsParams(regex="a+")
    resolved = SamplingParams().resolve()
    with pytest.raises(RequestError, match="structured_outputs.regex: not supported with tensor_parallel_size > 1"):
        LLMEngine._with_grammar(engine(2), resolved, so)  # type: ignore[arg-type]
    assert LLMEngine._with_grammar(engine(1), resolved, so).grammar == "the grammar", "non-vacuity: one rank takes it"


def test_a_grammar_whose_every_token_a_ban_holds_off_fails_its_request_alone(llm: LLM) -> None:
    """min_tokens past a complete grammar: the grammar then allows only EOS, which min_tokens holds off, so the draw
    takes a token outside it. That request fails with a line saying so; its neighbour in the same steps is served."""
    so = StructuredOutputsParams(choice=["ab"])
    stuck = SamplingParams(temperature=0, max_tokens=12, min_tokens=8, structured_outputs=so)
    free = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    with guarding("the engine serves on", EngineInvariantError, EngineDeadError):
        outs = llm.generate(PROMPTS[:2], [stuck, free], use_tqdm=False)
    assert outs[0].outputs[0].finish_reason == "error" and "outside the grammar" in (outs[0].error or ""), outs[0]
    assert outs[0].outputs[0].text == "ab", "the grammar's tokens came first"
    assert outs[1].error is None and len(outs[1].outputs[0].token_ids) == 12, "non-vacuity: the neighbour is served"


@pytest.mark.gpu
def test_cuda_structured_outputs_hold_every_output_to_their_language() -> None:
    """The CUDA path end to end: the mask kernel in the prefill's sampler and in a masked decode graph."""
    llm = LLM("tiny-qwen3", backend="cuda", max_model_len=256, num_blocks=96)
    got = texts(llm, StructuredOutputsParams(regex=r"[0-9]{3}-[a-c]{2}"), n=2)
    assert all(re.fullmatch(r"[0-9]{3}-[a-c]{2}", t) for t in got), got
    objects = texts(llm, StructuredOutputsParams(json=SCHEMA, disable_any_whitespace=True), temperature=0.0)
    assert all(schema_holds(parsed(t)) for t in objects), objects
    masked = [s for k, s in llm.engine.runner.decoder.slots.items() if k[5]]
    assert masked and sum(s.num_replays for s in masked) > 0, "masked steps replayed their graphs"


def test_a_grammar_that_fails_mid_output_fails_its_request_alone(llm: LLM, monkeypatch: pytest.MonkeyPatch) -> None:
    """llguidance's limits can be met after a grammar checked fine (too many lexer states, deep in an output): the
    matcher then fails, and with it that request alone, never the engine (lowered limits make it happen early)."""
    import llguidance

    from vt.engine.sample import structured

    monkeypatch.setattr(structured, "PARSER_LIMITS", llguidance.LLParserLimits(max_lexer_states=50))
    deep = SamplingParams(temperature=1.0, seed=3, max_tokens=64, structured_outputs=StructuredOutputsParams(
        regex="(a|b){24}(a|b)*a(a|b){16}"))
    free = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    with guarding("the engine serves on", EngineInvariantError, EngineDeadError):
        outs = llm.generate(PROMPTS[:2], [deep, free], use_tqdm=False)
    assert outs[0].outputs[0].finish_reason == "error" and "structured output" in (outs[0].error or ""), outs[0]
    assert set(outs[0].outputs[0].text) <= {"a", "b"} and outs[0].outputs[0].text, "its grammar held until then"
    assert outs[1].error is None and len(outs[1].outputs[0].token_ids) == 12, "non-vacuity: the neighbour is served"


def test_a_preempted_request_resumes_where_its_grammar_was() -> None:
    """Preemption drops a request's runner state; resumed, its new matcher consumes the output so far before the
    next mask, so the output stays one string of the language (a matcher starting again would ask for the letters
    of the start in the middle of the digits)."""
    llm = LLM("tiny-qwen3", backend="cpu", max_model_len=128, num_blocks=9)
    regex = r"[a-c]{3}[0-9]{36}"
    sp = SamplingParams(temperature=1.0, seed=5, max_tokens=48, structured_outputs=StructuredOutputsParams(
        regex=regex))
    with guarding("structured outputs run without a fault", EngineInvariantError, EngineDeadError):
        outs = llm.generate(PROMPTS, sp, use_tqdm=False)
    assert sum(o.metrics.num_preemptions for o in outs) > 0, "non-vacuity: requests were preempted"
    assert all(o.error is None and re.fullmatch(regex, o.outputs[0].text) for o in outs), \
        [(o.outputs[0].text, o.error) for o in outs]
