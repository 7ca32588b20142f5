"""What vLLM's Grafana dashboard reads from /metrics (examples/online_serving/prometheus_grafana/grafana.json) is
there under vLLM v1's names and `model_name` label, and moves by what the requests did: the per-request token
histograms by the tokens sent and generated, the queue / prefill / decode intervals within each request's own
end-to-end latency and summing to its TTFT, and a success series per finish reason before any request ends."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from vt.server.serve import running_server

MODEL = "tiny-qwen3"
# (prompt token ids, max_tokens, n): ignore_eos, so each sample generates exactly max_tokens
REQUESTS = (([5] * 7, 3, 1), ([6] * 11, 5, 1), ([7] * 9, 4, 2))
INTERVALS = ("queue", "prefill", "decode")
BS = 16


@pytest.fixture(scope="module")
def served():
    with running_server(MODEL, max_model_len=128, num_blocks=64, block_size=BS, max_num_seqs=8) as (server, url):
        yield server, url


@pytest.fixture(scope="module")
def tight():
    """24 blocks of 16: six concurrent 120-token sequences (8 blocks each) cannot all stay, so decodes preempt."""
    with running_server(MODEL, max_model_len=128, num_blocks=24, block_size=BS, max_num_seqs=8) as (server, url):
        yield server, url


def scrape(url: str) -> dict[str, float]:
    """Every sample of /metrics whose model_name (if any) is MODEL: {'name{labels but model_name}': value}."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=30).text):
        for s in fam.samples:
            if s.labels.get("model_name", MODEL) != MODEL:
                continue
            rest = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k not in ("model_name", "le"))
            if "le" not in s.labels:
                out[f"{s.name}{{{rest}}}"] = s.value
    return out


def moved(before: dict[str, float], after: dict[str, float], name: str) -> tuple[float, float]:
    """(count, sum) a histogram gained between two scrapes."""
    count, total = f"{name}_count{{}}", f"{name}_sum{{}}"
    assert count in after and total in after, f"{name} missing from /metrics"
    return after[count] - before.get(count, 0.0), after[total] - before.get(total, 0.0)


def test_a_success_series_per_finish_reason_exists_before_any_request(served) -> None:
    """vLLM creates them at start-up: a dashboard's rate() over a reason no request has ended with yet is 0, not
    an empty panel."""
    got = scrape(served[1])
    assert any(k.startswith("vllm:num_requests_running") for k in got), "non-vacuity: the scrape read vLLM's names"
    for reason in ("stop", "length", "abort"):
        key = f"vllm:request_success_total{{finished_reason={reason}}}"
        assert key in got, f"no series for finished_reason={reason} before its first request"
    assert "vllm:gpu_cache_usage_perc{}" in got, "the dashboard's KV usage panel reads vllm:gpu_cache_usage_perc"


def test_the_request_histograms_move_by_what_the_requests_did(served) -> None:
    url = served[1]
    before = scrape(url)
    usage = []
    for prompt, max_tokens, n in REQUESTS:
        r = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": max_tokens,
                                                      "n": n, "temperature": 1.0, "seed": 3, "ignore_eos": True},
                       timeout=60)
        assert r.status_code == 200, r.text[:300]
        usage.append((r.json()["usage"], max_tokens, n))
    after = scrape(url)
    samples = sum(n for _, _, n in usage)
    prompt_tokens = sum(len(p) * n for p, _, n in REQUESTS)
    assert moved(before, after, "vllm:request_prompt_tokens") == (samples, prompt_tokens), \
        "one observation per sample, of its prompt's tokens"
    generated = sum(u["completion_tokens"] for u, _, _ in usage)
    assert generated == sum(m * n for _, m, n in usage), "non-vacuity: every sample generated max_tokens"
    assert moved(before, after, "vllm:request_generation_tokens") == (samples, generated)
    most = (len(usage), sum(m for _, m, _ in usage))
    assert moved(before, after, "vllm:request_max_num_generation_tokens") == most, \
        "once per request, the most tokens one of its samples generated"
    times = {name: moved(before, after, f"vllm:request_{name}_time_seconds") for name in (*INTERVALS, "inference")}
    e2e = moved(before, after, "vllm:e2e_request_latency_seconds")
    ttft = moved(before, after, "vt_time_to_first_token_seconds")
    assert all(t[0] == samples for t in times.values()) and e2e[0] == samples, (times, e2e)
    assert times["prefill"][1] > 0 and times["decode"][1] > 0, f"non-vacuity: time was measured: {times}"
    spent = sum(times[name][1] for name in INTERVALS)
    assert spent <= e2e[1] + 1e-9, f"queue + prefill + decode {spent} past the end-to-end latency {e2e[1]}"
    assert times["queue"][1] + times["prefill"][1] == pytest.approx(ttft[1], abs=1e-6), \
        "queue + prefill is arrival to the first token: the TTFT"
    assert times["inference"][1] == pytest.approx(times["prefill"][1] + times["decode"][1], abs=1e-6)


def counted(before: dict[str, float], after: dict[str, float]) -> tuple[float, float]:
    """(queries, hits) vLLM's prefix-cache counters gained between two scrapes."""
    names = ("vllm:prefix_cache_queries_total{}", "vllm:prefix_cache_hits_total{}")
    assert all(k in after for k in names), "vLLM's prefix-cache counters missing from /metrics"
    q, h = (after[k] - before.get(k, 0.0) for k in names)
    return q, h


def complete(url: str, body: dict) -> dict:
    r = httpx.post(url + "/v1/completions", json={"model": MODEL, "ignore_eos": True, **body}, timeout=120)
    assert r.status_code == 200, r.text[:300]
    return r.json()


def test_the_prefix_counters_leave_out_readmissions_after_preemption(tight) -> None:
    """vLLM counts a preempted request's new lookup apart (preempted_queries, not exported): the queries are the
    prompt tokens sent, whatever was recomputed."""
    url = tight[1]
    before = scrape(url)
    prompts = [[(i * 37 + j) % 500 + 3 for j in range(20)] for i in range(6)]  # no two share a first block
    threads = [threading.Thread(target=complete, args=(url, {"prompt": p, "max_tokens": 100, "temperature": 0}))
               for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after = scrape(url)
    preempted = after["vllm:num_preemptions_total{}"] - before.get("vllm:num_preemptions_total{}", 0.0)
    assert preempted > 0, "non-vacuity: the concurrent requests preempted one another"
    assert counted(before, after) == (sum(map(len, prompts)), 0), "each prompt token queried once, none shared"


def test_each_of_n_samples_queries_the_prompt_and_a_fork_hits_what_it_shares(served) -> None:
    """vLLM runs n > 1 as n child requests, each looking the prompt up; the later ones find the first's blocks."""
    server, url = served
    prompt, n = list(range(400, 440)), 3  # a prompt no other test sends
    before, prefilled = scrape(url), server.llm.engine.scheduler.prefill_tokens
    body = complete(url, {"prompt": prompt, "max_tokens": 2, "n": n, "temperature": 0.8, "seed": 1})
    assert len(body["choices"]) == n
    assert server.llm.engine.scheduler.prefill_tokens - prefilled == len(prompt), \
        "non-vacuity: the samples shared one prefill (the later ones were forked from the first)"
    shared = len(prompt) // BS * BS  # the first sample's full blocks, which each later one shares
    assert counted(before, scrape(url)) == (n * len(prompt), (n - 1) * shared), \
        "each sample queries the prompt; each fork hits the blocks it shares, as vLLM's later children do"


@pytest.mark.parametrize("engine_process", [True, False], ids=["engine-process", "engine-thread"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_finished_request_is_counted_before_its_answer_reaches_the_client(engine_process: bool, stream: bool,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that scrapes /metrics right after its answer sees its request counted, in either engine mode. The
    finish record is slowed here: an answer sent before its record is handled would be read before it is counted."""
    from vt.server.async_llm import AsyncLLM

    handled = AsyncLLM._finished

    def late(self, f) -> None:
        time.sleep(1.0)
        handled(self, f)

    monkeypatch.setattr(AsyncLLM, "_finished", late)
    name = "vllm:request_success_total{finished_reason=length}"
    body = {"model": MODEL, "prompt": [5] * 7, "max_tokens": 3, "ignore_eos": True, "stream": stream}
    with running_server(MODEL, engine_process=engine_process, max_model_len=128, num_blocks=64,
                        max_num_seqs=4) as (_, url):
        before = scrape(url).get(name, 0.0)
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
            text = "".join(r.iter_text())
        assert r.status_code == 200 and ("[DONE]" in text) == stream, text
        assert scrape(url).get(name, 0.0) == before + 1, f"{name}: the answer came before its request was counted"
