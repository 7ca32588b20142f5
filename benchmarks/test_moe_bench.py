"""Routed MoE on the CPU: a decode step's cost against the number of experts at a fixed top-k (issue 27).

Two checkpoints alike but for their expert count (8 and 64, top-2), timed in one run, interleaved; the ratio
(64 over 8) is what to read: when every expert ran on every token it was about 8. Run:

    pytest benchmarks/test_moe_bench.py --benchmark-only -s
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from models import tiny

EXPERT_COUNTS = (8, 64)
SHAPE = dict(hidden_size=256, moe_intermediate_size=512, num_experts_per_tok=2, num_hidden_layers=2)


def write_checkpoint(dest: Path, num_experts: int) -> Path:
    from safetensors.numpy import save_file

    cfg = dict(tiny.SPECS["tiny-qwen3-moe"][0], num_experts=num_experts, **SHAPE)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.json").write_text(json.dumps(cfg))
    save_file(tiny._weights(cfg, seed=7), str(dest / "model.safetensors"))
    src = tiny.ensure("tiny-qwen3-moe")
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(src / name, dest / name)
    return dest


def decode_driver(path: Path, batch: int, ctx: int = 64):
    from backends.cpu import CpuBackend
    from models.loader import load_checkpoint
    from models.registry import load_model
    from vt.engine.worker.graph_driver import DecodeInputs, GraphDriver

    model = load_model(load_checkpoint(path), CpuBackend(), "float32")
    bs, per = 16, -(-(ctx + 1) // 16)
    kv = model.make_kv_cache(batch * per + 4, bs)
    tables = np.arange(batch * per, dtype=np.int64).reshape(batch, per)
    slots = np.array([kv.slot(tables[i], ctx - 1) for i in range(batch)], np.int64)
    tokens = np.random.default_rng(0).integers(3, model.cfg.vocab_size, batch).astype(np.int64)
    inputs = DecodeInputs(tokens, np.full(batch, ctx - 1, np.int64), slots, tables)
    driver = GraphDriver(model, kv, max_num_seqs=batch)
    for _ in range(3):
        driver.step(inputs)
    return driver, inputs


@pytest.mark.parametrize("batch", [1, 8])
def test_decode_step_cost_against_the_expert_count(benchmark, tmp_path: Path, batch: int) -> None:
    runs = {E: decode_driver(write_checkpoint(tmp_path / f"e{E}", E), batch) for E in EXPERT_COUNTS}
    times: dict[int, list[float]] = {E: [] for E in EXPERT_COUNTS}
    for _ in range(30):  # interleaved: the machine's drift hits both alike
        for E, (driver, inputs) in runs.items():
            t = time.perf_counter()
            driver.step(inputs)
            times[E].append(time.perf_counter() - t)
    med = {E: float(np.median(ts)) * 1e3 for E, ts in times.items()}
    ratio = med[64] / med[8]
    benchmark.group = f"MoE decode step B={batch}"
    benchmark.extra_info.update({f"median_ms_{E}_experts": round(m, 3) for E, m in med.items()})
    benchmark.extra_info["ratio_64_over_8"] = round(ratio, 3)
    print(f"\nMoE decode step B={batch}: 8 experts {med[8]:.3f} ms, 64 experts {med[64]:.3f} ms, ratio {ratio:.2f} "
          f"(top-2; the expert weights differ 8x)")
    driver, inputs = runs[64]
    benchmark(driver.step, inputs)
