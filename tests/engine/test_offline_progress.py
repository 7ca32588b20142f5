"""The offline API's progress bar, as vLLM's: generate and chat draw one on stderr by default when stderr is a
terminal; use_tqdm=False draws none, and neither does a stderr that is no terminal (a log, a pipe, CI)."""

from __future__ import annotations

import io
import os
import pty
import sys
import threading

import pytest

from vt import LLM, SamplingParams

SMALL = dict(backend="cpu", max_model_len=64, num_blocks=16)
GREEDY = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM("tiny-qwen3", **SMALL)


def _on_a_terminal(monkeypatch: pytest.MonkeyPatch, call) -> tuple[object, str]:
    """call() with stderr a pseudo-terminal; its value and what reached the terminal."""
    master, slave = pty.openpty()
    got: list[bytes] = []

    def drain() -> None:  # read as it is written: a terminal's buffer is small
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            got.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    term = os.fdopen(slave, "w", buffering=1)
    with monkeypatch.context() as m:
        m.setattr(sys, "stderr", term)
        value = call()
        term.flush()
    term.close()
    reader.join(5)
    os.close(master)
    return value, b"".join(got).decode(errors="replace")


def test_generate_and_chat_draw_a_bar_on_a_terminal_by_default(llm: LLM, monkeypatch: pytest.MonkeyPatch) -> None:
    outs, drawn = _on_a_terminal(monkeypatch, lambda: llm.generate(["Hello", "Hi"], GREEDY))
    assert len(outs) == 2 and all(o.outputs[0].token_ids for o in outs), "non-vacuity: both prompts ran"
    assert "requests" in drawn, f"no progress bar on the terminal by default: {drawn!r}"
    _, drawn = _on_a_terminal(monkeypatch, lambda: llm.chat([{"role": "user", "content": "Hi"}], GREEDY))
    assert "requests" in drawn, f"chat drew no progress bar on the terminal by default: {drawn!r}"


def test_use_tqdm_false_draws_nothing(llm: LLM, monkeypatch: pytest.MonkeyPatch) -> None:
    outs, drawn = _on_a_terminal(monkeypatch, lambda: llm.generate(["Hello"], GREEDY, use_tqdm=False))
    assert outs[0].outputs[0].token_ids, "non-vacuity: the prompt ran"
    assert drawn == "", drawn


def test_a_stderr_that_is_no_terminal_gets_no_bar(llm: LLM, monkeypatch: pytest.MonkeyPatch) -> None:
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    assert llm.generate(["Hello"], GREEDY)[0].outputs[0].token_ids, "non-vacuity: the prompt ran"
    assert log.getvalue() == ""
