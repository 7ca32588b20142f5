"""KV capacity: the start-up refusal, preemption under pressure, requests that can never fit."""

from __future__ import annotations

import json

import pytest

from tests.helpers import guarding
from vt import LLM, SamplingParams
from vt.engine.config import EngineConfig
from vt.engine.core.kv_manager import KVCacheManager
from vt.engine.core.request import Request
from vt.engine.core.scheduler import Scheduler
from vt.errors import CapacityError, EngineDeadError, EngineInvariantError

PROMPTS = [f"request number {i} says hello to the engine" for i in range(8)]
GREEDY = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)


def test_startup_refuses_a_max_model_len_that_cannot_fit() -> None:
    with pytest.raises(CapacityError) as ei:
        EngineConfig(model="tiny-qwen3", max_model_len=4096, num_blocks=100, block_size=16)
    msg = str(ei.value)
    assert "needs 256 KV blocks" in msg and "only 100" in msg and "largest max_model_len that fits is 1600" in msg


def test_startup_accepts_the_largest_length_it_names() -> None:
    EngineConfig(model="tiny-qwen3", max_model_len=1600, num_blocks=100, block_size=16)


@pytest.mark.parametrize("model", ["tiny-qwen3", "tiny-qwen3-moe"])
def test_preemption_under_a_tiny_pool_finishes_everything_with_unconstrained_tokens(model: str) -> None:
    roomy = LLM(model=model, max_model_len=128, num_blocks=256, max_num_seqs=8)
    tight = LLM(model=model, max_model_len=128, num_blocks=12, max_num_seqs=8)
    with guarding("every request finishes, under a tiny pool by preemption", EngineInvariantError):
        want = roomy.generate(PROMPTS, GREEDY)
        got = tight.generate(PROMPTS, GREEDY)
    assert sum(o.num_preemptions for o in got) > 0, "non-vacuity: the tight pool really preempted"
    assert sum(o.num_preemptions for o in want) == 0
    assert all(o.finish_reason == "length" for o in got)
    assert [o.token_ids for o in got] == [o.token_ids for o in want]


def _three_running(num_blocks: int = 5) -> tuple[Scheduler, KVCacheManager, list[Request], EngineConfig]:
    cfg = EngineConfig(model="tiny-qwen3", max_model_len=64, num_blocks=num_blocks, block_size=16, max_num_seqs=4)
    kv = KVCacheManager(cfg.num_blocks, cfg.block_size, cfg.max_blocks_per_seq)
    sched = Scheduler(cfg, kv)
    params = SamplingParams(temperature=0).resolve({})
    reqs = [Request(f"r{i}", list(range(15)), params) for i in range(3)]
    for r in reqs:
        sched.add(r)
    assert sched.schedule().scheduled_ids == ["r0", "r1", "r2"]
    return sched, kv, reqs, cfg


def test_preemption_takes_the_newest_running_request_first() -> None:
    sched, kv, reqs, cfg = _three_running()
    reqs[0].output_ids += list(range(20))  # the oldest grows by two blocks: the pool runs dry
    reqs[1].output_ids += [1, 2]  # and the next one needs a block it cannot get
    out = sched.schedule()
    assert out.preempted_ids == ["r2"], "the newest running request is preempted first"
    assert out.scheduled_ids == ["r0", "r1"] and sched.waiting[0] is reqs[2]
    assert kv.block_ids("r2") == [] and reqs[2].num_preemptions == 1
    assert kv.num_free + sum(len(kv.block_ids(r.id)) for r in reqs) == cfg.num_blocks, "no block lost"


def test_a_step_that_preempted_admits_nothing() -> None:
    sched, _, reqs, _ = _three_running()
    reqs[0].output_ids += list(range(20))
    reqs[1].output_ids += [1, 2]
    out = sched.schedule()
    assert out.preempted_ids and not out.new_reqs and "r2" not in out.scheduled_ids


@pytest.mark.parametrize("engine_process", [False, True], ids=["in-process", "engine-process"])
def test_a_request_that_can_never_fit_gets_an_error_and_the_rest_finish(engine_process: bool) -> None:
    """vLLM's rule (its input processor raises ValueError before any prompt of the batch runs, and LLM.generate
    aborts what it had added): a prompt that leaves no room for one generated token refuses its batch with a
    RequestError, and the rest, resubmitted, finish; nothing was run or lost unsaid. The in-process engine used to
    run the others and return this one as an output with finish_reason "error" while the engine process raised:
    now both raise."""
    from tests.helpers import ends_within
    from vt.errors import RequestError

    llm = LLM(model="tiny-qwen3", backend="cpu", max_model_len=32, num_blocks=16, max_num_seqs=4,
              engine_process=engine_process)
    sp = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    try:
        for too_long in (list(range(3, 43)), list(range(3, 35))):  # 40 tokens, and exactly max_model_len
            box = ends_within(lambda p=too_long: llm.generate(["short one", p, "another short one"], sp), 60)
            said = f"prompt has {len(too_long)} tokens; max_model_len=32"
            assert isinstance(box.get("error"), RequestError) and said in str(box["error"]), f"refused up front: {box}"
        if not engine_process:
            assert not llm.engine.has_unfinished(), "nothing of the refused batch was queued"
        with guarding("after a refused batch the engine serves on, every request to its end", EngineInvariantError,
                      EngineDeadError):
            outs = llm.generate(["short one", list(range(3, 34)), "another short one"], sp)  # 31 tokens: room for one
        assert [len(o.token_ids) for o in outs] == [8, 1, 8], "non-vacuity: the engine serves on, to the last slot"
    finally:
        if engine_process:
            llm.engine.close()


def test_generation_stops_at_max_model_len_without_overrunning_the_block_table() -> None:
    llm = LLM(model="tiny-qwen3", max_model_len=32, num_blocks=4, max_num_seqs=2)
    with guarding("a request runs to max_model_len in the blocks its length needs, and ends there",
                  EngineInvariantError):
        out = llm.generate([list(range(3, 23))], SamplingParams(temperature=0, max_tokens=100, ignore_eos=True))[0]
    assert out.finish_reason == "length" and len(out.prompt_token_ids) + len(out.token_ids) == 32


def test_ladder_json_rows_all_ok(capsys: pytest.CaptureFixture[str]) -> None:
    from vt.cli import main

    rc = main(["ladder", "--model", "tiny-qwen3", "--concurrency", "1,4", "--max-model-len", "256",
               "--num-blocks", "64", "--input-len", "24", "--output-len", "8", "--num-prompts", "6", "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert rc == 0 and [r["c"] for r in rows] == [1, 4]
    assert all(r["ok"] == r["n"] == 6 and r["failed"] == 0 for r in rows)
    assert set(rows[0]) == {"c", "n", "ok", "failed", "out_tok_s", "ttft_ms", "tpot_ms", "ttft_median_ms",
                            "ttft_max_ms"}
    for r in rows:  # the mean lies at or under the slowest request, and all are times of requests that ran
        assert 0 < r["ttft_median_ms"] <= r["ttft_max_ms"] and r["ttft_ms"] <= r["ttft_max_ms"] + 0.01, r


def test_a_rungs_ttft_median_and_max_show_one_slow_request_as_itself() -> None:
    """Two requests at 1 ms and one at 10 ms: the mean (4 ms) moves, the median stays at 1 ms, the max is the slow
    one; no request with a token gives zeros, not an error."""
    from vt.engine.front.ladder import ttft_ms

    assert ttft_ms([0.001, 0.010, 0.001]) == (4.0, 1.0, 10.0)
    assert ttft_ms([]) == (0.0, 0.0, 0.0)


# ---- one KV manager: draft memory is counted like the target's ------------------------------------


def test_startup_counts_the_drafts_kv_with_the_targets() -> None:
    """A draft model's KV draws on the same block pool: one max_model_len request needs its blocks twice."""
    draft = dict(speculative_model="tiny-qwen3-draft", num_speculative_tokens=4)
    EngineConfig(model="tiny-qwen3", max_model_len=64, num_blocks=6)  # non-vacuity: fits without a draft
    with pytest.raises(CapacityError) as ei:
        EngineConfig(model="tiny-qwen3", max_model_len=64, num_blocks=6, **draft)
    msg = str(ei.value)
    assert "needs 8 KV blocks" in msg and "as many for the draft" in msg and "fits is 48" in msg, msg
    EngineConfig(model="tiny-qwen3", max_model_len=48, num_blocks=6, **draft)  # the length it names fits


def test_a_max_length_request_runs_to_the_end_when_the_pool_holds_exactly_target_and_draft() -> None:
    """The exact fit the start-up check admits really serves a request to max_model_len."""
    llm = LLM(model="tiny-qwen3", max_model_len=64, num_blocks=8, max_num_seqs=2,
              speculative_model="tiny-qwen3-draft", num_speculative_tokens=4)
    with guarding("a pool of exactly target and draft blocks serves a request to max_model_len", EngineInvariantError):
        out = llm.generate([list(range(3, 43))], SamplingParams(temperature=0, max_tokens=100, ignore_eos=True))[0]
    assert out.finish_reason == "length" and len(out.prompt_token_ids) + len(out.token_ids) == 64
    assert llm.engine.runner.proposer.num_proposed > 0, "non-vacuity: it speculated, so it held draft blocks"


@pytest.mark.parametrize("spec", [False, True], ids=["plain", "speculative"])
def test_a_finished_request_frees_its_blocks_in_the_step_that_finished_it(spec: bool) -> None:
    kw = dict(speculative_model="tiny-qwen3-draft", num_speculative_tokens=4) if spec else {}
    llm = LLM(model="tiny-qwen3", max_model_len=128, num_blocks=64, max_num_seqs=4, **kw)
    e, kv = llm.engine, llm.engine.kv_manager
    reqs = [e.add_request(f"request {i}", SamplingParams(temperature=0, max_tokens=3 + 5 * i, ignore_eos=True))
            for i in range(4)]
    finished_while_others_ran = 0
    while e.has_unfinished():
        e.step()
        done = [r for r in reqs if r.is_finished]
        assert all(kv.block_ids(r.id) == [] and r.id not in kv.tables for r in done), "a finished request holds blocks"
        held = sum(len(t) for r in e.scheduler.running for t in kv.tables[r.id])
        assert kv.num_used == held, f"{kv.num_used} blocks in use, the running requests hold {held}"
        finished_while_others_ran += bool(done and e.scheduler.running)
    assert finished_while_others_ran, "non-vacuity: requests finished while others still ran"
    assert kv.num_free == kv.num_blocks
