"""Tensor parallelism on the CPU, across real processes (torch.distributed, gloo): TP = 2 generates the
tokens TP = 1 does (float32, greedy), for dense, MoE, q/k/v-bias, tied-embedding and one-KV-head
checkpoints written by transformers; a dead worker fails the engine within a bounded time, by name; a
model that cannot be split is refused before any process starts."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from vt.engine.front.llm import LLM
from vt.engine.sample.params import SamplingParams
from vt.errors import ConfigError, WorkerDied

pytest.importorskip("torch.distributed")

PROMPTS = [{"prompt_token_ids": [5 + i, 17, 99, 3 * i + 1] * (3 + i)} for i in range(4)]
GREEDY = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True, logprobs=1)
KW = dict(max_model_len=128, num_blocks=64, max_num_batched_tokens=32)  # chunked prefills and mixed steps too


@pytest.fixture(scope="module")
def hf_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hf-tp")


def _generate(model: str, tp: int) -> tuple[list[list[int]], list[float]]:
    llm = LLM(model, tensor_parallel_size=tp, **KW)
    try:
        outs = llm.generate(PROMPTS, GREEDY)
    finally:
        llm.engine.close()
    return [o.outputs[0].token_ids for o in outs], [o.outputs[0].cumulative_logprob for o in outs]


def _model(name: str, hf_root: Path) -> str:
    if name.startswith("tiny-"):
        return name
    from tests.models.hf_checkpoints import make

    return str(make(name, hf_root))


@pytest.mark.parametrize("name", ["tiny-qwen3", "tiny-qwen3-moe", "qwen2", "llama3", "qwen2-mqa"])
def test_tp2_generates_the_tokens_tp1_does(name: str, hf_root: Path) -> None:
    model = _model(name, hf_root)
    one, lp_one = _generate(model, 1)
    two, lp_two = _generate(model, 2)
    assert two == one, "TP = 2 and TP = 1 generate the same greedy tokens"
    np.testing.assert_allclose(lp_two, lp_one, rtol=0, atol=1e-3)
    assert len({tuple(t) for t in one}) == len(PROMPTS), "non-vacuity: the prompts generate different tokens"


def test_tp4_replicates_the_kv_heads_and_generates_the_tokens_tp1_does() -> None:
    """tiny-qwen3 has 2 KV heads for 4 query heads: over 4 ranks each rank keeps the KV head its query head
    reads (ranks 0 and 1 head 0, ranks 2 and 3 head 1)."""
    one, _ = _generate("tiny-qwen3", 1)
    four, _ = _generate("tiny-qwen3", 4)
    assert four == one, "TP = 4 and TP = 1 generate the same greedy tokens"


def test_a_model_that_cannot_be_split_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="num_attention_heads=4 is not divisible"):
        LLM("tiny-qwen3", tensor_parallel_size=3, **KW)
    with pytest.raises(ConfigError, match=r"tensor_parallel_size=9: must be an int in \[1, 8\]"):
        LLM("tiny-qwen3", tensor_parallel_size=9, **KW)


def test_a_killed_worker_fails_the_engine_within_bounded_time_by_name() -> None:
    llm = LLM("tiny-qwen3", tensor_parallel_size=2, max_model_len=2048, num_blocks=256)
    worker = llm.engine.workers.procs[0]
    long = SamplingParams(max_tokens=1500, temperature=0.0, ignore_eos=True)
    caught: dict[str, BaseException] = {}
    started = threading.Event()

    def run() -> None:
        started.set()
        try:
            llm.generate([{"prompt_token_ids": [5, 6, 7]}], long)
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            caught["e"] = e

    t = threading.Thread(target=run)
    t.start()
    assert started.wait(10)
    time.sleep(0.5)  # mid-generation
    assert t.is_alive(), "non-vacuity: the request is still generating when the worker dies"
    os.kill(worker.pid, signal.SIGKILL)
    killed = time.monotonic()
    t.join(30)
    took = time.monotonic() - killed
    assert not t.is_alive(), "the engine noticed: no hang"
    assert isinstance(caught.get("e"), WorkerDied), f"a WorkerDied, not {caught.get('e')!r}"
    assert "rank 1" in str(caught["e"]) and "exit code -9" in str(caught["e"])
    assert took < 15, f"found after {took:.1f} s"
    with pytest.raises(WorkerDied):  # and the engine stays refused: no step runs without the shard
        llm.engine.step() if llm.engine.has_unfinished() else llm.engine.workers.check_alive()
    llm.engine.close()


@pytest.mark.parametrize("name, size", [("tiny-qwen3-moe", 2), ("qwen2", 2), ("qwen2-mqa", 2), ("tiny-qwen3", 4)])
def test_the_ranks_slices_tile_every_tensor(name: str, size: int, hf_root: Path) -> None:
    """Each rank reads its slice from the memory map: put back together along the split axis, the slices
    are the checkpoint's tensor (the vocabulary's padding past V is zeros); a replicated KV head is the one
    its rank's query heads read; everything else is whole on every rank."""
    from models.loader import load_checkpoint, resolve_model
    from models.shard import ShardedWeights
    from vt.parallel import Shard

    ckpt = load_checkpoint(resolve_model(_model(name, hf_root)))
    c, full = ckpt.config, ckpt.weights
    ranks = [ShardedWeights(full, c, Shard(r, size)) for r in range(size)]
    split = 0
    for key in full:
        want, parts = full[key], [w[key] for w in ranks]
        kv = any(p in key for p in (".k_proj.", ".v_proj."))
        if kv and c.num_key_value_heads < size:  # replicated: the KV head of the rank's first query head
            hd, group = c.head_dim, c.num_attention_heads // c.num_key_value_heads  # query heads per KV head
            for r, p in enumerate(parts):
                h = (r * c.num_attention_heads // size) // group
                np.testing.assert_array_equal(p, want[h * hd : (h + 1) * hd], err_msg=f"{key} rank {r}")
            continue
        if all(p.shape == want.shape for p in parts) and size > 1 and key not in ("model.embed_tokens.weight",
                                                                                   "lm_head.weight"):
            for p in parts:
                np.testing.assert_array_equal(p, want, err_msg=f"{key}: whole on every rank")
            continue
        axis = 1 if key.endswith(("o_proj.weight", "down_proj.weight")) else 0
        tiled = np.concatenate(parts, axis=axis)
        np.testing.assert_array_equal(np.take(tiled, range(want.shape[axis]), axis=axis), want, err_msg=key)
        assert not np.take(tiled, range(want.shape[axis], tiled.shape[axis]), axis=axis).any(), f"{key}: padding"
        split += 1
    assert split >= 4 * c.num_hidden_layers, f"non-vacuity: {split} tensors were split"
