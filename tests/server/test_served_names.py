"""vLLM's `--served-model-name a b`: a request may name any of the served names, /v1/models lists each, and
responses and the metrics' model_name label carry the first. Driven by the real `openai` client and httpx."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers import guarding
from tests.server.refusal import error_of
from vt.cli import build_parser
from vt.errors import ConfigError
from vt.server.serve import make_server, running_server

openai = pytest.importorskip("openai")

MODEL = "tiny-qwen3"
NAMES = ("alpha", "beta")


@pytest.fixture(scope="module")
def served():
    with running_server(MODEL, served_name=NAMES, max_model_len=128, num_blocks=64, max_num_seqs=4) as (server, url):
        yield server, url


def test_models_lists_every_served_name_in_order(served) -> None:
    cards = httpx.get(served[1] + "/v1/models", timeout=30).json()["data"]
    assert [c["id"] for c in cards] == list(NAMES)
    assert all(c["root"] == MODEL and c["max_model_len"] == 128 for c in cards), cards


@pytest.mark.parametrize("asked", NAMES)
def test_a_request_may_name_any_served_name_and_the_response_carries_the_first(served, asked: str) -> None:
    client = openai.OpenAI(base_url=served[1] + "/v1", api_key="none")
    with guarding(f"the served name {asked!r} is answered", openai.NotFoundError):
        out = client.completions.create(model=asked, prompt="Hello", max_tokens=3, temperature=0.0)
        chat = client.chat.completions.create(model=asked, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    assert out.model == NAMES[0] and out.usage.completion_tokens == 3
    assert chat.model == NAMES[0] and chat.usage.completion_tokens == 2


def test_a_name_not_served_is_a_404_naming_every_served_one(served) -> None:
    """Non-vacuity for the test above: names are checked, and the checkpoint's own name is not one of them."""
    r = httpx.post(served[1] + "/v1/completions", json={"model": MODEL, "prompt": "Hello", "max_tokens": 2}, timeout=30)
    err = error_of(r, 404)
    assert err["code"] == "model_not_found" and all(f"`{n}`" in err["message"] for n in NAMES), err


def test_the_metrics_label_is_the_first_name(served) -> None:
    text = httpx.get(served[1] + "/metrics", timeout=30).text
    assert f'model_name="{NAMES[0]}"' in text and f'model_name="{NAMES[1]}"' not in text


def test_the_cli_takes_several_names() -> None:
    args = build_parser().parse_args(["serve", MODEL, "--served-model-name", *NAMES])
    assert args.served_model_name == list(NAMES)


@pytest.mark.parametrize("names", [["alpha", ""], ["  "]])
def test_an_empty_name_is_refused_before_the_engine_starts(names: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import vt.server.serve as serve

    def started(*a, **k):
        raise AssertionError("the engine started before the names were checked")

    monkeypatch.setattr(serve, "AsyncLLM", started)
    with pytest.raises(ConfigError, match="--served-model-name"):
        make_server(MODEL, served_name=names)
