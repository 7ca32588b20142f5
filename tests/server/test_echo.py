"""echo on completions, as evaluation harnesses use it: lm-evaluation-harness's local-completions scores a
continuation by sending the context and continuation as token ids with echo, logprobs 1, max_tokens 1 and
temperature 0, then reads token_logprobs[ctxlen:-1] and compares each with the top of its top_logprobs
(greedy). Driven by the real `openai` client; the prompt tokens' logprobs are checked against transformers. (The
echoed text: test_echo_text.py, apart so its mutant needs no transformers.)"""

from __future__ import annotations

import numpy as np
import pytest

from models.tiny import ensure
from tests.models.test_oracle import hf_logits
from vt.server.serve import running_server

openai = pytest.importorskip("openai")

MODEL = "tiny-qwen3"
PROMPTS = [[5, 77, 300, 12, 9, 400, 33, 250, 18], [101, 7, 64, 3, 222, 45, 90, 311, 17, 8, 19]]


@pytest.fixture(scope="module")
def client():
    with running_server(MODEL, max_model_len=128, num_blocks=64, max_num_seqs=4) as (_, url):
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x - x.max(axis=-1, keepdims=True) - np.log(np.exp(x - x.max(axis=-1, keepdims=True)).sum(-1, keepdims=True))


def test_the_prompt_tokens_logprobs_equal_transformers(client) -> None:
    out = client.completions.create(model=MODEL, prompt=PROMPTS, max_tokens=1, temperature=0, logprobs=1, echo=True,
                                    seed=1234)
    choices = sorted(out.choices, key=lambda c: c.index)
    assert len(choices) == len(PROMPTS)
    for ids, c in zip(PROMPTS, choices):
        lp = c.logprobs
        assert lp is not None and len(lp.token_logprobs) == len(ids) + 1, "every prompt token, then the completion's"
        assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None, "the first token has no logprob"
        want = log_softmax(hf_logits(ensure(MODEL), ids))
        got = np.array(lp.token_logprobs[1 : len(ids)])
        assert np.allclose(got, [want[j - 1, ids[j]] for j in range(1, len(ids))], atol=2e-4), "transformers' values"
        greedy = [lp.token_logprobs[j] == max(lp.top_logprobs[j].values()) for j in range(1, len(ids))]
        assert greedy == [ids[j] == int(np.argmax(want[j - 1])) for j in range(1, len(ids))], "lm-eval's is_greedy"
        assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0, "offsets into the echoed text"


def test_echo_with_max_tokens_0_answers_the_prompt_alone_scored(client) -> None:
    out = client.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=0, temperature=0, logprobs=1,
                                    echo=True)
    c = out.choices[0]
    lp = c.logprobs
    assert lp is not None and len(lp.token_logprobs) == len(PROMPTS[0]), "the prompt's tokens, nothing generated"
    assert lp.token_logprobs[0] is None and all(v is not None for v in lp.token_logprobs[1:])
    assert out.usage.completion_tokens == 0 and c.finish_reason == "length"
    with pytest.raises(openai.BadRequestError):  # without echo, nothing to answer
        client.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=0)


def test_vllms_prompt_logprobs_field_on_completions_and_chat(client) -> None:
    out = client.completions.create(model=MODEL, prompt=PROMPTS[1], max_tokens=1, temperature=0,
                                    extra_body={"prompt_logprobs": 2})
    rows = out.choices[0].model_extra["prompt_logprobs"]
    want = log_softmax(hf_logits(ensure(MODEL), PROMPTS[1]))
    assert len(rows) == len(PROMPTS[1]) and rows[0] is None
    for j, row in enumerate(rows[1:], start=1):
        own = row[str(PROMPTS[1][j])]
        assert abs(own["logprob"] - want[j - 1, PROMPTS[1][j]]) < 2e-4, f"position {j}"
        ranked = sorted(row.values(), key=lambda v: -v["logprob"])
        assert [v["rank"] for v in ranked[:2]] == [1, 2] and isinstance(ranked[0]["decoded_token"], str)
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=1,
                                          extra_body={"prompt_logprobs": 0})
    rows = chat.model_extra["prompt_logprobs"]
    assert rows[0] is None and len(rows) > 3 and all(len(r) >= 1 for r in rows[1:]), "chat: top-level, as vLLM's"
