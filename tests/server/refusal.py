"""A refusal's OpenAI error object, read only once the response is shown to be one."""

from __future__ import annotations

from typing import Any

import httpx


def error_of(r: httpx.Response, status: int = 400) -> dict[str, Any]:
    """The `error` object of r's OpenAI error body, after asserting r is that refusal: the status, then a JSON body
    holding an `error` object. A gate that indexed body["error"] of a 200 (a stream, an answer) or of a 500's text
    would crash on a KeyError or a JSONDecodeError; this fails it on the broken guarantee instead."""
    assert r.status_code == status, f"expected a {status} refusal, got {r.status_code}: {r.text[:300]}"
    try:
        body = r.json()
    except ValueError:  # json.JSONDecodeError, or bytes that are not UTF-8
        body = None
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), \
        f"a {status} without an OpenAI error body: {r.text[:300]}"
    return body["error"]
