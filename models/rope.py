"""Rotary position embedding tables, for the rope types the supported models publish: plain RoPE,
Llama 3.x's frequency-dependent scaling (`llama3`) and YaRN (Qwen3's long context). The formulas are
those of the papers, as transformers' modeling_rope_utils computes them (inverse frequencies in float32,
then cos and sin scaled by the attention factor)."""

from __future__ import annotations

import math

import numpy as np

from models.config import ModelConfig

F32 = np.float32


def inv_freq_and_scale(c: ModelConfig) -> tuple[np.ndarray, float]:
    """Per pair of dimensions the rotation frequency, and the factor cos and sin are multiplied by."""
    dim, base = c.head_dim, c.rope_theta
    inv = (1.0 / (base ** (np.arange(0, dim, 2, dtype=np.int64) / dim))).astype(F32)
    if c.rope_type == "llama3":
        return _llama3(inv, c.rope_scaling), 1.0
    if c.rope_type == "yarn":
        return _yarn(dim, base, c)
    return inv, 1.0


def _num(p: dict, key: str, kind: str, default: float | None = None) -> float:
    """A rope parameter as a positive number, or a CheckpointError naming it."""
    from vt.errors import CheckpointError

    v = p.get(key, default)
    if v is None:
        raise CheckpointError(f"config.json: {kind} rope scaling needs {key!r}")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or not math.isfinite(v):
        raise CheckpointError(f"config.json: {kind} rope scaling {key}={v!r}: expected a positive number")
    return float(v)


def _llama3(inv: np.ndarray, p: dict) -> np.ndarray:
    factor, low, high = (_num(p, k, "llama3") for k in ("factor", "low_freq_factor", "high_freq_factor"))
    old_len = _num(p, "original_max_position_embeddings", "llama3")
    if high <= low:
        from vt.errors import CheckpointError

        raise CheckpointError(f"config.json: llama3 rope scaling high_freq_factor={high} must exceed "
                              f"low_freq_factor={low}")
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > old_len / low, inv / factor, inv)  # long wavelengths: interpolate fully
    smooth = (old_len / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return np.where(is_medium, blended, scaled).astype(F32)


def _yarn(dim: int, base: float, c: ModelConfig) -> tuple[np.ndarray, float]:
    p = c.rope_scaling
    # as transformers reads YaRN: the original context defaults to max_position_embeddings
    old_len = _num(p, "original_max_position_embeddings", "yarn", c.max_position_embeddings)
    factor = _num(p, "factor", "yarn", c.max_position_embeddings / old_len)
    scale = _num(p, "attention_factor", "yarn") if p.get("attention_factor") is not None else None
    if scale is None:
        mscale, mscale_all = (_num(p, k, "yarn") if p.get(k) is not None else None
                              for k in ("mscale", "mscale_all_dim"))
        m = (lambda s, k=1.0: 1.0 if s <= 1 else 0.1 * k * math.log(s) + 1.0)  # noqa: E731
        scale = m(factor, mscale) / m(factor, mscale_all) if mscale and mscale_all else m(factor)
    beta_fast, beta_slow = _num(p, "beta_fast", "yarn", 32), _num(p, "beta_slow", "yarn", 1)

    def correction_dim(rotations: float) -> float:
        return dim * math.log(old_len / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if p.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    pos_freqs = base ** (np.arange(0, dim, 2, dtype=F32) / F32(dim))
    ramp = np.clip((np.arange(dim // 2, dtype=F32) - low) / (high - low), 0, 1)
    extrapolate = 1 - ramp  # high frequencies keep their rotation; low ones are interpolated
    inv = (1.0 / (factor * pos_freqs)) * (1 - extrapolate) + (1.0 / pos_freqs) * extrapolate
    return inv.astype(F32), float(scale)


def rope_table(c: ModelConfig) -> np.ndarray:
    """One row per position: cos | sin with rotate_half's sign folded in (-sin on the first half)."""
    inv, scale = inv_freq_and_scale(c)
    ang = np.outer(np.arange(c.max_position_embeddings, dtype=F32), inv)
    cos, sin = np.cos(ang) * F32(scale), np.sin(ang) * F32(scale)
    return np.concatenate([cos, cos, -sin, sin], axis=-1).astype(F32)
