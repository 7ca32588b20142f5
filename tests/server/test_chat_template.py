"""--chat-template: a template (its text or its file) in place of the checkpoint's, checked at start-up."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers import guarding
from tests.server.refusal import error_of
from vt.engine.front.chat import load_template
from vt.errors import ConfigError
from vt.server.serve import running_server

TEMPLATE = ("{% for m in messages %}<<{{ m.role }}:{{ m.content }}>>{% endfor %}"
            "{% if add_generation_prompt %}=>{% endif %}")


def test_the_server_renders_chat_with_the_given_template(tmp_path) -> None:
    path = tmp_path / "t.jinja"
    path.write_text(TEMPLATE)
    with running_server("tiny-qwen3", max_model_len=128, num_blocks=64, chat_template=str(path)) as (_, url):
        ids = httpx.post(url + "/tokenize", json={"messages": [{"role": "user", "content": "Hi"}]}, timeout=30).json()
        text = httpx.post(url + "/detokenize", json={"tokens": ids["tokens"]}, timeout=30).json()["prompt"]
        chat = httpx.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                              "max_tokens": 2}, timeout=30)
    assert text == "<<user:Hi>>=>", "the file's template, not the checkpoint's"
    assert chat.status_code == 200 and chat.json()["usage"]["prompt_tokens"] == ids["count"], "chat used it too"


def test_a_template_given_as_text_is_taken_as_it_is() -> None:
    assert load_template(TEMPLATE) == TEMPLATE


@pytest.mark.parametrize("given,why", [("{% for m in messages %}", "not a valid Jinja template"),
                                       ("/no/such/template.jinja", "cannot read it")])
def test_a_broken_or_missing_template_is_one_line_at_start_up(given: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        load_template(given)


def test_a_template_file_that_is_not_utf8_is_one_line_at_start_up(tmp_path) -> None:
    """A --chat-template file in another encoding was a raw UnicodeDecodeError (exit 1, a traceback)."""
    latin = tmp_path / "template.jinja"
    latin.write_bytes("{{ messages[0]['content'] }} caf\u00e9".encode("latin-1"))
    error: Exception | None = None
    try:
        load_template(str(latin))
    except Exception as e:  # noqa: BLE001 - the test inspects which error it is
        error = e
    assert isinstance(error, ConfigError), f"one typed line, not {error!r}"
    assert "not UTF-8" in str(error) and str(latin) in str(error), error
    good = tmp_path / "good.jinja"
    good.write_text("{{ messages[0]['content'] }} caf\u00e9", encoding="utf-8")
    assert load_template(str(good)).endswith("caf\u00e9"), "non-vacuity: a UTF-8 file is read"


def test_a_template_that_fails_on_a_conversation_is_a_400_on_every_route(tmp_path) -> None:
    """A template whose own code fails on some messages (here 1/0 on the content "div") is the client's to fix: a 400
    with the OpenAI error body on /tokenize as on chat, and a RequestError from render (LLM.chat's path); it was a
    500 with a traceback from /tokenize and a bare ZeroDivisionError from LLM.chat. Other messages still render."""
    from vt.engine.front.chat import render
    from vt.errors import RequestError

    failing = "{% for m in messages %}{{ 1 / (0 if m.content == 'div' else 1) }}{% endfor %}"
    with guarding("render refuses a template that fails on these messages with a RequestError", Exception), \
            pytest.raises(RequestError, match="ZeroDivisionError"):
        render(failing, [{"role": "user", "content": "div"}], {}, True)
    assert render(failing, [{"role": "user", "content": "ok"}], {}, True) == "1.0", "non-vacuity: it renders"
    path = tmp_path / "t.jinja"
    path.write_text(failing)
    msgs = [{"role": "user", "content": "div"}]
    with running_server("tiny-qwen3", max_model_len=128, num_blocks=64, chat_template=str(path)) as (_, url):
        tok = httpx.post(url + "/tokenize", json={"messages": msgs}, timeout=30)
        chat = httpx.post(url + "/v1/chat/completions", json={"messages": msgs, "max_tokens": 2}, timeout=30)
        fine = httpx.post(url + "/tokenize", json={"messages": [{"role": "user", "content": "ok"}]}, timeout=30)
    for r in (tok, chat):
        err = error_of(r, 400)
        assert err.get("param") == "messages" and "ZeroDivisionError" in err.get("message", ""), r.text
    assert fine.status_code == 200, "non-vacuity: the server serves what the template renders"
