"""A Qwen3-0.6B-shaped bf16 checkpoint (random weights, made by transformers on the device) on the CUDA
backend (GPU lane), run by vt in bf16 (cuBLAS GemmEx, bf16 KV cache) and in float32 (the same weights
widened exactly): greedy tokens against transformers in bf16 and float32 on the same GPU, and vt's
decode TPOT in each dtype (their ratio, one run) beside the weight-read floor; and the graphed step with
Qwen3's sampling defaults (temperature 0.6, top-k 20, top-p 0.95, in the graph) against greedy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.test_load_bench import SHAPE

pytestmark = pytest.mark.gpu
PROMPT = [int(x) for x in np.random.default_rng(0).integers(3, 151_000, 128)]
NUM_TOKENS = 32
H200_BW = 4.3e12


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    from models.loader import resolve_model

    dest = tmp_path_factory.mktemp("qwen3-0.6b-bf16")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(Qwen3Config(**SHAPE, initializer_range=0.05)).to("cuda", torch.bfloat16)
    model.save_pretrained(dest, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (dest / f).write_bytes((resolve_model("tiny-qwen3") / f).read_bytes())
    return dest


def _hf_greedy(path: Path, dtype: str) -> tuple[list[int], np.ndarray]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype)).to("cuda").eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([PROMPT], device="cuda"), max_new_tokens=NUM_TOKENS, do_sample=False,
                             min_new_tokens=NUM_TOKENS, output_logits=True, return_dict_in_generate=True)
    first = out.logits[0][0].float().cpu().numpy()
    return out.sequences[0, len(PROMPT):].tolist(), first


def _vt_run(path: Path, dtype: str, **sampling) -> tuple[list[int], float, float]:
    from vt import LLM, SamplingParams

    llm = LLM(model=str(path), backend="cuda", dtype=dtype, max_model_len=512, num_blocks=64)
    sp = SamplingParams(**({"temperature": 0} | sampling), max_tokens=NUM_TOKENS, ignore_eos=True)
    llm.generate([PROMPT], sp)  # warm: capture the decode graph
    out = llm.generate([PROMPT], sp)[0]
    tpot = (out.latency_s - out.ttft_s) / (len(out.token_ids) - 1)
    del llm
    return out.token_ids, tpot, out.ttft_s


def _agree(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def test_bf16_checkpoint_on_cuda_against_transformers(checkpoint: Path, capsys) -> None:
    vt_bf16, tpot_bf16, ttft_bf16 = _vt_run(checkpoint, "bfloat16")
    vt_f32, tpot_f32, ttft_f32 = _vt_run(checkpoint, "float32")
    _, tpot_sampled, _ = _vt_run(checkpoint, "bfloat16", temperature=0.6, top_k=20, top_p=0.95, seed=0)
    hf_bf16, _ = _hf_greedy(checkpoint, "bfloat16")
    hf_f32, _ = _hf_greedy(checkpoint, "float32")
    weight_bytes_bf16 = sum(p.stat().st_size for p in checkpoint.glob("*.safetensors"))
    row = {"vt_bf16_vs_hf_bf16_agree": _agree(vt_bf16, hf_bf16), "vt_f32_vs_hf_f32_agree": _agree(vt_f32, hf_f32),
           "vt_bf16_vs_vt_f32_agree": _agree(vt_bf16, vt_f32), "hf_f32_vs_hf_bf16_agree": _agree(hf_f32, hf_bf16),
           "of": NUM_TOKENS, "vt_tpot_ms_bf16": round(1e3 * tpot_bf16, 3), "vt_tpot_ms_f32": round(1e3 * tpot_f32, 3),
           "tpot_bf16_over_f32": round(tpot_bf16 / tpot_f32, 3),
           "vt_tpot_ms_bf16_qwen3_sampling": round(1e3 * tpot_sampled, 3),
           "tpot_sampling_over_greedy": round(tpot_sampled / tpot_bf16, 3),
           "vt_ttft_ms_bf16": round(1e3 * ttft_bf16, 1),
           "vt_ttft_ms_f32": round(1e3 * ttft_f32, 1), "floor_ms_bf16": round(1e3 * weight_bytes_bf16 / H200_BW, 3),
           "floor_ms_f32": round(2e3 * weight_bytes_bf16 / H200_BW, 3)}
    with capsys.disabled():
        print("\n" + json.dumps(row))
    assert row["vt_bf16_vs_hf_bf16_agree"] >= 1, "the first token agrees with transformers in bf16"
    assert row["vt_f32_vs_hf_f32_agree"] >= 1, "the first token agrees with transformers in float32"
