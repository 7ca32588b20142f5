"""Reasoning outputs, as vLLM's server with --reasoning-parser qwen3: a chat answer's `<think>...</think>` block is
the message's `reasoning` (and `reasoning_content`, vLLM's older name, while clients move), the rest its content.

One rule, whole or streamed, so that a stream adds up to the whole answer:
- an answer that opens with `<think>` is reasoning until `</think>`, then content;
- so is every answer whose prompt already opened the block (a template that writes `<think>` into the generation
  prompt);
- an answer that stops inside the block is all reasoning, with no content;
- any other answer is all content: Qwen3 with `enable_thinking: false` (its template closes an empty block in the
  prompt) writes none.
A request's `include_reasoning: false` (vLLM's) drops the reasoning.
"""

from __future__ import annotations

from vt.errors import ConfigError
from vt.server.tags import held_tag_start

REASONING_PARSERS = ("qwen3",)
START, END = "<think>", "</think>"


def check_parser(name: str | None) -> str | None:
    if name is not None and name not in REASONING_PARSERS:
        raise ConfigError(f"--reasoning-parser {name}: vt's parsers are {', '.join(REASONING_PARSERS)} (<think> "
                          f"blocks, as Qwen3 writes them)")
    return name


def prompt_opens_a_block(prompt: str) -> bool:
    """Whether a rendered prompt ends inside a think block, so the answer begins as reasoning."""
    tail = prompt.rstrip()
    return tail.endswith(START)


class ReasoningSplitter:
    """One choice's text as reasoning and content, whole or fed in pieces (a stream's deltas)."""

    def __init__(self, opened_by_prompt: bool) -> None:
        self._state = "reasoning" if opened_by_prompt else "start"  # start, reasoning, content
        self._pending = ""  # text held back: a tag's possible start
        self.thought = opened_by_prompt  # whether the answer has a think block (reasoning, maybe empty)

    def whole(self, text: str) -> tuple[str | None, str | None]:
        """(reasoning, content) of the whole text: with a block, its reasoning and the content after it (None if
        there is none); without, no reasoning and the text as content."""
        reasoning, content = self.feed(text, done=True)
        return (reasoning, content or None) if self.thought else (None, content)

    def feed(self, text: str, done: bool) -> tuple[str, str]:
        """The reasoning and content that text (the choice's next characters) adds; done: its last."""
        reasoning: list[str] = []
        content: list[str] = []
        buf, self._pending = self._pending + text, ""
        while buf:
            if self._state == "start":
                if buf.startswith(START):
                    self._state, buf, self.thought = "reasoning", buf[len(START):], True
                    continue
                if START.startswith(buf) and not done:  # maybe the tag, cut short: held
                    self._pending = buf
                    break
                self._state = "content"
                continue
            if self._state == "content":
                content.append(buf)
                break
            end = buf.find(END)
            if end >= 0:
                reasoning.append(buf[:end])
                self._state, buf = "content", buf[end + len(END):]
                continue
            hold = 0 if done else held_tag_start(buf, END)
            reasoning.append(buf[:len(buf) - hold])
            self._pending = buf[len(buf) - hold:]
            break
        return "".join(reasoning), "".join(content)
