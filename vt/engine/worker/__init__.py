"""The worker: what turns a SchedulerOutput into launches (vLLM v1's worker/). The model runner (runner.py),
its input batch (input_batch.py), THE graph driver (graph_driver.py) with its piecewise prefill buckets
(piecewise.py), the read-back of sampled ids through pinned memory (readback.py), and the tensor-parallel
worker processes (tp.py, run as `python -m vt.engine.worker.tp`)."""
