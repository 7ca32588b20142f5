"""Every supported architecture against HF transformers on checkpoints transformers made: Qwen3 (YaRN
rope), Qwen3-MoE, Qwen2 (q/k/v bias) and Llama 3 (llama3 rope scaling); both config layouts; BF16
checkpoints; the dtype choice."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from backends.cpu import CpuBackend
from models.base import prefill
from models.config import ModelConfig
from models.loader import load_checkpoint
from models.registry import load_model
from seams.lanes import is_bypass_lane
from tests.helpers import guarding
from tests.models.hf_checkpoints import ARCHS, as_transformers4, make
from vt.engine.worker.graph_driver import DecodeInputs, GraphDriver
from vt.errors import CheckpointError, ConfigError

TOL = 1e-4
PROMPT = [5, 77, 300, 12, 9, 400, 33, 250, 18, 101, 7, 64, 3, 222, 45, 90, 311, 17]
NUM_TOKENS = 24


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hf")


def hf_greedy(path: Path, n: int, dtype: str = "float32") -> tuple[list[int], np.ndarray]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype)).eval()
    ids, rows = list(PROMPT), []
    with torch.no_grad():
        for _ in range(n):
            rows.append(model(torch.tensor([ids])).logits[0, -1].float().numpy())
            ids.append(int(rows[-1].argmax()))
    return ids[len(PROMPT):], np.stack(rows)


def vt_greedy(path: Path, n: int, dtype: str = "float32", backend: object = None) -> tuple[list[int], np.ndarray]:
    """Prefill, then decode steps replayed from captured graphs (the engine's path). The checkpoint is one
    transformers saved (and loads): vt refusing it is the broken guarantee, not a crash of the test."""
    with guarding(f"vt loads the checkpoint transformers saved at {path.name}", CheckpointError, ConfigError):
        model = load_model(load_checkpoint(path), backend or CpuBackend(), dtype)
    kv = model.make_kv_cache(num_blocks=8, block_size=16)
    table = [5, 2, 7, 0]  # non-contiguous: the block table is really read
    rows = [prefill(model, [(PROMPT, table)], kv)[0]]
    driver = GraphDriver(model, kv, max_num_seqs=2)
    ids = [*PROMPT, int(rows[0].argmax())]
    for _ in range(n - 1):
        p = len(ids) - 1
        inp = DecodeInputs(np.array([ids[-1]]), np.array([p]), np.array([kv.slot(table, p)]), np.array([table]))
        sampled = int(driver.step(inp).ids[0])  # the device sampler, greedy
        rows.append(driver.last_logits()[0])
        assert sampled == int(rows[-1].argmax())
        ids.append(sampled)
    assert driver.num_replays > 0 or is_bypass_lane(), "non-vacuity: decode steps replayed a graph"
    return ids[len(PROMPT):], np.stack(rows)


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_tokens_and_logits_match_transformers(arch: str, root: Path) -> None:
    path = make(arch, root)
    want_tokens, want = hf_greedy(path, NUM_TOKENS)
    got_tokens, got = vt_greedy(path, NUM_TOKENS)
    assert len(set(want_tokens)) > 3, "non-vacuity: the model does not just repeat one token"
    err = np.abs(got - want).max(axis=-1)
    assert (err < TOL).all(), f"{arch}: logits differ from transformers by {err.max():.2e} (step {err.argmax()})"
    assert got_tokens == want_tokens


@pytest.mark.gpu
@pytest.mark.parametrize("arch", ARCHS)
def test_cuda_greedy_tokens_and_logits_match_transformers(arch: str, root: Path) -> None:
    """The CUDA kernels (the fused q/k norm + rotary with each rope variant's table, paged decode attention)
    against transformers, not against their twins: what a shared mistake in both would still get wrong."""
    from backends.cuda import CudaBackend

    path = make(arch, root)
    want_tokens, want = hf_greedy(path, NUM_TOKENS)
    got_tokens, got = vt_greedy(path, NUM_TOKENS, backend=CudaBackend())
    err = np.abs(got - want).max(axis=-1)
    assert (err < 1e-3).all(), f"{arch}: CUDA logits differ from transformers by {err.max():.2e} (step {err.argmax()})"
    assert got_tokens == want_tokens


@pytest.mark.parametrize("arch, dtype", [(a, "float32") for a in ARCHS] + [("llama3", "bfloat16")])
def test_both_config_layouts_read_the_same(arch: str, dtype: str, root: Path) -> None:
    """transformers 5 writes rope_parameters, num_local_experts and dtype; transformers 4 wrote
    rope_theta + rope_scaling, num_experts and torch_dtype. Both must read as one config."""
    t5 = make(arch, root, dtype)
    t4 = as_transformers4(t5, root / f"{arch}-{dtype}-t4")
    d5, d4 = (json.loads((p / "config.json").read_text()) for p in (t5, t4))
    assert "rope_parameters" in d5 and "rope_parameters" not in d4 and "torch_dtype" in d4, "non-vacuity"
    c5, c4 = ModelConfig.from_hf(d5), ModelConfig.from_hf(d4)
    assert c5 == c4
    assert c5.dtype == dtype and (c5.num_experts > 0) == (arch == "qwen3-moe")


@pytest.mark.parametrize("arch", ["qwen3-yarn", "llama3"])
def test_a_bf16_checkpoint_widens_exactly(arch: str, root: Path) -> None:
    """vt computes a BF16 checkpoint in float32 on the CPU: against transformers on the same bf16 weights
    in float32 it agrees as tightly as a float32 checkpoint does; against transformers in bf16 the first
    tokens agree and the logit difference is reported."""
    path = make(arch, root, "bfloat16")
    assert json.loads((path / "config.json").read_text())["dtype"] == "bfloat16", "non-vacuity: a bf16 checkpoint"
    got_tokens, got = vt_greedy(path, NUM_TOKENS)
    want_tokens, want = hf_greedy(path, NUM_TOKENS, "float32")
    assert np.abs(got - want).max() < TOL and got_tokens == want_tokens
    bf_tokens, bf = hf_greedy(path, 4, "bfloat16")
    diff = float(np.abs(got[:4] - bf).max())
    print(f"\n[{arch} bf16] vt float32 compute vs transformers bf16: first tokens {got_tokens[:4]} vs {bf_tokens}, "
          f"max logit difference {diff:.3e}")
    assert got_tokens[:2] == bf_tokens[:2]


@pytest.mark.parametrize("arch", ARCHS)
def test_dtype_bfloat16_computes_as_transformers_bf16_does(arch: str, root: Path) -> None:
    """dtype=bfloat16: weights and KV cache held in bf16, GEMM operands rounded, float32 accumulation (the
    CUDA path's numerics, run here on the CPU). Against transformers in bf16 the first tokens agree and
    the logit difference is reported."""
    path = make(arch, root, "bfloat16")
    got_tokens, got = vt_greedy(path, 4, dtype="bfloat16")
    _, exact = vt_greedy(path, 4)
    want_tokens, want = hf_greedy(path, 4, "bfloat16")
    diff, drift = float(np.abs(got - want).max()), float(np.abs(got - exact).max())
    print(f"\n[{arch}] vt bf16 vs transformers bf16: tokens {got_tokens} vs {want_tokens}, max logit difference "
          f"{diff:.3e} (vt bf16 vs vt float32: {drift:.3e})")
    assert drift > 1e-4, "non-vacuity: bf16 storage changed the logits"
    assert got_tokens == want_tokens


def test_dtype_bfloat16_rounds_float32_weights_as_torch_does(root: Path) -> None:
    """A float32 checkpoint run with dtype=bfloat16 rounds its weights to nearest even, as torch's cast
    does: it runs exactly as the same checkpoint saved by transformers in bf16."""
    f32, bf16 = make("qwen2", root), make("qwen2", root, "bfloat16")
    _, rounded = vt_greedy(f32, 4, dtype="bfloat16")
    _, saved = vt_greedy(bf16, 4, dtype="bfloat16")
    _, exact = vt_greedy(f32, 4)
    assert np.array_equal(rounded, saved)
    assert not np.array_equal(rounded, exact), "non-vacuity: the rounding changed the logits"


def test_dtype_choice_is_resolved_per_backend() -> None:
    """auto: the checkpoint's dtype on CUDA, float32 on the CPU; an explicit choice is kept on both."""
    from vt.engine.config import resolve_dtype

    assert resolve_dtype("auto", "bfloat16", "cpu") == "float32"
    assert resolve_dtype("auto", "bfloat16", "cuda") == "bfloat16"
    assert resolve_dtype("auto", "float16", "cuda") == "float16"
    assert resolve_dtype("bfloat16", "float32", "cpu") == "bfloat16"
    assert resolve_dtype("float32", "bfloat16", "cuda") == "float32"


def test_a_sharded_checkpoint_loads_as_its_single_file_twin(root: Path, tmp_path: Path) -> None:
    """transformers shards a checkpoint (an index and several files): vt reads the same tensors from them."""
    import shutil

    from transformers import AutoModelForCausalLM

    single = make("qwen2", root)
    sharded = tmp_path / "sharded"
    AutoModelForCausalLM.from_pretrained(str(single)).save_pretrained(sharded, max_shard_size="300KB")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(single / f, sharded / f)
    assert (sharded / "model.safetensors.index.json").is_file() and len(list(sharded.glob("*.safetensors"))) >= 2, (
        "non-vacuity: the checkpoint really is sharded")
    tokens, logits = vt_greedy(sharded, 4)
    want_tokens, want = vt_greedy(single, 4)
    assert tokens == want_tokens and np.array_equal(logits, want)


@pytest.mark.parametrize("arch", ["qwen2", "llama3", "qwen3-moe"])
def test_a_config_without_rope_theta_takes_transformers_default(arch: str, root: Path, tmp_path: Path) -> None:
    """Llama 2's config.json has no rope_theta: transformers then rotates by 10,000 (every architecture vt serves),
    and so must vt (it took 1e6 and answered wrongly from the first rotated position on)."""
    import shutil

    src = make(arch, root)
    dest = tmp_path / f"{arch}-no-theta"
    shutil.copytree(src, dest)
    d = json.loads((dest / "config.json").read_text())
    d.pop("rope_parameters", None), d.pop("rope_theta", None), d.pop("rope_scaling", None)
    (dest / "config.json").write_text(json.dumps(d))
    want_tokens, want = hf_greedy(dest, 8)
    assert len(set(want_tokens)) > 2, "non-vacuity: the model does not just repeat one token"
    got_tokens, got = vt_greedy(dest, 8)
    err = np.abs(got - want).max(axis=-1)
    assert (err < TOL).all(), f"{arch} without rope_theta: logits differ from transformers by {err.max():.2e}"
    assert got_tokens == want_tokens
