"""Guarantees a user sees, each once broken in a copy of main with the whole suite green (issue 19):
the capacity check one block short, the front-of-queue requeue after preemption, the lookahead clamp at
max_model_len, draft state keyed by request id even for identical prompts, and a checkpoint's sampling
default of 0 read as a value."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import through_the_engine
from vt import LLM, SamplingParams
from vt.engine.config import NGRAM, EngineConfig
from vt.engine.core.kv_manager import KVCacheManager
from vt.engine.core.request import Request
from vt.engine.core.scheduler import Scheduler
from vt.errors import CapacityError, DraftPositionMismatch, EngineInvariantError


def greedy(n: int) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)


def test_startup_refuses_a_pool_one_block_short_of_one_max_model_len_request() -> None:
    with pytest.raises(CapacityError, match="needs 3 KV blocks"):
        EngineConfig(model="tiny-qwen3", max_model_len=48, num_blocks=2, block_size=16)
    llm = LLM(model="tiny-qwen3", max_model_len=48, num_blocks=3, block_size=16)  # the exact fit serves
    out = llm.generate([list(range(3, 43))], greedy(100))[0]
    assert out.finish_reason == "length" and len(out.prompt_token_ids) + len(out.token_ids) == 48


def test_a_preempted_request_goes_back_to_the_front_of_the_queue() -> None:
    """Three run, a fourth waits (max_num_seqs); the pool runs dry and the newest running request is
    preempted: it must wait ahead of the later arrival, and be admitted first."""
    cfg = EngineConfig(model="tiny-qwen3", max_model_len=64, num_blocks=5, block_size=16, max_num_seqs=3)
    sched = Scheduler(cfg, KVCacheManager(cfg.num_blocks, cfg.block_size, cfg.max_blocks_per_seq))
    params = SamplingParams(temperature=0).resolve({})
    reqs = [Request(f"r{i}", list(range(15)), params) for i in range(4)]
    for r in reqs:
        sched.add(r)
    assert sched.schedule().scheduled_ids == ["r0", "r1", "r2"] and list(sched.waiting) == [reqs[3]]
    reqs[0].output_ids += list(range(40))  # r0 grows by three blocks: the pool runs dry
    out = sched.schedule()
    assert out.preempted_ids == ["r2"], "non-vacuity: the newest running request was preempted"
    assert [r.id for r in sched.waiting] == ["r2", "r3"], "the preempted request waits ahead of the later arrival"
    sched.finish(reqs[0])
    assert sched.schedule().scheduled_ids[0] == "r2", "and is admitted first"


@pytest.mark.parametrize("spec", ["draft", "ngram"])
def test_speculation_near_max_model_len_finishes_with_length(spec: str) -> None:
    """Lookahead is clamped at max_model_len: a speculating request runs to its last position and
    finishes with reason "length" (unclamped, its last steps would overrun the block table)."""
    model = "tiny-qwen3-draft" if spec == "draft" else NGRAM
    kw = dict(model="tiny-qwen3", max_model_len=64, num_blocks=16, block_size=16)
    prompt = [7, 8, 9, 10] * 10
    llm = LLM(**kw, speculative_model=model, num_speculative_tokens=4)
    try:
        out = llm.generate([prompt], greedy(100))[0]
    except EngineInvariantError as e:
        pytest.fail(f"a speculating request near max_model_len broke an engine invariant: {e}")
    assert out.finish_reason == "length" and len(prompt) + len(out.token_ids) == 64
    assert out.token_ids == LLM(**kw).generate([prompt], greedy(100))[0].token_ids
    assert llm.engine.runner.proposer.num_proposed > 0, "non-vacuity: it speculated"


def test_identical_prompts_keep_their_own_draft_state() -> None:
    """Two requests with the same prompt and different seeds diverge: each keeps its own draft
    context (keyed by request id, never by content), and both stay reproducible."""
    kw = dict(model="tiny-qwen3", max_model_len=128, num_blocks=64, speculative_model="tiny-qwen3-draft",
              num_speculative_tokens=4)
    prompt = "the same prompt twice"
    sp = [SamplingParams(temperature=0.9, max_tokens=24, seed=s, ignore_eos=True) for s in (1, 2)]
    llm = LLM(**kw)
    try:
        got = [o.token_ids for o in llm.generate([prompt, prompt], sp)]
    except DraftPositionMismatch as e:
        pytest.fail(f"two identical prompts shared draft state: {e}")
    assert got[0] != got[1], "non-vacuity: the two requests diverged"
    alone = [LLM(**kw).generate([prompt], p)[0].token_ids for p in sp]
    assert got == alone, "each request's tokens are its own, whoever shares its prompt"
    assert llm.engine.runner.proposer.num_accepted > 0


def _with_generation_config(tmp_path: Path, gen: dict) -> str:
    from models.loader import resolve_model

    d = tmp_path / f"ckpt-{len(list(tmp_path.iterdir()))}"
    shutil.copytree(resolve_model("tiny-qwen3"), d)
    (d / "generation_config.json").write_text(json.dumps(gen))
    return str(d)


def test_a_checkpoint_temperature_of_zero_is_greedy(tmp_path: Path) -> None:
    prompts = [f"prompt {i}" for i in range(4)]
    unset = SamplingParams(max_tokens=12, ignore_eos=True)  # temperature left to the checkpoint (the server's rule)
    zero = LLM(model=_with_generation_config(tmp_path, {"temperature": 0}), max_model_len=64, num_blocks=16)
    want = [o.token_ids for o in zero.generate(prompts, greedy(12))]
    assert through_the_engine(zero, prompts, unset) == want
    defaults = zero.get_default_sampling_params()  # the offline LLM's, vLLM's: used when none are given
    assert defaults.temperature == 0, f"the offline defaults read temperature 0 as {defaults.temperature}"
    hot = LLM(model=_with_generation_config(tmp_path, {"temperature": 1.0}), max_model_len=64, num_blocks=16)
    assert through_the_engine(hot, prompts, unset) != want, "non-vacuity: 1.0 samples"


@pytest.mark.parametrize("leaked, fails", [(1, False), (2, True), (3, True)],
                         ids=["exactly-enough", "one-block-short", "far-short"])
def test_a_request_that_can_never_be_admitted_fails_alone_and_the_rest_run(leaked: int, fails: bool) -> None:
    """Blocks held by no request in flight (a leak) can leave the queue head unable ever to fit: it fails
    alone with the numbers, within a bounded number of steps, and the request queued behind it runs. At the
    boundary (exactly as many blocks free as the head needs) nothing fails."""
    from vt.engine.front.llm_engine import LLMEngine

    e = LLMEngine(EngineConfig(model="tiny-qwen3", max_model_len=64, num_blocks=4, block_size=16))
    e.kv_manager.allocate("leaked", [16 * leaked])  # blocks held by nobody in flight
    head = e.add_request(list(range(3, 40)), greedy(4))  # 37 + 4 tokens: three blocks
    behind = e.add_request([5, 6, 7], greedy(4))  # one block
    for _ in range(100):
        if not e.has_unfinished():
            break
        try:
            e.step()
        except EngineInvariantError as err:
            pytest.fail(f"the stall took the engine down, every request with it: {err}")
    assert not e.has_unfinished(), "bounded: every request ended within 100 steps"
    if fails:
        free = 4 - leaked
        assert head.finish_reason == "error", f"the head ({head.finish_reason}) can never run with {free} blocks free"
        assert f"needs 3 KV blocks for its first 37 tokens; {free} of 4 are free" in (head.error or "")
    else:
        assert head.finish_reason == "length" and len(head.output_ids) == 4, (
            f"exactly enough blocks: the head runs ({head.finish_reason}: {head.error})")
    assert behind.finish_reason == "length" and len(behind.output_ids) == 4, "the request behind it runs"
