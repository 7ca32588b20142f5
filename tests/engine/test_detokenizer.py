"""Incremental detokenization: the text equals a whole decode and never ends in a partial character, also when
the output is cut inside one; stop strings are found across token boundaries and inside multi-byte characters'
neighbours. (Linear work per token is the tokenizers library's DecodeStream's: it decodes a window.)"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.loader import load_checkpoint, resolve_model
from vt.engine.front.detokenizer import REPLACEMENT, IncrementalDetokenizer

TOK = load_checkpoint(resolve_model("tiny-qwen3")).tokenizer
TEXTS = st.lists(st.sampled_from(list("ab cé€😀\n,.ü") + ["the", " engine"]), min_size=1, max_size=30).map("".join)


def _feed(text: str, stop: list[str]) -> tuple[IncrementalDetokenizer, str | None]:
    d = IncrementalDetokenizer(TOK, stop)
    hit = None
    for t in TOK.encode(text).ids:
        hit = d.add(t)
        if hit is not None:
            break
    return d, hit


@settings(max_examples=150, deadline=None, derandomize=True)
@given(text=TEXTS)
def test_the_released_text_is_the_whole_decode_and_never_ends_in_a_partial_character(text: str) -> None:
    d, _ = _feed(text, [])
    assert d.flush() == TOK.decode(TOK.encode(text).ids, skip_special_tokens=True)
    assert not d.text.endswith(REPLACEMENT), "released text never ends in a partial character"


@pytest.mark.parametrize("char", ["€", "😀"], ids=["euro", "emoji"])
def test_an_output_cut_inside_a_character_ends_before_it(char: str) -> None:
    ids = TOK.encode("ab" + char).ids
    whole = TOK.decode(ids[:-1], skip_special_tokens=True)
    assert whole.endswith(REPLACEMENT) and whole.startswith("ab"), "non-vacuity: the cut splits the character"
    d = IncrementalDetokenizer(TOK, [])
    for t in ids[:-1]:
        d.add(t)
    assert d.flush() == whole.rstrip(REPLACEMENT), "the end drops the partial character, keeps the rest"


@settings(max_examples=150, deadline=None, derandomize=True)
@given(text=TEXTS, data=st.data())
def test_a_stop_string_is_found_wherever_it_falls_and_cut_before(text: str, data) -> None:
    full = TOK.decode(TOK.encode(text).ids, skip_special_tokens=True)
    i = data.draw(st.integers(0, len(full) - 1))
    stop = full[i : i + data.draw(st.integers(1, 4))]
    if REPLACEMENT in stop or not stop.strip():
        return
    d, hit = _feed(text, [stop])
    assert hit == stop, f"{stop!r} in {full!r} was not found"
    assert d.text == full[: full.find(stop)], "the text ends right before the first occurrence"


@pytest.mark.parametrize("stop", ["€", "é c", "😀"], ids=["euro", "e-acute-space-c", "emoji"])
def test_a_stop_string_of_multibyte_characters_splitting_across_tokens(stop: str) -> None:
    text = "ab " + stop + " cd"
    ids = TOK.encode(text).ids
    assert any(REPLACEMENT in TOK.decode([t]) for t in ids), "non-vacuity: a character spans tokens"
    d, hit = _feed(text, [stop])
    assert hit == stop and d.text == "ab "


def _byte_fallback_tokenizer() -> tuple[Any, dict[str, int]]:
    """SentencePiece's byte fallback (the Llama-2 family): bytes spelled as tokens <0xNN>."""
    from tokenizers import Tokenizer, decoders, models

    vocab = {"<unk>": 0, **{f"<0x{b:02X}>": 1 + b for b in range(256)}, "▁the": 257}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    return tok, vocab


def test_a_byte_fallback_output_that_unmakes_a_released_character_goes_on() -> None:
    """A sampled '’' (three byte tokens), a stray lead byte, then words: the stray byte turns the whole byte run
    back into U+FFFD, so the window's decode no longer starts with the text already released. The output goes
    on (the released '’' stays), rather than failing the request and the engine with it."""
    from tokenizers.decoders import DecodeStream

    tok, vocab = _byte_fallback_tokenizer()
    ids = [vocab["▁the"], 1 + 0xE2, 1 + 0x80, 1 + 0x99, 1 + 0xE2, vocab["▁the"], vocab["▁the"]]
    with pytest.raises(Exception, match="(?i)invalid prefix"):  # non-vacuity: the library alone refuses it
        stream = DecodeStream(skip_special_tokens=True)
        for t in ids:
            stream.step(tok, t)
    d = IncrementalDetokenizer(tok, [" the the"])
    try:
        hits = [d.add(t) for t in ids]
    except Exception as e:  # noqa: BLE001 - the failure under test
        pytest.fail(f"the detokenizer raised on a byte-fallback output: {type(e).__name__}: {e}")
    assert d.text.startswith("the’"), f"the released character stays: {d.text!r}"
    assert hits[-1] == " the the" and d.text.endswith(REPLACEMENT * 3), "and stop strings are still found after it"
