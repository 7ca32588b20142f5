"""Structured outputs over the OpenAI API, read by the real `openai` client: OpenAI's `response_format` (json_schema,
json_object) and vLLM's `structured_outputs` body field generate what the offline API generates under the same
StructuredOutputsParams, through `vt serve`'s engine process (the params cross its wire); what vt cannot read is a 400
naming the field."""

from __future__ import annotations

import json
import re

import pytest

from vt import LLM, SamplingParams
from vt.engine.sample.structured import StructuredOutputsParams
from vt.server.serve import running_server

openai = pytest.importorskip("openai")  # a dev dependency; a GPU image without it skips this CPU-lane module

MODEL = "tiny-qwen3"
MESSAGES = [{"role": "user", "content": "Say yes or no"}]
SCHEMA = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"],
          "additionalProperties": False}


@pytest.fixture(scope="module")
def served():
    with running_server(MODEL, max_model_len=256, num_blocks=64) as (_, url):
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def offline() -> LLM:
    return LLM(MODEL, backend="cpu", max_model_len=256, num_blocks=64)


def test_response_format_and_structured_outputs_generate_what_the_offline_api_does(served, offline) -> None:
    greedy = {"temperature": 0, "max_tokens": 40}
    so = StructuredOutputsParams(json=SCHEMA)
    want = offline.chat(MESSAGES, SamplingParams(**greedy, structured_outputs=so), use_tqdm=False)[0].outputs[0]
    got = served.chat.completions.create(model=MODEL, messages=MESSAGES, **greedy,  # type: ignore[arg-type]
                                         response_format={"type": "json_schema",
                                                          "json_schema": {"name": "answer", "schema": SCHEMA}})
    # (OpenAI's json_schema takes any whitespace between tokens, vLLM's default: the tiny model writes it until
    # max_tokens, so the text is the offline API's, a JSON object begun; tests/engine/test_structured_outputs.py
    # holds whole outputs to their schema)
    assert got.choices[0].message.content == want.text and want.text.startswith("{"), want
    free = offline.chat(MESSAGES, SamplingParams(**greedy), use_tqdm=False)[0].outputs[0].text
    assert free != want.text, "non-vacuity: the schema changes the greedy output"

    regex = r"[0-9]{4}-[a-c]{3}"
    want_re = offline.generate("Hello", SamplingParams(**greedy, structured_outputs=StructuredOutputsParams(
        regex=regex)), use_tqdm=False)[0].outputs[0].text
    got_re = served.completions.create(model=MODEL, prompt="Hello", **greedy,
                                       extra_body={"structured_outputs": {"regex": regex}})
    assert got_re.choices[0].text == want_re and re.fullmatch(regex, want_re), want_re

    compact = served.chat.completions.create(model=MODEL, messages=MESSAGES, **greedy,  # type: ignore[arg-type]
                                             extra_body={"structured_outputs": {"json": SCHEMA,
                                                                                "disable_any_whitespace": True}})
    assert json.loads(compact.choices[0].message.content or "")["answer"] in ("yes", "no"), compact.choices[0]
    so_object = StructuredOutputsParams(json_object=True)
    want_object = offline.generate("Hello", SamplingParams(**greedy, structured_outputs=so_object),
                                   use_tqdm=False)[0].outputs[0].text
    got_object = served.completions.create(model=MODEL, prompt="Hello", **greedy,
                                           extra_body={"response_format": {"type": "json_object"}})
    assert got_object.choices[0].text == want_object and want_object.startswith("{"), want_object


@pytest.mark.parametrize("body, param, words", [
    ({"structured_outputs": {"regex": "[0-9"}}, "structured_outputs", "structured_outputs.regex"),
    ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs", "exactly one of"),
    ({"structured_outputs": {"pattern": "a"}}, "structured_outputs", "pattern is not a field vt knows"),
    ({"structured_outputs": "a+"}, "structured_outputs", "an object with one of"),
    ({"response_format": {"type": "structural_tag"}}, "response_format", "'structural_tag' is not one vt serves"),
    ({"response_format": "json_object"}, "response_format", "expected an object with a type, got str"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format",
     "json_schema.schema: required"),
    ({"response_format": {"type": "json_object"}, "structured_outputs": {"regex": "a"}}, "response_format",
     "give one of them"),
    # the engine's refusal of a schema sent as response_format names the field the client sent
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 5}}}},
     "response_format", "structured_outputs.json"),
    ({"structured_outputs": {"json": {"type": 5}}}, "structured_outputs", "structured_outputs.json"),
])
def test_a_structured_output_vt_cannot_read_is_a_400_naming_its_field(served, body: dict, param: str,
                                                                      words: str) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        served.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4,  # type: ignore[arg-type]
                                       extra_body=body)
    err = e.value.body
    assert isinstance(err, dict) and err.get("param") == param and words in err.get("message", ""), err
    ok = served.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)  # type: ignore[arg-type]
    assert ok.usage is not None and ok.usage.completion_tokens == 2, "non-vacuity: the server serves on"


def test_vt_serves_engine_process_takes_the_structured_output_over_its_wire(offline) -> None:
    """`vt serve` runs its engine in a process of its own: the params cross a msgpack pipe, the structured output
    with them (a nested dataclass, rebuilt on the far side)."""
    from vt.server.serve import server_process

    regex = r"[0-9]{3}-[a-c]{4}"
    want = offline.generate("Hello", SamplingParams(temperature=0, max_tokens=24, structured_outputs=(
        StructuredOutputsParams(regex=regex))), use_tqdm=False)[0].outputs[0].text
    assert re.fullmatch(regex, want), want
    with server_process(MODEL, ["--max-model-len", "256", "--num-blocks", "64", "--backend", "cpu"]) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        got = client.completions.create(model=MODEL, prompt="Hello", max_tokens=24, temperature=0,
                                        extra_body={"structured_outputs": {"regex": regex}})
    assert got.choices[0].text == want, got.choices[0]


def test_a_text_response_format_beside_structured_outputs_leaves_the_constraint(served) -> None:
    """response_format text asks for no constraint: beside vLLM's structured_outputs it is no second one."""
    try:
        got = served.completions.create(model=MODEL, prompt="Hello", max_tokens=24, temperature=0,
                                        extra_body={"response_format": {"type": "text"},
                                                    "structured_outputs": {"regex": "[0-9]{5}"}})
    except openai.BadRequestError as e:
        pytest.fail(f"refused: {e}")
    assert re.fullmatch("[0-9]{5}", got.choices[0].text), got.choices[0]


def test_a_masked_tokens_logprob_shows_as_vllms_floor(served, offline) -> None:
    """A token the grammar rules out has a logprob of about -1e30 (its logit is masked before the sampler, as vLLM
    masks before its logprobs); the server shows it at vLLM's floor, -9999.0, as vLLM's server clamps its -inf."""
    so = StructuredOutputsParams(choice=["yes"])
    raw = offline.chat(MESSAGES, SamplingParams(temperature=0, max_tokens=8, logprobs=5, structured_outputs=so),
                       use_tqdm=False)[0].outputs[0]
    assert raw.text == "yes" and min(lp.logprob for d in raw.logprobs for lp in d.values()) < -1e29, \
        "non-vacuity: the offline API holds the masked tokens' raw logprobs"
    got = served.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8,  # type: ignore[arg-type]
                                         temperature=0, logprobs=True, top_logprobs=5,
                                         extra_body={"structured_outputs": {"choice": ["yes"]}})
    content = got.choices[0].logprobs.content
    shown = [alt.logprob for item in content for alt in item.top_logprobs]
    assert got.choices[0].message.content == "yes" and min(shown) == -9999.0 and -9999.0 in shown, shown
