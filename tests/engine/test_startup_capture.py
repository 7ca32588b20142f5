"""Graphs captured at start-up (issue 26): every decode key (each rung of rows, each block-table width
bucket, plain and verifying), every prefill bucket and the draft model's, taken on dummy inputs before the
first request, so no request ever waits for a capture; the tokens are those of graphs taken on first use,
and of no graphs at all."""

from __future__ import annotations

import pytest

from seams.lanes import GRAPHS_REASON, is_bypass_lane
from vt import LLM, SamplingParams

pytestmark = pytest.mark.skipif(is_bypass_lane(), reason=GRAPHS_REASON)

# Prompts that reach every bucket: short and long (past 256 tokens, the widest table and the largest
# prefill bucket), a budget that chunks the longest, and up to four decoding rows at once. Each starts with its
# own token, so none is served from another's cached prefix (which would shrink its steps below the buckets).
PROMPTS = [[100 + i] + list(range(3, 2 + n)) for i, n in enumerate((5, 40, 300, 17, 130, 420))]
KW = dict(max_model_len=512, num_blocks=160, max_num_seqs=4, max_num_batched_tokens=512)


def _sp(max_tokens: int = 40) -> list[SamplingParams]:
    return [SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True) for _ in PROMPTS]


def _captures(llm: LLM) -> int:
    drivers = [llm.engine.runner.decoder]
    draft = getattr(llm.engine.runner.proposer, "driver", None)
    drivers += [draft] if draft is not None else []
    return sum(d.num_captures + d.num_prefill_captures for d in drivers)


def _tokens(llm: LLM) -> list[list[int]]:
    return [list(o.outputs[0].token_ids) for o in llm.generate([{"prompt_token_ids": p} for p in PROMPTS], _sp())]


@pytest.mark.parametrize("spec", [None, "[ngram]", "tiny-qwen3-draft"], ids=["plain", "ngram", "draft"])
def test_no_request_waits_for_a_capture_and_the_tokens_are_first_uses(spec: str | None) -> None:
    extra = dict(speculative_model=spec, num_speculative_tokens=2) if spec else {}
    early = LLM("tiny-qwen3", startup_capture=True, **KW, **extra)
    taken = _captures(early)
    assert taken > 0, "non-vacuity: start-up took graphs"
    got = _tokens(early)
    assert _captures(early) == taken, f"{_captures(early) - taken} graph(s) captured on a request's time"
    lazy = LLM("tiny-qwen3", startup_capture=False, **KW, **extra)
    assert _captures(lazy) == 0
    want = _tokens(lazy)
    assert _captures(lazy) > 0, "non-vacuity: the same requests capture on first use without start-up capture"
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
    assert {key[0] for key in d.slots} == set(d.ladder)
    assert all(slot.is_captured for slot in d.slots.values())
    assert sorted(t for t, b in d.buckets.items() if b.is_captured) == d.token_ladder
    assert d.token_ladder[-1] == KW["max_num_batched_tokens"], "non-vacuity: the largest bucket is the budget"


def test_startup_capture_is_off_by_default_on_the_cpu_and_says_so_in_its_progress(caplog) -> None:
    import logging

    with caplog.at_level(logging.INFO, logger="vt"):
        llm = LLM("tiny-qwen3", startup_capture=True, **KW)
    lines = [r.getMessage() for r in caplog.records]
    total = _captures(llm)
    assert any(m.startswith(f"capturing {total} graphs") for m in lines), lines[:3]
    assert any(m.startswith(f"captured {total}/{total} graphs") for m in lines)
    assert any(m.startswith(f"captured {total} graphs in") and "MiB" in m for m in lines)
    assert _captures(LLM("tiny-qwen3", **KW)) == 0, "the CPU backend's default: first use"


def test_tp2_ranks_capture_at_startup_in_step_and_generate_the_tp1_tokens() -> None:
    """Each rank takes its graphs on the same dummy steps, so the captures' collectives pair up."""
    kw = KW | dict(max_model_len=256, max_num_batched_tokens=256)
    prompts = [{"prompt_token_ids": p} for p in PROMPTS[:3]]
    sp = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    one = [o.outputs[0].token_ids for o in LLM("tiny-qwen3", **kw).generate(prompts, sp)]
    two = LLM("tiny-qwen3", tensor_parallel_size=2, startup_capture=True, **kw)
    taken = _captures(two)
    assert taken > 0
    assert [o.outputs[0].token_ids for o in two.generate(prompts, sp)] == one
    assert _captures(two) == taken, "no capture on a request's time"


def test_the_first_request_launches_no_kernel_start_up_did_not_run(monkeypatch) -> None:
    """On CUDA a kernel's first launch compiles it (CuPy's own kernels included): 134 ms of the H200's first TTFT
    before the eager tail of a prefill step (the LM head's row gather, the sampler) was warmed at start-up."""
    from backends.cpu import CpuBackend

    seen: dict[str, set[str]] = {"start-up": set(), "request": set()}
    phase = ["start-up"]
    launch = CpuBackend.launch

    def recording(self, kernel, *args, **kw):  # type: ignore[no-untyped-def]
        seen[phase[0]].add(getattr(kernel, "__name__", repr(kernel)))
        return launch(self, kernel, *args, **kw)

    monkeypatch.setattr(CpuBackend, "launch", recording)
    llm = LLM("tiny-qwen3", backend="cpu", startup_capture=True, **KW)
    phase[0] = "request"
    llm.generate([PROMPTS[1]], [SamplingParams(temperature=0.7, max_tokens=3, logprobs=2, seed=1)])
    assert {"gather_rows", "sample_tokens"} <= seen["request"], f"non-vacuity: {sorted(seen['request'])}"
    assert seen["request"] <= seen["start-up"], f"first launched by a request: {seen['request'] - seen['start-up']}"
