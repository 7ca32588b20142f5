"""A stream's choices, frame by frame: with n > 1, a choice that finished is said so once and then never again while
its siblings still generate (OpenAI's and vLLM's streams); and a streamed completion's logprobs.text_offset are the
non-streamed one's, each token's character position in its choice's text, also while text is held back for a
possible stop string and with echo's prompt before the completion."""

from __future__ import annotations

import pytest

from vt.server.serve import running_server

openai = pytest.importorskip("openai")

MODEL = "tiny-qwen3"
# seeded samples that end apart: a stop string ends some early while the others run on
EARLY_ENDS = dict(max_tokens=30, temperature=1.0, n=3, seed=5, stop=["e"])


@pytest.fixture(scope="module", params=[False, True], ids=["engine-thread", "engine-process"])
def client(request):
    """The server with its engine on a thread, then with the engine core in its own process (`vt serve`'s default:
    the outputs then reach the front as deltas over a pipe)."""
    with running_server(MODEL, engine_process=request.param, max_model_len=256, num_blocks=128,
                        max_num_seqs=8) as (_, url):
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def said(chunks, chat: bool) -> list[tuple[int, str, str | None]]:
    """(index, new text, finish_reason) of every choice of every frame, in the order sent (chat: not the role)."""
    out = []
    for chunk in chunks:
        for c in chunk.choices:
            if chat and c.delta.role is not None:
                continue
            out.append((c.index, (c.delta.content or "") if chat else c.text, c.finish_reason))
    return out


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_a_finished_choice_is_said_once_and_then_nothing_while_its_siblings_run(client, chat: bool) -> None:
    if chat:
        chunks = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Once upon"}],
                                                stream=True, **EARLY_ENDS)
    else:
        chunks = client.completions.create(model=MODEL, prompt="Once upon", stream=True, **EARLY_ENDS)
    frames = said(chunks, chat)
    ends = {i: [k for k, (j, _, reason) in enumerate(frames) if j == i and reason] for i in range(EARLY_ENDS["n"])}
    assert all(len(at) == 1 for at in ends.values()), f"finish frames per index (each must be one): {ends}"
    after = {i: [f for f in frames[at[0] + 1:] if f[0] == i] for i, at in ends.items()}
    assert not any(after.values()), f"frames of a choice after its finish frame: {after}"
    first_end = min(at[0] for at in ends.values())
    assert any(text for _, text, _ in frames[first_end + 1:]), \
        f"non-vacuity: a sibling still generated after the first choice finished: {frames}"


OFFSET_CASES = {
    "plain": {},
    "stop-string-held-back": {"stop": ["zzzzzzzzzz"]},
    "echo": {"echo": True},
    "echo-and-stop": {"echo": True, "stop": ["zzzzzzzzzz"]},
}


@pytest.mark.parametrize("extra", OFFSET_CASES.values(), ids=OFFSET_CASES.keys())
def test_streamed_text_offsets_are_the_whole_answers(client, extra: dict) -> None:
    kw = dict(model=MODEL, prompt="The quick brown fox", max_tokens=12, temperature=0, logprobs=0, **extra)
    whole = client.completions.create(**kw).choices[0]
    frames = [c.choices[0] for c in client.completions.create(**kw, stream=True) if c.choices]
    offsets = [o for f in frames if f.logprobs for o in f.logprobs.text_offset]
    tokens = [t for f in frames if f.logprobs for t in f.logprobs.tokens]
    assert tokens == whole.logprobs.tokens and len(tokens) > 3, "non-vacuity: the same tokens, streamed and not"
    places = [sum(len(t) for t in tokens[:j]) for j in range(len(tokens))]  # (echo's prompt: its text is its tokens')
    assert whole.logprobs.text_offset == places, "whole: each token's offset is where the tokens before it end"
    assert offsets == whole.logprobs.text_offset, f"streamed {offsets}, whole {whole.logprobs.text_offset}"
    carrying = [f for f in frames if f.logprobs and f.logprobs.tokens]
    assert len(carrying) > 2, f"non-vacuity: tokens came in {len(carrying)} frames, offsets after the first matter"
    if "stop" in extra:  # held back: some frame's tokens ran ahead of the text it sent
        assert any(len(f.text) < sum(map(len, f.logprobs.tokens)) for f in carrying), \
            "non-vacuity: no text was held back for the stop string"
