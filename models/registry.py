"""Models by HF architecture name (config.json's `architectures[0]`): name -> import path, imported
lazily. The engine builds every model, target or draft, through `load_model`."""

from __future__ import annotations

import importlib
from typing import Any

from vt.errors import CheckpointError

MODELS: dict[str, str] = {  # one decoder family: the config says which parts each has
    "Qwen3ForCausalLM": "models.decoder:DecoderForCausalLM",
    "Qwen3MoeForCausalLM": "models.decoder:DecoderForCausalLM",
    "Qwen2ForCausalLM": "models.decoder:DecoderForCausalLM",
    "LlamaForCausalLM": "models.decoder:DecoderForCausalLM",
}
ARCHITECTURES = tuple(MODELS)


def model_class(architecture: str) -> Any:
    if architecture not in MODELS:
        raise CheckpointError(f"architecture {architecture!r} is not supported (supported: {ARCHITECTURES})")
    module, _, attr = MODELS[architecture].partition(":")
    return getattr(importlib.import_module(module), attr)


def load_model(ckpt: Any, backend: Any, dtype: str = "float32", group: Any = None) -> Any:
    """The checkpoint's architecture (a models.base.Model), built on `backend` with the checkpoint's
    weights uploaded; with a tensor-parallel group, this rank's slice of them (models/shard.py). (Typed
    loosely: this table imports no model module, so nothing imports in a circle.)"""
    backend.check_model(ckpt.config)  # a shape the backend's kernels cannot run: refused before any upload
    if group is not None and group.size > 1:
        from models.shard import shard_checkpoint

        ckpt = shard_checkpoint(ckpt, group.shard)
        return model_class(ckpt.config.architecture)(ckpt, backend, dtype, group)
    return model_class(ckpt.config.architecture)(ckpt, backend, dtype)


def expected_tensors(config: Any) -> dict[str, tuple[int, ...]]:
    """The tensors (HF names and shapes) a config implies, from its architecture's module."""
    module, _, _ = MODELS[config.architecture].partition(":")
    return importlib.import_module(module).expected_tensors(config)  # type: ignore[no-any-return]
