"""Graphs captured at start-up (issue 26): every decode key (each rung of rows, each block-table width
bucket, plain and verifying), every prefill bucket and the draft model's, taken on dummy inputs before the
first request, so no request ever waits for a capture; the tokens are those of graphs taken on first use,
and of no graphs at all. (TP = 2 ranks: test_startup_capture_tp.py; the eager tail's warm-up:
test_startup_first_launch.py; apart so each mutant runs the tests it needs.)"""

from __future__ import annotations

import pytest

from models.decoder import LONG_CONTEXT_KEYS
from seams.lanes import GRAPHS_REASON, is_bypass_lane
from tests.engine.startup_rig import KW, PROMPTS, captures
from vt import LLM, SamplingParams

pytestmark = pytest.mark.skipif(is_bypass_lane(), reason=GRAPHS_REASON)


def _sp(max_tokens: int = 40) -> list[SamplingParams]:
    return [SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True) for _ in PROMPTS]


def _tokens(llm: LLM) -> list[list[int]]:
    return [list(o.outputs[0].token_ids) for o in llm.generate([{"prompt_token_ids": p} for p in PROMPTS], _sp())]


@pytest.mark.parametrize("spec", [None, "[ngram]", "tiny-qwen3-draft"], ids=["plain", "ngram", "draft"])
def test_no_request_waits_for_a_capture_and_the_tokens_are_first_uses(spec: str | None) -> None:
    extra = dict(speculative_model=spec, num_speculative_tokens=2) if spec else {}
    early = LLM("tiny-qwen3", startup_capture=True, **KW, **extra)
    taken = captures(early)
    assert taken > 0, "non-vacuity: start-up took graphs"
    got = _tokens(early)
    assert captures(early) == taken, f"{captures(early) - taken} graph(s) captured on a request's time"
    lazy = LLM("tiny-qwen3", startup_capture=False, **KW, **extra)
    assert captures(lazy) == 0
    want = _tokens(lazy)
    assert captures(lazy) > 0, "non-vacuity: the same requests capture on first use without start-up capture"
    assert got == want, "start-up graphs give the tokens first-use graphs give"
    eager = LLM("tiny-qwen3", enforce_eager=True, **KW, **extra)
    assert _tokens(eager) == want, "and those of no graphs at all"


def test_startup_capture_covers_the_widest_table_and_the_largest_prefill_bucket() -> None:
    """The keys a start-up takes are the driver's whole ladders: rows x widths up to max_model_len's table,
    and every token bucket up to the step budget."""
    llm = LLM("tiny-qwen3", startup_capture=True, **KW)
    d = llm.engine.runner.decoder
    widths = {key[3] for key in d.slots}
    assert max(widths) == d.max_width and d.max_width * 16 >= KW["max_model_len"], (widths, d.max_width)
    assert {key[0] for key in d.slots} == set(d.rows_ladder) > set(d.ladder), "decode rows, and short steps' above"
    assert all(w * 16 > LONG_CONTEXT_KEYS for rows, _, _, w, *_ in d.slots if rows > d.ladder[-1]), \
        "rows above the decode ladder serve only a short step over a long context"
    apart = {(rows, w) for rows, _, _, w, a, _ in d.slots if a}
    assert not any(key[5] for key in d.slots), "no start-up graph masks tokens (structured outputs' are taken lazily)"
    assert apart == {(rows, w) for rows in d.rows_ladder for w in widths if w * 16 > LONG_CONTEXT_KEYS and (
        d.model.attends_with_rope(rows, w, 16) or d.model.rows_kernel is not None)}, \
        ("a short step's rows apart (graphs of their own) exactly where the decode attention would write their KV, "
         "or everywhere they attend together (VT_SHARED_ROWS_ATTENTION)")
    assert all(slot.is_captured for slot in d.slots.values())
    assert sorted(t for t, b in d.buckets.items() if b.is_captured) == d.token_ladder
    assert d.token_ladder[-1] == KW["max_num_batched_tokens"], "non-vacuity: the largest bucket is the budget"


def test_startup_capture_is_off_by_default_on_the_cpu_and_says_so_in_its_progress(caplog) -> None:
    import logging

    with caplog.at_level(logging.INFO, logger="vt"):
        llm = LLM("tiny-qwen3", startup_capture=True, **KW)
    lines = [r.getMessage() for r in caplog.records]
    total = captures(llm)
    assert any(m.startswith(f"capturing {total} graphs") for m in lines), lines[:3]
    assert any(m.startswith(f"captured {total}/{total} graphs") for m in lines)
    assert any(m.startswith(f"captured {total} graphs in") and "MiB" in m for m in lines)
    assert captures(LLM("tiny-qwen3", **KW)) == 0, "the CPU backend's default: first use"


def test_start_up_ends_once_every_graph_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend hears once, after the last start-up capture, that start-up is over (CUDA's GEMM tuner then stops:
    a shape first seen on a request's time, an eager step's logit rows, is not timed and compiles nothing); without
    start-up capture it never hears it (first uses are tuned as they come)."""
    from vt.backend import Backend
    from vt.engine.worker.graph_driver import GraphDriver

    events: list[str] = []
    capture_all = GraphDriver.capture_all

    def counted(self: GraphDriver, *args: object, **kw: object) -> int:
        n = capture_all(self, *args, **kw)  # type: ignore[arg-type]
        events.append(f"captured {n}")
        return n

    monkeypatch.setattr(GraphDriver, "capture_all", counted)
    monkeypatch.setattr(Backend, "end_start_up", lambda self: events.append("start-up over"))
    llm = LLM("tiny-qwen3", startup_capture=True, **KW)
    assert captures(llm) > 0 and events == [f"captured {captures(llm)}", "start-up over"], events
    _tokens(llm)
    assert events[-1] == "start-up over", "requests do not end it again"
    events.clear()
    LLM("tiny-qwen3", startup_capture=False, **KW)
    assert events == [], "no start-up capture: tuning stays open for first uses"
