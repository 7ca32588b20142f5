"""Models by HF architecture name (config.json's `architectures[0]`): name -> import path, imported
lazily. The engine builds every model, target or draft, through `load_model`."""

from __future__ import annotations

import importlib
from typing import Any

from vt.errors import CheckpointError

MODELS: dict[str, str] = {
    "Qwen3ForCausalLM": "models.qwen3:Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM": "models.qwen3:Qwen3ForCausalLM",  # dense or MoE by the config
}
ARCHITECTURES = tuple(MODELS)


def model_class(architecture: str) -> Any:
    if architecture not in MODELS:
        raise CheckpointError(f"architecture {architecture!r} is not supported (supported: {ARCHITECTURES})")
    module, _, attr = MODELS[architecture].partition(":")
    return getattr(importlib.import_module(module), attr)


def load_model(ckpt: Any, backend: Any) -> Any:
    """The checkpoint's architecture (a models.base.Model), built on `backend` with the checkpoint's
    weights uploaded. (Typed loosely: this table imports no model module, so nothing imports in a circle.)"""
    return model_class(ckpt.config.architecture)(ckpt, backend)
