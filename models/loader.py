"""Load an HF checkpoint directory: config.json, generation_config.json, single or sharded
*.safetensors (memory-mapped, F32 / F16 / BF16), and tokenizer.json (through the `tokenizers` library).

Before any weight is read, the tensors the config implies (names and shapes) are compared with the
checkpoint's headers: one CheckpointError lists what is missing, unexpected or mis-shaped."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models.config import ModelConfig, eos_ids_in_vocab
from models.safetensors_io import LazyWeights, TensorInfo, check_dtype, read_header
from vt.errors import CheckpointError

IGNORED = (".rotary_emb.inv_freq",)  # buffers some exporters write; recomputed from the config
SHOW = 5  # names listed per kind of mismatch

@dataclass(slots=True)
class Checkpoint:
    path: Path
    config: ModelConfig
    weights: LazyWeights  # name -> float32 array, read from the memory map on access
    tokenizer: Any  # tokenizers.Tokenizer
    generation_config: dict[str, Any] = field(default_factory=dict)
    tokenizer_config: dict[str, Any] = field(default_factory=dict)
    chat_template: str | None = None  # chat_template.jinja, else tokenizer_config.json's chat_template

    @property
    def eos_ids(self) -> set[int]:
        """The ids that end generation: config.json's and generation_config.json's."""
        eos = self.generation_config.get("eos_token_id")
        return set(self.config.eos_token_ids) | set([] if eos is None else eos if isinstance(eos, list) else [eos])


def _read_json(path: Path, required: bool = True) -> dict[str, Any]:
    if not path.is_file():
        if required:
            raise CheckpointError(f"{path.name} is missing from {path.parent}")
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:  # bad JSON, bytes that are not UTF-8, an integer of 4,300+ digits
        raise CheckpointError(f"{path} is not valid JSON: {type(e).__name__}: {e}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: not a JSON object (a {type(data).__name__})")
    return data


def _headers(path: Path) -> dict[str, TensorInfo]:
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            files = sorted(set(_read_json(index)["weight_map"].values()))
        except (KeyError, AttributeError, TypeError) as e:
            raise CheckpointError(f"{index}: no weight_map ({e})") from None
    else:
        files = sorted(p.name for p in path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"no *.safetensors in {path}")
    infos: dict[str, TensorInfo] = {}
    for name in files:
        if not (path / name).is_file():
            raise CheckpointError(f"{path / name} is missing (named by the index)")
        infos.update(read_header(path / name))
    return infos


def check_manifest(config: ModelConfig, infos: dict[str, TensorInfo]) -> None:
    """The checkpoint holds exactly the tensors the config implies, at their shapes, in a supported dtype."""
    from models.registry import expected_tensors

    want = expected_tensors(config)
    have = {k: v for k, v in infos.items() if not k.endswith(IGNORED)}
    if config.tie_word_embeddings:
        have.pop("lm_head.weight", None)  # tied: the embedding is the head; a saved copy is ignored
    missing = sorted(set(want) - set(have))
    unexpected = sorted(set(have) - set(want))
    misshaped = sorted(f"{k} {have[k].shape} (expected {want[k]})" for k in set(want) & set(have)
                       if have[k].shape != want[k])
    parts = [f"{len(names)} {kind}: {', '.join(names[:SHOW])}{' ...' if len(names) > SHOW else ''}"
             for kind, names in (("missing", missing), ("unexpected", unexpected), ("mis-shaped", misshaped))
             if names]
    if parts:
        raise CheckpointError(f"the checkpoint does not match its config.json ({config.architecture}, "
                              f"{config.num_hidden_layers} layers): " + "; ".join(parts))
    for k in want:
        check_dtype(k, have[k])


def load_checkpoint(path: str | Path) -> Checkpoint:
    from tokenizers import Tokenizer

    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory {path} does not exist")
    config = ModelConfig.from_hf(_read_json(path / "config.json"))
    from models.rope import inv_freq_and_scale

    inv_freq_and_scale(config)  # a rope_scaling it cannot use is refused now, by name, before any weight is read
    infos = _headers(path)
    check_manifest(config, infos)  # before any weight is read
    gen = _read_json(path / "generation_config.json", required=False)
    if gen.get("eos_token_id") is not None:
        gen_eos = eos_ids_in_vocab(gen["eos_token_id"], str(path / "generation_config.json"), config.vocab_size)
    tok_path = path / "tokenizer.json"
    if not tok_path.is_file():
        raise CheckpointError(f"tokenizer.json is missing from {path}")
    try:
        tokenizer = Tokenizer.from_file(str(tok_path))
    except Exception as e:  # the tokenizers library raises plain Exception subclasses
        raise CheckpointError(f"{tok_path}: {e}") from None
    if not config.eos_token_ids and gen.get("eos_token_id") is not None:
        config.eos_token_ids = gen_eos
    tok_cfg = _read_json(path / "tokenizer_config.json", required=False)
    return Checkpoint(path, config, LazyWeights(infos), tokenizer, gen, tok_cfg, _chat_template(path, tok_cfg))


def _chat_template(path: Path, tok_cfg: Any) -> str | None:
    """The chat template as transformers finds it: chat_template.jinja beside the tokenizer, else the
    tokenizer config's chat_template (a string, or a list of named templates: the 'default' one)."""
    jinja = path / "chat_template.jinja"
    if jinja.is_file():
        try:
            return jinja.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise CheckpointError(f"{jinja}: not UTF-8 text ({e})") from None
    t = tok_cfg.get("chat_template") if isinstance(tok_cfg, dict) else None
    if isinstance(t, list):
        t = next((x.get("template") for x in t if isinstance(x, dict) and x.get("name") == "default"), None)
    return t if isinstance(t, str) else None


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
