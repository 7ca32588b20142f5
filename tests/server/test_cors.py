"""CORS as vLLM's server: a browser's preflight is answered 200 with Access-Control-Allow-Origin (any origin by
default, the --allowed-origins list when given, ahead of the API key), and a bad flag value is one ConfigError line,
exit 2, before any model loads."""

from __future__ import annotations

import httpx
import pytest

from vt.cli import main
from vt.server.cors import CorsPolicy
from vt.server.serve import running_server

ALLOWED = "https://app.example"


def preflight(url: str, origin: str) -> httpx.Response:
    return httpx.options(url + "/v1/chat/completions", timeout=30, headers={
        "Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"})


def test_a_preflight_is_answered_with_any_origin_by_default() -> None:
    with running_server("tiny-qwen3", max_model_len=128, num_blocks=16, api_key="sk-key") as (_, url):
        r = preflight(url, "https://anywhere.example")
        health = httpx.get(url + "/health", headers={"Origin": "https://anywhere.example"}, timeout=30)
    assert r.status_code == 200, f"the preflight was not answered (no CORS): {r.status_code} {r.text[:200]}"
    assert r.headers.get("access-control-allow-origin") == "*", dict(r.headers)
    assert health.headers.get("access-control-allow-origin") == "*", "a plain request's answer carries it too"


def test_allowed_origins_bound_who_may_ask() -> None:
    with running_server("tiny-qwen3", max_model_len=128, num_blocks=16,
                        cors=CorsPolicy(allowed_origins=(ALLOWED,), allow_credentials=True)) as (_, url):
        ok, other = preflight(url, ALLOWED), preflight(url, "https://elsewhere.example")
    assert ok.status_code == 200 and ok.headers.get("access-control-allow-origin") == ALLOWED, dict(ok.headers)
    assert ok.headers.get("access-control-allow-credentials") == "true", dict(ok.headers)
    assert other.status_code == 400 and "access-control-allow-origin" not in other.headers, \
        f"an origin outside --allowed-origins was let in: {other.status_code} {dict(other.headers)}"


@pytest.mark.parametrize("flag,value", [("--allowed-origins", "[*]"), ("--allowed-methods", '"GET"'),
                                        ("--allowed-headers", "[1]")], ids=["not-json", "not-a-list", "not-strings"])
def test_a_bad_cors_flag_is_one_config_error_line_exit_2(capsys, flag: str, value: str) -> None:
    code = main(["serve", "no-such-model-is-loaded", flag, value])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, (code, err)
    assert err[0].startswith("vt: error: ConfigError:") and flag in err[0], err
    main(["serve", "no-such-model-is-loaded", "--port", "0", flag, '["*"]'])
    fine = capsys.readouterr().err
    assert flag not in fine and "no-such-model-is-loaded" in fine, f"non-vacuity: a good value passes: {fine}"
