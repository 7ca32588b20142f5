"""vLLM's `bad_words`: a word is never generated. A word of one token is banned at every step; a longer word's last
token is banned wherever the output so far ends with the rest of it (vLLM's rule: its other tokens need not be
banned, so they still appear elsewhere). Each word is tokenized as vLLM does, and the bans ride the sampler's logit
bias at -inf, so the CPU twin and the CUDA kernel apply them alike. A multi-token word makes the engine step
without overlap (its row depends on the last token), and its tokens are the synchronous engine's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.helpers import guarding
from vt import LLM, SamplingParams
from vt.engine.front.llm_engine import bad_words_token_ids
from vt.errors import ConfigError, EngineDeadError, EngineInvariantError, RequestError

PROMPTS = ["Hello world", "The cat", "1 2 3", "Once upon a time"]


def make_llm(backend: str = "cpu", **kw) -> LLM:
    return LLM("tiny-qwen3", backend=backend, max_model_len=256, num_blocks=64, **kw)


def greedy(llm: LLM, bad_words: list[str] | None = None, max_tokens: int = 40) -> list[list[int]]:
    sp = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True, bad_words=bad_words)
    with guarding("bad_words run without a fault", EngineInvariantError, EngineDeadError):
        return [o.outputs[0].token_ids for o in llm.generate(PROMPTS, sp, use_tqdm=False)]


def word_of(llm: LLM, ids: list[int]) -> str | None:
    """The text of these tokens, when it tokenizes back to exactly them (so the word names those tokens)."""
    text = llm.engine.tokenizer.decode(ids)
    return text if text.strip() and bad_words_token_ids(llm.engine.tokenizer, [text])[0] == ids else None


def pairs(out: list[int]) -> list[tuple[int, int]]:
    return list(zip(out, out[1:]))


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_one_token_word_is_never_generated(backend: str) -> None:
    llm = make_llm(backend)
    base = greedy(llm)
    token, word = next((t, w) for out in base for t in out if (w := word_of(llm, [t])) is not None)
    banned = greedy(llm, [word])
    assert all(token not in out for out in banned), f"{word!r} (token {token}) was generated: {banned}"
    for b, out in zip(base, banned):  # non-vacuity: the outputs agree up to where the word first was
        cut = b.index(token) if token in b else len(b)
        assert out[:cut] == b[:cut], "a ban changes nothing before the banned token's place"
    # sampled rows, the token pushed up by a logit bias so that it is drawn often unbanned: the ban beats the bias
    pushed = dict(temperature=1.0, seed=1, max_tokens=24, ignore_eos=True, logit_bias={token: 12.0})
    free = [o.outputs[0].token_ids for o in llm.generate(PROMPTS, SamplingParams(**pushed), use_tqdm=False)]
    assert sum(out.count(token) for out in free) >= 10, f"non-vacuity: unbanned, the biased {token} is drawn often"
    drawn = [o.outputs[0].token_ids for o in llm.generate(PROMPTS, SamplingParams(**pushed, bad_words=[word]),
                                                          use_tqdm=False)]
    assert all(token not in out for out in drawn), f"a sampled row drew the banned {token}: {drawn}"


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_longer_words_last_token_is_banned_only_after_the_rest_of_it(backend: str) -> None:
    """A pair (a, b) of a greedy output whose b also comes earlier in it, after another token than a: banned, the
    output keeps that earlier b (b alone is not banned), then takes another token than b after a."""
    llm = make_llm(backend)
    base = greedy(llm)
    at, cut, word = next((k, i + 1, w) for k, out in enumerate(base) for i, (a, b) in enumerate(pairs(out))
                         if a != b and b in out[1:i] and (w := word_of(llm, [a, b])) is not None)
    a, b = base[at][cut - 1], base[at][cut]
    assert any(out[j] == b and out[j - 1] != a for out in [base[at]] for j in range(1, cut - 1)), (
        "non-vacuity: b comes earlier, after another token than a")
    banned = greedy(llm, [word])
    assert all((a, b) not in pairs(out) for out in banned), f"{word!r} ({a}, {b}) was generated: {banned}"
    assert banned[at][:cut] == base[at][:cut], "the output runs as before up to the word's first token, its " \
        "earlier b included: b alone is not banned"
    assert banned[at][cut] != b, "after a, another token than b"


def test_the_multi_token_ban_steps_without_overlap_and_matches_the_synchronous_engine() -> None:
    eager = make_llm(async_scheduling=True)
    base = greedy(eager)
    word = next(w for out in base for a, b in pairs(out) if (w := word_of(eager, [a, b])) is not None)
    before = eager.engine.num_overlapped
    got = greedy(eager, [word])
    assert eager.engine.num_overlapped == before, "no step overlapped while a multi-token ban ran"
    greedy(eager)
    assert eager.engine.num_overlapped > before, "non-vacuity: without the ban the engine overlaps steps"
    assert got == greedy(make_llm(async_scheduling=False), [word]), "the same tokens as the synchronous engine's"


def test_words_tokenize_as_vllms_do_with_and_without_a_leading_space() -> None:
    vocab = {"word": [5, 6], " word": [7, 6], "cat": [9], " cat": [9], "dog": [3], " dog": [4, 3]}
    tok = SimpleNamespace(encode_batch=lambda texts, add_special_tokens: [SimpleNamespace(ids=vocab[texts[0]])])
    assert bad_words_token_ids(tok, ["word"]) == [[5, 6], [7, 6]], "a spaced variant of the same length is added"
    assert bad_words_token_ids(tok, ["  word"]) == [[5, 6], [7, 6]], "leading spaces are stripped first"
    assert bad_words_token_ids(tok, ["cat"]) == [[9]], "a spaced variant with the same first token is not"
    assert bad_words_token_ids(tok, ["dog"]) == [[3]], "nor one of another length"


@pytest.mark.parametrize("bad", [["", "x"], ["  "], "word", [3]])
def test_a_bad_words_value_that_is_not_a_list_of_words_is_refused_by_name(bad: object) -> None:
    with pytest.raises(ConfigError, match="bad_words=.*must be a list of words"):
        SamplingParams(bad_words=bad)  # type: ignore[arg-type]
    assert SamplingParams(bad_words=["x"]).bad_words == ["x"], "non-vacuity: a list of words is taken"


def test_a_multi_token_word_is_refused_under_speculative_decoding() -> None:
    llm = make_llm(speculative_model="[ngram]", num_speculative_tokens=2)
    with guarding("a multi-token word is refused up front under speculation", EngineInvariantError,
                  EngineDeadError), pytest.raises(RequestError, match="more than one token are not supported with "
                                                                     "speculative decoding"):
        llm.generate("Hello", SamplingParams(max_tokens=4, bad_words=["x capital"]), use_tqdm=False)
    out = llm.generate("Hello", SamplingParams(max_tokens=4, bad_words=["x"]), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 4, "non-vacuity: a one-token word runs with speculation"


def test_the_engine_process_bans_what_the_engine_in_this_process_bans() -> None:
    """Through vLLM's default offline shape (the engine core in its own process), the words cross the wire as text
    and the core tokenizes them: the same tokens as in process."""
    local = make_llm()
    word = next(w for out in greedy(local) for a, b in pairs(out) if (w := word_of(local, [a, b])) is not None)
    want = greedy(local, [word])
    assert want != greedy(local), "non-vacuity: the ban changes the greedy outputs"
    remote = make_llm(engine_process=True)
    try:
        assert greedy(remote, [word]) == want
    finally:
        remote.engine.close()


def test_bad_words_that_ban_every_allowed_token_are_refused_by_name() -> None:
    llm = make_llm()
    with pytest.raises(RequestError, match=r"bad_words \['x'\] bans every one of allowed_token_ids"):
        llm.generate("Hello", SamplingParams(max_tokens=4, allowed_token_ids=[90], bad_words=["x"]), use_tqdm=False)
    assert not llm.engine.has_unfinished(), "nothing was queued"
    out = llm.generate("Hello", SamplingParams(max_tokens=4, allowed_token_ids=[90, 91], bad_words=["x"]),
                       use_tqdm=False)[0].outputs[0].token_ids
    assert out == [91] * 4, "non-vacuity: with another token allowed, it is the one drawn"


def test_a_bad_word_that_is_not_utf8_text_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"bad_words\[1\]=.*not valid UTF-8"):
        SamplingParams(bad_words=["fine", "\ud800"])


def test_bad_words_outside_the_vocabulary_or_past_a_rows_bias_slots_are_refused_by_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from vt.engine.front import llm_engine
    from vt.engine.sample import sampler

    llm = make_llm()
    real = llm_engine.bad_words_token_ids
    monkeypatch.setattr(llm_engine, "bad_words_token_ids", lambda tok, words: [[5, 10**6]])
    with pytest.raises(RequestError, match=r"bad_words \['x'\]: token ids \[1000000\] are outside the vocabulary"):
        llm.generate("Hello", SamplingParams(max_tokens=2, bad_words=["x"]), use_tqdm=False)
    monkeypatch.setattr(llm_engine, "bad_words_token_ids", real)
    monkeypatch.setattr(sampler, "MAX_BIASED", 2)  # a row's bias slots, made few: one bias + two bans are three
    words = SamplingParams(max_tokens=2, bad_words=["x capital", "fiR"], logit_bias={7: 1.0})
    with pytest.raises(RequestError, match="name 3 tokens; at most 2 per request"):
        llm.generate("Hello", words, use_tqdm=False)
    assert not llm.engine.has_unfinished(), "nothing was queued"
    ok = llm.generate("Hello", SamplingParams(max_tokens=2, bad_words=["x capital"], logit_bias={7: 1.0}),
                      use_tqdm=False)
    assert len(ok[0].outputs[0].token_ids) == 2, "non-vacuity: two slots hold one bias and one ban"
