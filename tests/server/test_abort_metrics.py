"""vt_requests_aborted counts what vt_requests_finished{finish_reason="abort"} and vLLM's request_success count: sample
sequences (vLLM v1 runs a request's n samples as n child requests, each counted as it ends), the same with the
engine on a thread of the server and in a process of its own. Through the engine process a disconnected n=3,
two-prompt stream counted 2 aborts (one per prompt's request) against 6 aborted finishes."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from vt.server.serve import running_server

MODEL = "tiny-qwen3"
N, PROMPTS = 3, ["Hi", "Yo"]
ABORTED = "vt_requests_aborted_total"
ENDED = 'vt_requests_finished_total{finish_reason="abort"}'
VLLM_ENDED = 'vllm:request_success_total{finished_reason="abort",model_name="tiny-qwen3"}'


def counters(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=30).text
    rows = (line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    return {name: float(value) for name, value in rows}


def leave_mid_stream(url: str) -> None:
    """Streams until every choice has said something, then goes away: all N x len(PROMPTS) samples still run."""
    body = {"model": MODEL, "prompt": PROMPTS, "n": N, "max_tokens": 480, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
        seen: set[int] = set()
        for line in r.iter_lines():
            if line.startswith("data: {"):
                seen |= {c["index"] for c in json.loads(line[6:])["choices"]}
            if len(seen) == N * len(PROMPTS):
                return


def aborts_applied(llm, deadline_s: float = 30.0) -> bool:
    """Whether the engine applied both prompts' aborts (their records get the step they were applied at)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        records = list(llm.aborts.values())
        if len(records) == len(PROMPTS) and all(applied is not None for _, applied, _ in records):
            return True
        time.sleep(0.005)
    return False


@pytest.mark.parametrize("engine_process", [False, True], ids=["engine-thread", "engine-process"])
def test_an_aborted_stream_counts_each_sample_once_in_every_abort_counter(engine_process: bool) -> None:
    with running_server(MODEL, engine_process=engine_process, max_model_len=512, num_blocks=256,
                        max_num_seqs=8) as (server, url):
        before = counters(url)
        leave_mid_stream(url)
        assert aborts_applied(server.llm), f"the disconnect's aborts were not applied: {dict(server.llm.aborts)}"
        after = counters(url)
    moved = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in (ABORTED, ENDED, VLLM_ENDED)}
    assert moved[ENDED] == N * len(PROMPTS), f"non-vacuity: every sample was running when the client left: {moved}"
    assert moved[ABORTED] == moved[ENDED] == moved[VLLM_ENDED], f"the abort counters disagree on the unit: {moved}"
