"""A low-precision model holds half the bytes: GEMM weights, the embedding and the KV cache in two bytes a value.
Apart from test_architectures.py, whose tests build checkpoints with transformers: this test's mutant needs none
of that."""

from __future__ import annotations

import pytest

from backends.cpu import CpuBackend
from models.loader import load_checkpoint
from models.registry import load_model


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_low_precision_model_holds_half_the_bytes(dtype: str) -> None:
    """Every GEMM weight, the embedding and the KV cache in two bytes a value; norms and biases (a few
    kilobytes) stay float32."""
    from models.loader import resolve_model

    ckpt = load_checkpoint(resolve_model("tiny-qwen3"))
    full, low = (load_model(ckpt, CpuBackend(), d) for d in ("float32", dtype))
    small = {k for k in full.w if k.rsplit(".", 1)[-1] in ("norm", "ln1", "ln2", "qk_norm", "qkv_b", "o_b")}
    assert small and len(small) < len(full.w), "non-vacuity: both kinds of tensor are present"
    for k, t in full.w.items():
        assert low.w[k].nbytes == (t.nbytes if k in small else t.nbytes // 2), k
    kv_full, kv_low = full.make_kv_cache(4, 16), low.make_kv_cache(4, 16)
    assert kv_low.k[0].nbytes * 2 == kv_full.k[0].nbytes and kv_low.v[0].nbytes * 2 == kv_full.v[0].nbytes
