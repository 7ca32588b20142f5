"""What vLLM's Grafana dashboard reads from /metrics (examples/online_serving/prometheus_grafana/grafana.json) is
there under vLLM v1's names and `model_name` label, and moves by what the requests did: the per-request token
histograms by the tokens sent and generated, the queue / prefill / decode intervals within each request's own
end-to-end latency and summing to its TTFT, and a success series per finish reason before any request ends."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from vt.server.serve import running_server

MODEL = "tiny-qwen3"
# (prompt token ids, max_tokens, n): ignore_eos, so each sample generates exactly max_tokens
REQUESTS = (([5] * 7, 3, 1), ([6] * 11, 5, 1), ([7] * 9, 4, 2))
INTERVALS = ("queue", "prefill", "decode")


@pytest.fixture(scope="module")
def served():
    with running_server(MODEL, max_model_len=128, num_blocks=64, max_num_seqs=8) as (server, url):
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
