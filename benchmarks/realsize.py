"""Real-size shapes for the GPU lane's figures (scripts/decode-figures, scripts/profile-decode): random-weight
bf16 checkpoints in the shapes of Qwen3-0.6B, Qwen3-8B and 8 layers of Qwen3-30B-A3B written by transformers on
the device, and a decode step's inputs for B rows at a given context (the KV is whatever the cache holds: speed
does not depend on it)."""

from __future__ import annotations

import os

import numpy as np

V = 151_936
BW = 4.3e12  # bytes/s: the copy bandwidth measured on these H200s (shared/device-facts.md)
SHAPES = {
    "0.6B": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, tie_word_embeddings=True),
    "8B": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
               num_key_value_heads=8, tie_word_embeddings=False),
    # Qwen3-30B-A3B's layer (128 experts, top 8, expert width 768), 8 layers of its 48
    "30B-A3B-8L": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=8, num_attention_heads=32,
                       num_key_value_heads=4, tie_word_embeddings=False, num_experts=128, num_experts_per_tok=8,
                       moe_intermediate_size=768, norm_topk_prob=True, decoder_sparse_step=1),
}


def touched_bytes(shape: dict, dtype_bytes: int = 2) -> int:
    """The weight bytes one token's decode step reads: embedding row, attention, norms, router, its top-k experts
    (all of a dense MLP) and the LM head. A dense shape's is its whole weight but the embedding."""
    H, L, hd = shape["hidden_size"], shape["num_hidden_layers"], 128
    attn = H * hd * (2 * shape["num_attention_heads"] + 2 * shape["num_key_value_heads"]) + 2 * hd + 2 * H
    if shape.get("num_experts"):
        mlp = shape["num_experts"] * H + shape["num_experts_per_tok"] * 3 * H * shape["moe_intermediate_size"]
    else:
        mlp = 3 * H * shape["intermediate_size"]
    return dtype_bytes * (H + L * (attn + mlp) + V * H + H)


def make_checkpoint(path: str, shape: dict) -> int:
    """Writes the checkpoint (once) and a word-level tokenizer; returns its weight bytes."""
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    if not os.path.exists(os.path.join(path, "config.json")):
        kind = "Qwen3Moe" if shape.get("num_experts") else "Qwen3"
        cfg = getattr(transformers, f"{kind}Config")(vocab_size=V, rope_theta=1e6, rms_norm_eps=1e-6,
                                                     max_position_embeddings=16384, bos_token_id=0, eos_token_id=1,
                                                     head_dim=128, **shape)
        torch.manual_seed(0)
        with torch.device("cuda"):
            m = getattr(transformers, f"{kind}ForCausalLM")(cfg).eval().to(torch.bfloat16)
        m.save_pretrained(path, safe_serialization=True)
        tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(V)}, unk_token="t2"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.save(os.path.join(path, "tokenizer.json"))
        del m
        torch.cuda.empty_cache()
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".safetensors"))


def add_model_args(ap) -> None:
    """The GPU-lane scripts' model options: a checkpoint or built-in name, or a real-size shape written once."""
    ap.add_argument("--model", help="a checkpoint directory or a built-in name (default: the --shape checkpoint)")
    ap.add_argument("--shape", default="0.6B", choices=list(SHAPES), help="written under --dir when --model is unset")
    ap.add_argument("--dir", default="/tmp/vt-realsize", help="where the --shape checkpoint is written")


def model_path(args) -> str:
    """--model, or the --shape checkpoint under --dir (written on first use, on the GPU)."""
    if args.model is not None:
        return args.model
    path = os.path.join(args.dir, args.shape)
    make_checkpoint(path, SHAPES[args.shape])
    return path


def decode_inputs(kv, B: int, ctx: int, seed: int = 0):
    """B rows, each at position ctx - 1 over its own blocks 0.. (tables of exactly what the context needs)."""
    from vt.engine.worker.graph_driver import DecodeInputs

    bs = kv.block_size
    per = -(-(ctx + 1) // bs)
    tables = np.arange(B * per, dtype=np.int64).reshape(B, per)
    slots = np.array([kv.slot(tables[i], ctx - 1) for i in range(B)], np.int64)
    tokens = np.random.default_rng(seed).integers(3, V, B).astype(np.int64)
    return DecodeInputs(tokens, np.full(B, ctx - 1, np.int64), slots, tables)


def blocks_for(shapes: list[tuple[int, int]], block_size: int = 16) -> int:
    return max(B * (-(-(ctx + 1) // block_size)) for B, ctx in shapes) + 8
