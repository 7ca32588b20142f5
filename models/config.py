"""The model configuration, read from an HF config.json (Qwen3ForCausalLM / Qwen3MoeForCausalLM)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from models.registry import ARCHITECTURES
from vt.errors import CheckpointError


@dataclass(slots=True)
class ModelConfig:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 32768
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    # MoE (Qwen3MoeForCausalLM); num_experts == 0 means dense
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = True
    decoder_sparse_step: int = 1
    mlp_only_layers: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise CheckpointError(f"architecture {self.architecture!r} is not supported (supported: {ARCHITECTURES})")
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim",
                     "num_key_value_heads"):
            if getattr(self, name) <= 0:
                raise CheckpointError(f"config.json: {name} must be > 0, got {getattr(self, name)}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise CheckpointError(f"config.json: num_attention_heads={self.num_attention_heads} is not a multiple "
                                  f"of num_key_value_heads={self.num_key_value_heads}")
        if self.is_moe and not (0 < self.num_experts_per_tok <= self.num_experts):
            raise CheckpointError(f"config.json: num_experts_per_tok={self.num_experts_per_tok} must be in "
                                  f"[1, num_experts={self.num_experts}]")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def is_sparse_layer(self, i: int) -> bool:
        return self.is_moe and i not in self.mlp_only_layers and (i + 1) % self.decoder_sparse_step == 0

    @classmethod
    def from_hf(cls, d: dict[str, Any]) -> ModelConfig:
        archs = d.get("architectures") or []
        if not archs:
            raise CheckpointError("config.json names no architecture")
        try:
            heads = int(d["num_attention_heads"])
            hidden = int(d["hidden_size"])
            rope = d.get("rope_parameters") or {}
            eos = d.get("eos_token_id")
            return cls(
                architecture=archs[0],
                vocab_size=int(d["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(d.get("intermediate_size", 0)),
                num_hidden_layers=int(d["num_hidden_layers"]),
                num_attention_heads=heads,
                num_key_value_heads=int(d.get("num_key_value_heads") or heads),
                head_dim=int(d.get("head_dim") or hidden // heads),
                rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
                rope_theta=float(d.get("rope_theta", rope.get("rope_theta", 1_000_000.0))),
                max_position_embeddings=int(d.get("max_position_embeddings", 32768)),
                tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
                attention_bias=bool(d.get("attention_bias", False)),
                bos_token_id=d.get("bos_token_id"),
                eos_token_ids=tuple(eos if isinstance(eos, list) else ([] if eos is None else [eos])),
                num_experts=int(d.get("num_experts", 0) or 0),
                num_experts_per_tok=int(d.get("num_experts_per_tok", 0) or 0),
                moe_intermediate_size=int(d.get("moe_intermediate_size", 0) or 0),
                norm_topk_prob=bool(d.get("norm_topk_prob", True)),
                decoder_sparse_step=int(d.get("decoder_sparse_step", 1) or 1),
                mlp_only_layers=list(d.get("mlp_only_layers") or []),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(f"config.json is malformed: {type(e).__name__}: {e}") from None
