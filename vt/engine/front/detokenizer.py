"""Incremental detokenization with prefix and read offsets (the scheme HF's text streamers and vLLM use):
each new token decodes a short window, never the whole output, and text is released only once it no
longer ends in a partial UTF-8 character, so an output never ends in U+FFFD. Stop strings are searched
in the newly released text plus the few characters before it that a stop string could straddle."""

from __future__ import annotations

from typing import Any

REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Any, stop: list[str], include_stop: bool = False) -> None:
        self.tokenizer = tokenizer
        self.stop = stop
        self.include_stop = include_stop  # keep the stop string at the end of the text
        self.max_stop = max((len(s) for s in stop), default=0)
        self.ids: list[int] = []
        self.prefix_offset = 0  # tokens before this were released and are no longer decoded
        self.read_offset = 0  # tokens before this are in `text`
        self.text = ""
        self.num_decoded = 0  # tokens passed to decode so far: the cost, linear in the output

    def _decode(self, ids: list[int]) -> str:
        self.num_decoded += len(ids)
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def add(self, token: int, can_stop: bool = True) -> str | None:
        """Appends a token; returns the stop string it completed, if any (the text is then cut before it).
        can_stop False (before min_tokens): the text grows, no stop string is searched."""
        self.ids.append(token)
        prefix = self._decode(self.ids[self.prefix_offset : self.read_offset])
        full = self._decode(self.ids[self.prefix_offset :])
        if len(full) <= len(prefix) or full.endswith(REPLACEMENT):
            return None  # nothing new yet, or a character still incomplete: wait for its next byte
        new = full[len(prefix) :]
        start = max(0, len(self.text) - self.max_stop + 1)
        self.text += new
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        for s in self.stop if can_stop else ():
            at = self.text.find(s, start)
            if at >= 0:
                self.text = self.text[: at + (len(s) if self.include_stop else 0)]
                return s
        return None

    def flush(self) -> str:
        """At the end: whatever is left, a trailing incomplete character dropped rather than shown as U+FFFD."""
        rest = self._decode(self.ids[self.prefix_offset :])[len(self._decode(self.ids[self.prefix_offset :
                                                                                     self.read_offset])):]
        return self.text + rest.rstrip(REPLACEMENT)
