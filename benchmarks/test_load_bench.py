"""Loading a Qwen3-0.6B-shaped bf16 checkpoint (made by transformers in the setup): vt's loader against
transformers' own, wall time and peak RSS, each in a fresh process, in one run.

vt on the CPU backend keeps float32 weights (its compute dtype) in host memory, so its floor is the model
in float32 (2.4 GB); transformers keeps bf16 (1.2 GB). What matters is the excess over that floor: vt
reads tensor by tensor from a memory map, never the whole file plus the whole model at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SHAPE = dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
             num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
             max_position_embeddings=4096)

VT = """
import resource, sys, time
t = time.perf_counter()
from backends.cpu import CpuBackend
from models.loader import load_checkpoint
from models.registry import load_model
model = load_model(load_checkpoint(sys.argv[1]), CpuBackend())
print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""
HF = """
import resource, sys, time
t = time.perf_counter()
import torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.bfloat16)
print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    from tests.models.hf_checkpoints import make  # noqa: F401  (the tokenizer files come from the built-in)

    dest = tmp_path_factory.mktemp("qwen3-0.6b-shape")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(Qwen3Config(**SHAPE))
    model = model.to_empty(device="cpu").to(torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
    model.save_pretrained(dest, safe_serialization=True)
    from models.loader import resolve_model

    for f in ("tokenizer.json", "tokenizer_config.json"):
        (dest / f).write_bytes((resolve_model("tiny-qwen3") / f).read_bytes())
    return dest


def _run(code: str, path: Path) -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout.split()
    return float(out[-2]), int(out[-1])


def test_load_time_and_peak_rss_against_transformers(checkpoint: Path, capsys) -> None:
    size = sum(p.stat().st_size for p in checkpoint.glob("*.safetensors"))
    vt_s, vt_rss = _run(VT, checkpoint)
    hf_s, hf_rss = _run(HF, checkpoint)
    f32 = 2 * size  # the model in float32: vt's CPU floor
    row = {"checkpoint_GB": round(size / 1e9, 2), "vt_s": round(vt_s, 1), "vt_peak_rss_GB": round(vt_rss / 1e9, 2),
           "vt_rss_over_f32_model_GB": round((vt_rss - f32) / 1e9, 2), "hf_s": round(hf_s, 1),
           "hf_peak_rss_GB": round(hf_rss / 1e9, 2), "hf_rss_over_bf16_model_GB": round((hf_rss - size) / 1e9, 2),
           "time_vt_over_hf": round(vt_s / hf_s, 2)}
    with capsys.disabled():
        print("\n" + json.dumps(row))
    assert vt_rss > 0 and hf_rss > 0
