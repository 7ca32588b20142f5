"""Start-up warms the eager tail of a prefill step too: the first request launches no kernel start-up did not.
Apart from test_startup_capture.py: its mutant needs this test alone."""

from __future__ import annotations

import pytest

from seams.lanes import GRAPHS_REASON, is_bypass_lane
from tests.engine.startup_rig import KW, PROMPTS
from vt import LLM, SamplingParams

pytestmark = pytest.mark.skipif(is_bypass_lane(), reason=GRAPHS_REASON)


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
