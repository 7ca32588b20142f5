"""Built-in tiny checkpoints, written on first use to a cache directory in the HF format, so the same
loading code serves them and a real checkpoint directory.

Weights are seeded; the tokenizer is a real byte-level BPE trained (deterministically) on a small
corpus below; the chat template is Qwen's ChatML shape.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

VOCAB = 512
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = """
The engine schedules requests in steps. Each step either prefills new prompts or decodes one token
for every running request. A request holds blocks of the key value cache; when the cache runs short
the newest request is preempted and recomputed later. A decode step at a fixed batch shape is
captured once as a graph and replayed, so the host launches one graph instead of many kernels.
Memory for a captured step must exist before the capture begins: the pool measures what a step
needs and grows to it. Hello world, the quick brown fox jumps over the lazy dog. Once upon a time
there was a small model that wanted to speak. It counted one, two, three, four, five, six, seven.
What is the capital of France? Paris is the capital of France. def main(): return 0
"""

_DENSE: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
    "vocab_size": VOCAB, "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "hidden_act": "silu",
    "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None, "max_position_embeddings": 32768,
    "tie_word_embeddings": True, "attention_bias": False, "attention_dropout": 0.0,
    "use_sliding_window": False, "torch_dtype": "float32", "bos_token_id": 0, "eos_token_id": 0,
}
_MOE = dict(_DENSE, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", tie_word_embeddings=False,
            num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64, norm_topk_prob=True,
            decoder_sparse_step=1, mlp_only_layers=[], output_router_logits=False, router_aux_loss_coef=0.001)
# The draft: the target's first two layers, sharing its embeddings, final norm and LM head.
_DRAFT = dict(_DENSE, num_hidden_layers=2)
DEEP_LAYER_SCALE = 0.15  # residual-branch scale of layers >= 2 (measured: ~48% greedy acceptance at k=4)

SPECS: dict[str, tuple[dict[str, Any], int, str | None]] = {
    "tiny-qwen3": (_DENSE, 1234, None),
    "tiny-qwen3-moe": (_MOE, 4321, None),
    "tiny-qwen3-draft": (_DRAFT, 1234, "tiny-qwen3"),
}
GENERATION_CONFIG = {"bos_token_id": 0, "eos_token_id": [0, 2], "pad_token_id": 0, "do_sample": True,
                     "temperature": 0.6, "top_k": 20, "top_p": 0.95}


def _weights(cfg: dict[str, Any], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    H, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]

    def lin(out: int, inp: int) -> np.ndarray:
        return (2.0 * rng.standard_normal((out, inp)) / np.sqrt(inp)).astype(np.float32)  # chaotic enough to not loop

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    emb = (0.5 * rng.standard_normal((V, H))).astype(np.float32)  # small: layers, not the token, dominate
    w = {"model.embed_tokens.weight": emb, "model.norm.weight": norm(H)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w |= {p + "input_layernorm.weight": norm(H), p + "post_attention_layernorm.weight": norm(H),
              p + "self_attn.q_proj.weight": lin(nh * hd, H), p + "self_attn.k_proj.weight": lin(nkv * hd, H),
              p + "self_attn.v_proj.weight": lin(nkv * hd, H), p + "self_attn.o_proj.weight": lin(H, nh * hd),
              p + "self_attn.q_norm.weight": norm(hd), p + "self_attn.k_norm.weight": norm(hd)}
        # Qwen3-MoE's rule: a layer is sparse unless mlp_only_layers names it or decoder_sparse_step skips it
        if (cfg.get("num_experts") and i not in cfg.get("mlp_only_layers", [])
                and (i + 1) % cfg.get("decoder_sparse_step", 1) == 0):
            E, MI = cfg["num_experts"], cfg["moe_intermediate_size"]
            w[p + "mlp.gate.weight"] = lin(E, H)
            for e in range(E):
                q = f"{p}mlp.experts.{e}."
                w |= {q + "gate_proj.weight": lin(MI, H), q + "up_proj.weight": lin(MI, H),
                      q + "down_proj.weight": lin(H, MI)}
        else:
            w |= {p + "mlp.gate_proj.weight": lin(I, H), p + "mlp.up_proj.weight": lin(I, H),
                  p + "mlp.down_proj.weight": lin(H, I)}
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = lin(V, H)
    for k in w:  # deeper layers refine what the first two decide: a truncated target drafts well
        if k.startswith("model.layers.") and int(k.split(".")[2]) >= 2 and k.endswith(("o_proj.weight",
                                                                                        "down_proj.weight")):
            w[k] = w[k] * DEEP_LAYER_SCALE
    return w


def _tokenizer_json() -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([CORPUS] * 4, trainer=trainer)
    return tok.to_str()


def _write(name: str, dest: Path) -> None:
    from safetensors.numpy import save_file

    cfg, seed, shares = SPECS[name]
    weights = _weights(SPECS[shares][0] if shares else cfg, seed)
    if shares:  # a truncated target: keep what the draft's config has layers for
        keep = {f"model.layers.{i}." for i in range(cfg["num_hidden_layers"])}
        weights = {k: v for k, v in weights.items() if not k.startswith("model.layers.") or
                   any(k.startswith(p) for p in keep)}
    (dest / "config.json").write_text(json.dumps(cfg, indent=1))
    (dest / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=1))
    save_file(weights, str(dest / "model.safetensors"), metadata={"format": "pt"})
    (dest / "tokenizer.json").write_text(_tokenizer_json())
    (dest / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "chat_template": CHAT_TEMPLATE, "model_max_length": cfg["max_position_embeddings"]}, indent=1))


def ensure(name: str, cache_dir: str | None = None) -> Path:
    """The checkpoint directory for a built-in model, written atomically on first use."""
    from vt.env import flags

    root = Path(cache_dir or flags().cache_dir) / "checkpoints"
    final = root / name
    if (final / "model.safetensors").is_file():
        return final
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    except OSError as e:
        from vt.errors import ConfigError

        raise ConfigError(f"VT_CACHE_DIR: cannot write the built-in checkpoint {name!r} under {root}: "
                          f"{e.strerror or e}") from None
    try:
        _write(name, tmp)
        try:
            os.replace(tmp, final)
        except OSError:  # another process won the race; its copy is identical
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
