"""Incremental detokenization: the tokenizers library's DecodeStream (the same prefix / read-offset scheme as
HF's text streamers and vLLM's fast detokenizer, in Rust: one call a token instead of two decodes from Python)
releases text only once it no longer ends in a partial UTF-8 character, so an output never ends in U+FFFD.
Stop strings are searched in the newly released text plus the few characters before it that a stop string
could straddle. The offsets of the last two releases are kept for the end (an output cut inside a character
ends before it) and for byte-fallback tokenizers (SentencePiece's Llama-2 family): there a stray byte can turn a
released character back into U+FFFD, DecodeStream then refuses the window ("invalid prefix", vLLM's issue
17448), and this request's text goes on by decoding the same window from Python, as before DecodeStream."""

from __future__ import annotations

from typing import Any

from tokenizers.decoders import DecodeStream

REPLACEMENT = "\ufffd"


class NoText:
    """A request that asked for no text (detokenize=False; the engine process's front detokenizes those without
    stop strings itself): nothing decoded, nothing stops it."""

    text = ""

    def add(self, token: int, can_stop: bool = True) -> str | None:
        return None

    def flush(self) -> str:
        return ""


NO_TEXT = NoText()


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Any, stop: list[str], include_stop: bool = False,
                 skip_special_tokens: bool = True) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens  # False: special tokens' text stays (vLLM's field)
        self.stop = stop
        self.include_stop = include_stop  # keep the stop string at the end of the text
        self.max_stop = max((len(s) for s in stop), default=0)
        self.ids: list[int] = []
        self.stream: DecodeStream | None = DecodeStream(skip_special_tokens=self.skip_special_tokens)
        self.prefix_offset = 0  # the release before the last: where the end's window starts
        self.read_offset = 0  # tokens before this are in `text`
        self.text = ""

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def add(self, token: int, can_stop: bool = True) -> str | None:
        """Appends a token; returns the stop string it completed, if any (the text is then cut before it).
        can_stop False (before min_tokens): the text grows, no stop string is searched."""
        self.ids.append(token)
        new = self._step(token)
        if not new:
            return None  # nothing new yet, or a character still incomplete: wait for its next byte
        start = max(0, len(self.text) - self.max_stop + 1)
        self.text += new
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        for s in self.stop if can_stop else ():
            at = self.text.find(s, start)
            if at >= 0:
                self.text = self.text[: at + (len(s) if self.include_stop else 0)]
                return s
        return None

    def _step(self, token: int) -> str | None:
        if self.stream is not None:
            try:
                return self.stream.step(self.tokenizer, token)
            except Exception as e:  # noqa: BLE001 - tokenizers raises a bare Exception for it
                if "invalid prefix" not in str(e).lower():
                    raise
                self.stream = None  # from here on, the window below (the text it released stays)
        rest, whole = self._unreleased()
        return rest if whole else None  # else nothing new yet, or a character still incomplete

    def _unreleased(self) -> tuple[str, bool]:
        """The window's text past what was released, and whether it ends on whole characters (the window starts
        at the release before the last, so a token's leading space decodes as it does mid-text)."""
        prefix = self._decode(self.ids[self.prefix_offset : self.read_offset])
        full = self._decode(self.ids[self.prefix_offset :])
        return full[len(prefix) :], len(full) > len(prefix) and not full.endswith(REPLACEMENT)

    def flush(self) -> str:
        """At the end: whatever is left, a trailing incomplete character dropped rather than shown as U+FFFD."""
        return self.text + self._unreleased()[0].rstrip(REPLACEMENT)
