"""Tensor parallelism on the CPU, across real processes (torch.distributed, gloo): TP = 2 generates the
tokens TP = 1 does (float32, greedy), for dense, MoE, q/k/v-bias, tied-embedding and one-KV-head
checkpoints written by transformers; a dead worker fails the engine within a bounded time, by name; a
model that cannot be split is refused before any process starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import ends_within
from vt.engine.front.llm import LLM
from vt.engine.sample.params import SamplingParams
from vt.engine.worker.tp import LAST_WORDS, READY_KEY, Workers
from vt.errors import ConfigError, WorkerDied
from vt.parallel import gloo_wait, host_store

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


def _workers_around(procs: list[subprocess.Popen], tmp_path: Path) -> Workers:
    """A Workers handle on stand-in processes (no rank spawned), with a real store of its own."""
    w = Workers.__new__(Workers)
    w.logdir, w.store, w.procs = str(tmp_path), host_store(len(procs) + 1, 10.0), procs
    for rank in range(1, len(procs) + 1):
        Path(w.log(rank)).write_text(f"{LAST_WORDS} {rank}: stand-in\n")
    return w


def test_a_worker_that_never_gets_ready_ends_the_startup_wait_at_its_deadline(tmp_path: Path) -> None:
    stuck = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        w = _workers_around([stuck], tmp_path)
        err = ends_within(lambda: w.wait_ready(deadline_s=1.0), 20).get("error")
        assert isinstance(err, WorkerDied) and "did not finish loading within 1 s" in str(err), repr(err)
        w.store.add(READY_KEY, 1)  # non-vacuity: a ready worker ends the wait at once, without an error
        assert ends_within(lambda: w.wait_ready(deadline_s=1.0), 20).get("error") is None
    finally:
        stuck.kill()
        stuck.wait()


def test_a_worker_that_dies_while_loading_is_named_before_the_deadline(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    dead.wait(30)
    w = _workers_around([dead], tmp_path)
    t0 = time.monotonic()
    err = ends_within(lambda: w.wait_ready(deadline_s=20.0), 40).get("error")
    assert isinstance(err, WorkerDied) and "rank 1" in str(err) and "exit code 3" in str(err), repr(err)
    assert time.monotonic() - t0 < 10, "found by its exit code, not by the deadline"


class _Collective:
    """A stand-in for gloo's asynchronous work: completes at a given time."""

    def __init__(self, done_after_s: float) -> None:
        self.done_at = time.monotonic() + done_after_s

    def is_completed(self) -> bool:
        return time.monotonic() >= self.done_at

    def wait(self) -> None:
        pass


def test_a_collective_wait_ends_as_soon_as_the_watch_finds_a_dead_peer() -> None:
    """gloo can wait out its whole timeout on a send to a killed peer: the polled wait asks the watch."""
    watched = []

    def watch() -> None:
        watched.append(time.monotonic())
        if len(watched) == 3:
            raise WorkerDied("rank 1 died")

    err = ends_within(lambda: gloo_wait(_Collective(done_after_s=15.0), watch), 5).get("error")
    assert isinstance(err, WorkerDied), f"the watch's error ends the wait, not the collective: {err!r}"
    assert ends_within(lambda: gloo_wait(_Collective(done_after_s=0.05), watch), 5).get("error") is None, (
        "non-vacuity: a collective that completes ends the wait without an error")
