"""Tags in generated text (`<tool_call>`, `</think>`), read as the text streams in."""

from __future__ import annotations


def held_tag_start(text: str, tag: str) -> int:
    """How many of text's last characters could begin tag: a stream holds them back until the next text says."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0
