"""The OpenAI-compatible server: an async engine front (async_llm), the HTTP API (app), Prometheus
metrics (metrics) and the serving benchmark client (bench)."""
