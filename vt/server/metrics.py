"""/metrics in Prometheus's text format (prometheus_client), on a registry of the server's own.

Gauges are read from the engine at scrape time (requests running and waiting, KV blocks in use);
counters and histograms are fed as requests finish (TTFT, TPOT, end-to-end latency, prompt and
generation tokens) and from the engine's own counters (preemptions, graph replays against eager steps,
pool misses).

The figures a vLLM dashboard reads are also published under vLLM's names and labels (`vllm:` prefix,
`model_name`), from the same observations: such a dashboard works unchanged. vt's own figures keep `vt_`.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class EngineCollector:
    """What the engine knows now, read on every scrape (AsyncLLM.stats: the engine's own numbers, or the last
    ones the engine core process sent)."""

    def __init__(self, llm: Any, model_name: str = "") -> None:
        self.llm = llm
        self.model = {"model_name": model_name}  # vLLM's label on its own metrics

    def collect(self) -> Any:
        st = self.llm.stats()
        yield _gauge("vt_num_requests_running", "Requests in the running batch.", st["running"])
        yield _gauge("vt_num_requests_waiting", "Requests waiting to be admitted.", st["waiting"])
        yield _gauge("vt_kv_blocks_used", "KV cache blocks in use.", st["kv_used"])
        yield _gauge("vt_kv_blocks_total", "KV cache blocks in the pool.", st["kv_total"])
        # vLLM's names and label: KV usage counts a cached block that no request holds as free, as vLLM's does
        m = self.model
        yield _gauge("vllm:num_requests_running", "Number of requests in model execution batches.", st["running"], m)
        yield _gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", st["waiting"], m)
        yield _gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                     st["kv_used"] / st["kv_total"], m)
        yield _counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
                       st["prefix_queries"], m)
        yield _counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
                       st["prefix_hits"], m)
        yield _counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", st["preemptions"], m)
        yield _gauge("vt_engine_alive", "1 while the engine loop runs.", int(self.llm.is_alive))
        yield _counter("vt_num_preemptions", "Requests preempted (to be recomputed).", st["preemptions"])
        yield _counter("vt_graph_replays", "Decode steps replayed from a captured graph.", st["graph_replays"])
        yield _counter("vt_eager_steps", "Decode steps run eagerly (cold or graphs off).", st["eager_steps"])
        yield _counter("vt_pool_misses", "Device-pool requests that went to the driver.", st["pool_misses"])
        yield _counter("vt_engine_steps", "Engine steps run.", self.llm.num_steps)
        # per sample sequence, as vLLM v1 counts requests (n > 1 runs n child requests, each counted when it ends):
        # the unit of vt_requests_finished{finish_reason="abort"} and vllm:request_success{finished_reason="abort"}
        yield _counter("vt_requests_aborted", "Sample sequences aborted (a client went away): each of a request's n "
                       "samples still running counts one.", self.llm.num_aborted)


def _gauge(name: str, doc: str, value: float, labels: dict[str, str] | None = None) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc, labels=list(labels or {}))
    g.add_metric(list((labels or {}).values()), value)
    return g


def _counter(name: str, doc: str, value: float, labels: dict[str, str] | None = None) -> CounterMetricFamily:
    c = CounterMetricFamily(name, doc, labels=list(labels or {}))
    c.add_metric(list((labels or {}).values()), value)
    return c


class Metrics:
    def __init__(self, llm: Any, model_name: str = "") -> None:
        self.registry = CollectorRegistry()
        self.registry.register(EngineCollector(llm, model_name))
        self.model_name = model_name
        r = self.registry
        self.ttft = Histogram("vt_time_to_first_token_seconds", "Time to first token.", registry=r,
                              buckets=LATENCY_BUCKETS)
        self.tpot = Histogram("vt_time_per_output_token_seconds", "Time per output token after the first.",
                              registry=r, buckets=LATENCY_BUCKETS)
        self.e2e = Histogram("vt_e2e_request_latency_seconds", "Arrival to finish.", registry=r,
                             buckets=LATENCY_BUCKETS)
        self.prompt_tokens = Counter("vt_prompt_tokens", "Prompt tokens of finished requests.", registry=r)
        self.generation_tokens = Counter("vt_generation_tokens", "Generated tokens of finished requests.",
                                         registry=r)
        self.finished = Counter("vt_requests_finished", "Sample sequences finished (each of a request's n samples "
                                "counts one), by reason.", ["finish_reason"], registry=r)
        # vLLM's names and labels, fed from the same observations
        lab = ["model_name"]
        self.vllm_ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                                   lab, registry=r, buckets=LATENCY_BUCKETS).labels(model_name)
        self.vllm_tpot = Histogram("vllm:time_per_output_token_seconds",
                                   "Histogram of time per output token in seconds.", lab, registry=r,
                                   buckets=LATENCY_BUCKETS).labels(model_name)
        self.vllm_e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                                  lab, registry=r, buckets=LATENCY_BUCKETS).labels(model_name)
        self.vllm_prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", lab,
                                   registry=r).labels(model_name)
        self.vllm_generation = Counter("vllm:generation_tokens", "Number of generation tokens processed.", lab,
                                       registry=r).labels(model_name)
        self.vllm_success = Counter("vllm:request_success", "Count of successfully processed requests.",
                                    ["model_name", "finished_reason"], registry=r)

    def observe(self, req: Any) -> None:
        """A finished request (vt.engine.core.request.Finished), called on the engine's thread (or, with the engine
        core in its own process, on the thread that reads its outputs)."""
        n = req.num_output_tokens
        if req.first_token_time is not None:
            for h in (self.ttft, self.vllm_ttft):
                h.observe(req.first_token_time - req.arrival)
            if req.finish_time is not None and n > 1:
                for h in (self.tpot, self.vllm_tpot):
                    h.observe((req.finish_time - req.first_token_time) / (n - 1))
        if req.finish_time is not None:
            for h in (self.e2e, self.vllm_e2e):
                h.observe(req.finish_time - req.arrival)
        if req.index == 0:
            for c in (self.prompt_tokens, self.vllm_prompt):
                c.inc(req.num_prompt_tokens)
        for c in (self.generation_tokens, self.vllm_generation):
            c.inc(n)
        self.finished.labels(req.finish_reason or "unknown").inc()
        if req.finish_reason in ("stop", "length", "abort"):  # vLLM counts the requests that ended so
            self.vllm_success.labels(self.model_name, req.finish_reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
