"""Load an HF checkpoint directory: config.json, generation_config.json, single or sharded
*.safetensors, and tokenizer.json (through the `tokenizers` library)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from models.config import ModelConfig
from vt.errors import CheckpointError


@dataclass(slots=True)
class Checkpoint:
    path: Path
    config: ModelConfig
    weights: dict[str, np.ndarray]
    tokenizer: Any  # tokenizers.Tokenizer
    generation_config: dict[str, Any] = field(default_factory=dict)


def _read_json(path: Path, required: bool = True) -> dict[str, Any]:
    if not path.is_file():
        if required:
            raise CheckpointError(f"{path.name} is missing from {path.parent}")
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path} is not valid JSON: {e}") from None


def _load_weights(path: Path) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    index = path / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(_read_json(index)["weight_map"].values()))
    else:
        files = sorted(p.name for p in path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"no *.safetensors in {path}")
    weights: dict[str, np.ndarray] = {}
    for name in files:
        try:
            weights.update(load_file(str(path / name)))
        except (SafetensorError, OSError) as e:
            raise CheckpointError(f"{path / name}: {e}") from None
    return weights


def load_checkpoint(path: str | Path) -> Checkpoint:
    from tokenizers import Tokenizer

    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory {path} does not exist")
    config = ModelConfig.from_hf(_read_json(path / "config.json"))
    gen = _read_json(path / "generation_config.json", required=False)
    tok_path = path / "tokenizer.json"
    if not tok_path.is_file():
        raise CheckpointError(f"tokenizer.json is missing from {path}")
    try:
        tokenizer = Tokenizer.from_file(str(tok_path))
    except Exception as e:  # the tokenizers library raises plain Exception subclasses
        raise CheckpointError(f"{tok_path}: {e}") from None
    if not config.eos_token_ids and gen.get("eos_token_id") is not None:
        eos = gen["eos_token_id"]
        config.eos_token_ids = tuple(eos if isinstance(eos, list) else [eos])
    return Checkpoint(path, config, _load_weights(path), tokenizer, gen)


def resolve_model(name_or_path: str) -> Path:
    """A built-in tiny checkpoint by name (written on first use), or a checkpoint directory."""
    from models import tiny

    if name_or_path in tiny.SPECS:
        return tiny.ensure(name_or_path)
    path = Path(name_or_path)
    if path.is_dir():
        return path
    raise CheckpointError(f"unknown model {name_or_path!r}: not a built-in ({', '.join(tiny.SPECS)}) "
                          f"and not a checkpoint directory")
