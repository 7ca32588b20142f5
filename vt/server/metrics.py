"""/metrics in Prometheus's text format (prometheus_client), on a registry of the server's own.

Gauges are read from the engine at scrape time (requests running and waiting, KV blocks in use);
counters and histograms are fed as requests finish (TTFT, TPOT, end-to-end latency, prompt and
generation tokens) and from the engine's own counters (preemptions, graph replays against eager steps,
pool misses).

The figures vLLM's Grafana dashboard reads (examples/online_serving/prometheus_grafana/grafana.json) are also
published under vLLM v1's names, types, buckets and `model_name` label (vllm/v1/metrics/loggers.py), from the same
observations: the token histograms, the queue / prefill / decode intervals of vllm/v1/metrics/stats.py, the success
counter with a series per finish reason from the start, and the KV usage under both its names (the dashboard reads
the deprecated `vllm:gpu_cache_usage_perc`). vLLM's `engine` label is left out: vt runs one engine core. vt's own
figures keep `vt_`.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# vLLM v1's buckets (vllm/v1/metrics/loggers.py), so a dashboard's quantiles read as they do against vLLM
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                           240.0, 480.0, 960.0, 1920.0, 7680.0)
FINISH_REASONS = ("stop", "length", "abort")  # vLLM v1's FinishReason values: its success series, one per reason
# vLLM's interval histograms: name, help, (start, end) as fields of a Finished record
INTERVALS = (
    ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
     "arrival", "scheduled_time"),
    ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
     "scheduled_time", "first_token_time"),
    ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
     "first_token_time", "last_token_time"),
    ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
     "scheduled_time", "last_token_time"),
)


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
        yield _gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: Use "
                     "vllm:kv_cache_usage_perc instead.", st["kv_used"] / st["kv_total"], m)
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


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """vLLM's token-count buckets: 1, 2, 5, 10, 20, 50, ... up to max_value."""
    out: list[int] = []
    step = 1
    while True:
        for m in (1, 2, 5):
            if m * step > max_value:
                return out
            out.append(m * step)
        step *= 10


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
                                   lab, registry=r, buckets=TTFT_BUCKETS).labels(model_name)
        self.vllm_tpot = Histogram("vllm:time_per_output_token_seconds",
                                   "Histogram of time per output token in seconds.", lab, registry=r,
                                   buckets=TPOT_BUCKETS).labels(model_name)
        self.vllm_e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                                  lab, registry=r, buckets=REQUEST_LATENCY_BUCKETS).labels(model_name)
        self._vllm_requests(llm.engine.cfg.max_model_len)
        self.vllm_prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", lab,
                                   registry=r).labels(model_name)
        self.vllm_generation = Counter("vllm:generation_tokens", "Number of generation tokens processed.", lab,
                                       registry=r).labels(model_name)
        self.vllm_success = Counter("vllm:request_success", "Count of successfully processed requests.",
                                    ["model_name", "finished_reason"], registry=r)
        for reason in FINISH_REASONS:  # a series per reason from the start, as vLLM's: a rate() over none is empty
            self.vllm_success.labels(model_name, reason)

    def _vllm_requests(self, max_model_len: int) -> None:
        """vLLM's per-request histograms: token counts (buckets up to max_model_len) and the intervals."""
        r, lab, tokens = self.registry, ["model_name"], build_1_2_5_buckets(max_model_len)
        self.vllm_prompt_hist, self.vllm_generation_hist, self.vllm_max_generation = (
            Histogram(name, doc, lab, registry=r, buckets=tokens).labels(self.model_name) for name, doc in (
                ("vllm:request_prompt_tokens", "Number of prefill tokens processed."),
                ("vllm:request_generation_tokens", "Number of generation tokens processed."),
                ("vllm:request_max_num_generation_tokens",
                 "Histogram of maximum number of requested generation tokens.")))
        self.vllm_intervals = [(Histogram(name, doc, lab, registry=r, buckets=REQUEST_LATENCY_BUCKETS)
                                .labels(self.model_name), start, end) for name, doc, start, end in INTERVALS]
        # request id -> (its samples not yet finished, the most tokens one generated): vLLM observes the max
        # of a request's n samples once, when its last one finishes
        self._groups: dict[str, tuple[int, int]] = {}

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
        if req.finish_reason in FINISH_REASONS:  # vLLM counts the requests that ended so
            self.vllm_success.labels(self.model_name, req.finish_reason).inc()
        self._observe_vllm_request(req)

    def _observe_vllm_request(self, req: Any) -> None:
        """vLLM's per-request figures (its IterationStats.update_from_finished_request): each sample is one of its
        requests; an interval is observed once the request reached its end (an abort while queued has none)."""
        self.vllm_prompt_hist.observe(req.num_prompt_tokens)
        self.vllm_generation_hist.observe(req.num_output_tokens)
        for h, start, end in self.vllm_intervals:
            t0, t1 = getattr(req, start), getattr(req, end)
            if t0 is not None and t1 is not None:
                h.observe(t1 - t0)
        base = req.request_id if req.index == 0 else req.request_id.rsplit("#", 1)[0]
        left, most = self._groups.pop(base, (req.n, 0))
        if left > 1:
            self._groups[base] = (left - 1, max(most, req.num_output_tokens))
        else:
            self.vllm_max_generation.observe(max(most, req.num_output_tokens))

    def render(self) -> bytes:
        return generate_latest(self.registry)
