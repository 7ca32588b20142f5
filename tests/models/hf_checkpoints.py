"""Tiny random checkpoints made and saved by HF transformers itself (the oracle), for every supported
architecture and both config layouts. Built once per test session into a temporary directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from models.loader import resolve_model

COMMON: dict[str, Any] = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                              initializer_range=0.2, bos_token_id=0, eos_token_id=0)
SPECS: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen3-yarn": ("Qwen3Config", dict(head_dim=16, rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                                  "original_max_position_embeddings": 512})),
    "qwen3-moe": ("Qwen3MoeConfig", dict(head_dim=16, num_experts=4, num_experts_per_tok=2,
                                         moe_intermediate_size=32, norm_topk_prob=True)),
    "qwen2": ("Qwen2Config", dict(rope_theta=10000.0)),
    # one KV head (tensor parallelism replicates it) and a vocabulary no rank count divides
    "qwen2-mqa": ("Qwen2Config", dict(num_key_value_heads=1, vocab_size=509, rope_theta=10000.0)),
    "llama3": ("LlamaConfig", dict(tie_word_embeddings=True, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 256}, rope_theta=500000.0)),
}
ARCHS = ("qwen3-yarn", "qwen3-moe", "qwen2", "llama3")  # qwen2-mqa serves the tensor-parallel tests


def make(name: str, root: Path, dtype: str = "float32") -> Path:
    """`name` saved by transformers in `dtype`, with the built-in tokenizer beside it."""
    import torch
    import transformers

    dest = root / f"{name}-{dtype}"
    if dest.is_dir():
        return dest
    cls, extra = SPECS[name]
    torch.manual_seed(sum(map(ord, name)))
    cfg = getattr(transformers, cls)(**{**COMMON, **extra})
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():  # transformers initializes biases to zero, which would hide a bias never added
        for n, p in model.named_parameters():
            if n.endswith(".bias"):
                p.normal_(0.0, 0.5)
    model = model.to(getattr(torch, dtype))
    model.save_pretrained(dest, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(resolve_model("tiny-qwen3") / f, dest / f)
    return dest


def as_transformers4(src: Path, dest: Path) -> Path:
    """The same checkpoint with the config in transformers 4's layout: rope_theta + rope_scaling,
    num_experts, torch_dtype."""
    shutil.copytree(src, dest)
    d = json.loads((dest / "config.json").read_text())
    rope = dict(d.pop("rope_parameters", {}))
    d["rope_theta"] = rope.pop("rope_theta", 10000.0)
    if rope.get("rope_type", "default") != "default":
        d["rope_scaling"] = rope
    if "num_local_experts" in d:
        d["num_experts"] = d.pop("num_local_experts")
    if "dtype" in d:
        d["torch_dtype"] = d.pop("dtype")
    (dest / "config.json").write_text(json.dumps(d))
    return dest
