"""CORS as vLLM's OpenAI server sets it: Starlette's CORSMiddleware, always installed, with the origins, methods
and headers the serve flags give (JSON lists, default ["*"]) and whether credentials are allowed (default not).
A browser's preflight (OPTIONS with Origin and Access-Control-Request-Method) is answered by the middleware,
before any route or the API key: the browser sends no Authorization header on it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from vt.errors import ConfigError

ANY = ("*",)


@dataclass(frozen=True, slots=True)
class CorsPolicy:
    allowed_origins: tuple[str, ...] = ANY
    allowed_methods: tuple[str, ...] = ANY
    allowed_headers: tuple[str, ...] = ANY
    allow_credentials: bool = False

    def middleware(self) -> Any:
        from starlette.middleware import Middleware
        from starlette.middleware.cors import CORSMiddleware

        return Middleware(CORSMiddleware, allow_origins=list(self.allowed_origins),
                          allow_methods=list(self.allowed_methods), allow_headers=list(self.allowed_headers),
                          allow_credentials=self.allow_credentials)


def json_list(flag: str, text: str) -> tuple[str, ...]:
    """A flag's JSON list of strings (vLLM's --allowed-origins '["https://a.example"]'), or one ConfigError line."""
    try:
        value = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{flag} {text!r}: not JSON ({e}); give a JSON list of strings, e.g. '[\"*\"]'") from None
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{flag} {text!r}: expected a JSON list of non-empty strings, e.g. '[\"*\"]'")
    return tuple(value)
