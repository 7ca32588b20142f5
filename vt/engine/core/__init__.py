"""Scheduling and KV management (vLLM v1's core/): the scheduler (scheduler.py), the one KV cache manager and
its block pool (kv_manager.py), a request's life (request.py), and the seams between the core and the worker,
SchedulerOutput and RunnerOutput (outputs.py)."""
