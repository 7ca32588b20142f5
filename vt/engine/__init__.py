"""The engine: config, requests, sampling, KV block pool, input batch, scheduler, runner, LLM."""
