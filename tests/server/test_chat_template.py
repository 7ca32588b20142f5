"""--chat-template: a template (its text or its file) in place of the checkpoint's, checked at start-up."""

from __future__ import annotations

import httpx
import pytest

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
