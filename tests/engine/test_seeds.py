"""A seeded request's draws are keyed by (seed, output position), never by its batch row: it yields the
same tokens beside any neighbours, in any row (condense and decode-first moves included), with graphs
on or off, and after preemption (hypothesis searches the batch compositions)."""

from __future__ import annotations

from functools import cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vt import SamplingParams
from vt.engine.config import EngineConfig
from vt.engine.core.request import Request
from vt.engine.front.llm_engine import LLMEngine

TARGET = list(range(60, 85))
# a flat distribution (high temperature, loose filters): another draw position almost surely another token
SEEDED = SamplingParams(temperature=1.5, top_k=200, top_p=0.98, max_tokens=16, seed=1234, ignore_eos=True)


@cache
def engine(graphs: bool, num_blocks: int = 64) -> LLMEngine:
    return LLMEngine(EngineConfig(model="tiny-qwen3", max_model_len=128, num_blocks=num_blocks, max_num_seqs=8,
                                  enforce_eager=not graphs))


def run(e: LLMEngine, plan: dict[int, list[tuple[list[int], SamplingParams]]],
        target_at: int) -> tuple[Request, set[int]]:
    """Steps the engine, adding plan[i] at step i and the target at step target_at; returns the target
    and the batch rows it sat in."""
    target: Request | None = None
    rows: set[int] = set()
    i = 0
    while target is None or e.has_unfinished():
        for prompt, sp in plan.get(i, []):
            e.add_request(prompt, sp)
        if i == target_at:
            target = e.add_request(TARGET, SEEDED)
        e.step()
        if target is not None and target.id in e.runner.batch.row_of:
            rows.add(e.runner.batch.row_of[target.id])
        i += 1
    return target, rows


@cache
def alone() -> list[int]:
    return run(engine(True), {}, 0)[0].output_ids


neighbour = st.tuples(st.integers(0, 3), st.integers(2, 30), st.integers(1, 20), st.one_of(st.none(),
                                                                                           st.integers(0, 99)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(neighbours=st.lists(neighbour, max_size=6), target_at=st.integers(0, 3), graphs=st.booleans())
def test_a_seeded_request_draws_the_same_tokens_whatever_runs_beside_it(neighbours, target_at, graphs) -> None:
    plan: dict[int, list] = {}
    for at, length, max_tokens, seed in neighbours:  # seed None: greedy
        sp = SamplingParams(temperature=0 if seed is None else 1.0, max_tokens=max_tokens, seed=seed,
                            ignore_eos=True)
        plan.setdefault(at, []).append((list(range(100 + length, 100 + 2 * length)), sp))
    target, _ = run(engine(graphs), plan, target_at)
    assert target.output_ids == alone()


def test_the_target_really_moves_rows_and_still_draws_the_same() -> None:
    """Non-vacuity for the property above: neighbours admitted first and finishing first push the
    target from row 3 down to row 0."""
    plan = {0: [(list(range(200, 210 + i)), SamplingParams(temperature=0, max_tokens=5 + 2 * i, ignore_eos=True))
                for i in range(3)]}
    target, rows = run(engine(True), plan, 0)
    assert rows >= {0, 3}, f"the target sat in rows {rows}"
    assert target.output_ids == alone()
    assert len(set(alone())) > 4, "non-vacuity: the target really samples"


def test_a_preempted_seeded_request_resumes_the_same_draws() -> None:
    e = engine(True, num_blocks=8)
    plan = {0: [(list(range(300, 370)), SamplingParams(temperature=1.0, max_tokens=50, seed=7, ignore_eos=True))]}
    target, _ = run(e, plan, 0)
    assert target.num_preemptions > 0, "non-vacuity: the target was preempted and recomputed"
    assert target.output_ids == alone()
