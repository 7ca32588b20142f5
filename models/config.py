"""The model configuration, read from an HF config.json as transformers 4 or 5 writes it.

transformers 5 renamed keys vt reads: the MoE expert count (`num_experts` -> `num_local_experts`), the
rope layout (`rope_theta` + `rope_scaling` -> one `rope_parameters` dict holding both) and the dtype
(`torch_dtype` -> `dtype`). Both layouts are read; what vt cannot serve is refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from models.registry import ARCHITECTURES
from vt.errors import CheckpointError

# transformers' default for every architecture vt serves (Llama, Qwen2, Qwen3, Qwen3-MoE): a config.json without
# rope_theta (Llama 2's) means this, not the 1e6 recent Qwen checkpoints write out
DEFAULT_ROPE_THETA = 10_000.0
ACTIVATIONS = ("silu", "swish")  # the MLP's gate activation vt's kernels compute (transformers: the same function)


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
    rope_theta: float = DEFAULT_ROPE_THETA
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
    rope_type: str = "default"  # default, llama3 (Llama 3.x) or yarn (Qwen3 long context)
    rope_scaling: dict[str, Any] = field(default_factory=dict)  # the rope type's own parameters
    dtype: str = "float32"  # the checkpoint's declared dtype (torch_dtype / dtype)

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise CheckpointError(f"architecture {self.architecture!r} is not supported (supported: {ARCHITECTURES})")
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim",
                     "num_key_value_heads"):
            if getattr(self, name) <= 0:
                raise CheckpointError(f"config.json: {name} must be > 0, got {getattr(self, name)}")
        for name in ("rope_theta", "rms_norm_eps", "max_position_embeddings"):
            if not getattr(self, name) > 0:  # also refuses NaN
                raise CheckpointError(f"config.json: {name} must be > 0, got {getattr(self, name)}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise CheckpointError(f"config.json: num_attention_heads={self.num_attention_heads} is not a multiple "
                                  f"of num_key_value_heads={self.num_key_value_heads}")
        if self.is_moe and not (0 < self.num_experts_per_tok <= self.num_experts):
            raise CheckpointError(f"config.json: num_experts_per_tok={self.num_experts_per_tok} must be in "
                                  f"[1, num_experts={self.num_experts}]")

        if self.rope_type not in ROPE_TYPES:
            raise CheckpointError(f"config.json: rope type {self.rope_type!r} is not supported (supported: "
                                  f"{', '.join(ROPE_TYPES)})")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def has_qk_norm(self) -> bool:
        """Qwen3 normalizes q and k per head; Qwen2 and Llama do not."""
        return self.architecture.startswith("Qwen3")

    @property
    def has_qkv_bias(self) -> bool:
        return self.architecture == "Qwen2ForCausalLM" or self.attention_bias  # Qwen2: always, by design

    @property
    def has_o_bias(self) -> bool:
        return self.attention_bias and self.architecture != "Qwen2ForCausalLM"

    def is_sparse_layer(self, i: int) -> bool:
        return self.is_moe and i not in self.mlp_only_layers and (i + 1) % self.decoder_sparse_step == 0

    @classmethod
    def from_hf(cls, d: dict[str, Any]) -> ModelConfig:
        archs = d.get("architectures") or []
        if not archs:
            raise CheckpointError("config.json names no architecture")
        if not isinstance(archs, list) or not isinstance(archs[0], str):  # a bare string would name its first letter
            raise CheckpointError(f"config.json: architectures {archs!r} is not a list of class names")
        try:
            heads = int(d["num_attention_heads"])
            hidden = int(d["hidden_size"])
            rope_type, rope_theta, scaling = _rope(d)
            _refuse_unsupported(d)
            config = cls(
                architecture=archs[0],
                vocab_size=int(d["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(d.get("intermediate_size", 0)),
                num_hidden_layers=int(d["num_hidden_layers"]),
                num_attention_heads=heads,
                num_key_value_heads=int(d.get("num_key_value_heads") or heads),
                head_dim=int(d.get("head_dim") or hidden // heads),
                rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
                rope_theta=rope_theta,
                max_position_embeddings=int(d.get("max_position_embeddings", 32768)),
                tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
                attention_bias=bool(d.get("attention_bias", False)),
                bos_token_id=d.get("bos_token_id"),
                num_experts=int(d.get("num_experts", d.get("num_local_experts", 0)) or 0),
                num_experts_per_tok=int(d.get("num_experts_per_tok", 0) or 0),
                moe_intermediate_size=int(d.get("moe_intermediate_size", 0) or 0),
                norm_topk_prob=bool(d.get("norm_topk_prob", True)),
                decoder_sparse_step=int(d.get("decoder_sparse_step", 1) or 1),
                mlp_only_layers=[int(x) for x in d.get("mlp_only_layers") or []],
                rope_type=rope_type,
                rope_scaling=scaling,
                dtype=str(d.get("dtype") or d.get("torch_dtype") or "float32"),
            )
        except CheckpointError:
            raise  # refused by name already: not a malformed file
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CheckpointError(f"config.json is malformed: {type(e).__name__}: {e}") from None
        eos = d.get("eos_token_id")
        config.eos_token_ids = () if eos is None else eos_ids_in_vocab(eos, "config.json", config.vocab_size)
        return config


def eos_ids_in_vocab(value: Any, where: str, vocab_size: int) -> tuple[int, ...]:
    """An eos_token_id (config.json's or generation_config.json's: an id or a list of ids) as ids of the
    vocabulary. One outside it loaded before, then failed the sampler that bans EOS ids until min_tokens (an
    IndexError that killed the engine), or banned another token by negative indexing (-1: the last one)."""
    ids = value if isinstance(value, list) else [value]
    if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab_size for i in ids):
        raise CheckpointError(f"{where}: eos_token_id {value!r} is not a token id in [0, {vocab_size}) or a list "
                              f"of them")
    return tuple(ids)


ROPE_TYPES = ("default", "llama3", "yarn")


def _rope(d: dict[str, Any]) -> tuple[str, float, dict[str, Any]]:
    """(rope type, theta, the type's parameters) from either layout: transformers 5's `rope_parameters`
    (theta inside) or transformers 4's `rope_theta` beside an optional `rope_scaling`."""
    params = d.get("rope_parameters")
    if params is None:
        scaling = d.get("rope_scaling") or {}
        if not isinstance(scaling, dict):  # dict("yarn") would fail on its letters
            raise TypeError(f"rope_scaling must be an object, got {scaling!r}")
        params = dict(scaling)
        params.setdefault("rope_theta", d.get("rope_theta", DEFAULT_ROPE_THETA))
    if not isinstance(params, dict):
        raise TypeError(f"rope parameters must be an object, got {type(params).__name__}")
    params = dict(params)
    kind = str(params.pop("rope_type", None) or params.pop("type", None) or "default")
    params.pop("type", None)
    theta = float(params.pop("rope_theta", d.get("rope_theta", DEFAULT_ROPE_THETA)))
    return kind, theta, params


def _refuse_unsupported(d: dict[str, Any]) -> None:
    layer_types = d.get("layer_types") or []
    if d.get("use_sliding_window") or any(t != "full_attention" for t in layer_types):
        raise CheckpointError("config.json: sliding-window attention (use_sliding_window / layer_types) is not "
                              "supported: vt serves full attention only")
    if d.get("mlp_bias"):
        raise CheckpointError("config.json: mlp_bias=true is not supported")
    act = d.get("hidden_act", "silu")  # transformers' default for these architectures
    if act not in ACTIVATIONS:  # vt's MLP kernels compute SiLU alone: any other would load and answer wrongly
        raise CheckpointError(f"config.json: hidden_act {act!r} is not supported: vt's MLP computes "
                              f"{' / '.join(ACTIVATIONS)} only")
