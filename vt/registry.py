"""Explicit registries: name -> import path, imported lazily (never by import side effects)."""

from __future__ import annotations

import importlib
from typing import Any

from vt.errors import ConfigError

BACKENDS: dict[str, str] = {
    "cpu": "backends.cpu:CpuBackend",
    "cuda": "backends.cuda:CudaBackend",
}


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def backend_class(name: str) -> Any:
    if name not in BACKENDS:
        raise ConfigError(f"backend={name!r}: expected one of {sorted(BACKENDS)}")
    try:
        return _load(BACKENDS[name])
    except ImportError as e:  # the CUDA backend without CuPy (or without a CUDA driver to load it)
        raise ConfigError(f"backend={name!r} needs {e.name or 'a module'} importable here "
                          f"(pip install 'vt[cuda]' on a machine with a CUDA GPU): {e}") from None


def detect_backend() -> str:
    """backend="auto": CUDA where CuPy sees a GPU, else the CPU."""
    try:
        import cupy

        return "cuda" if cupy.cuda.runtime.getDeviceCount() > 0 else "cpu"
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device: the CPU
        return "cpu"


def make_backend(name: str, **kw: Any) -> Any:
    return backend_class(name)(**kw)
