"""The profile run behind --gpu-memory-utilization (vt/engine/worker/profile.py) on the CPU backend. Apart from
test_memory_check.py: its mutant needs this test alone, and that file's mutants (the KV budget's arithmetic)
need none of its 4 s."""

from __future__ import annotations


def test_the_profile_run_keeps_the_largest_steps_temporaries_and_frees_its_kv() -> None:
    """On the CPU backend (the same code the CUDA engine runs): what it reports is what stays allocated, the
    pool grown by the largest prefill and decode, the throwaway KV cache and driver freed."""
    from models.loader import load_checkpoint, resolve_model
    from models.registry import load_model
    from vt.engine.worker.profile import profile_non_kv_bytes
    from vt.registry import make_backend

    b = make_backend("cpu")
    model = load_model(load_checkpoint(resolve_model("tiny-qwen3")), b, "float32")
    weights = b.live_bytes
    small = profile_non_kv_bytes(model, 16, 2, 64, 64, lambda: b.live_bytes)
    assert small == b.live_bytes, "what it reports is what stays allocated"
    big = profile_non_kv_bytes(model, 16, 32, 2048, 1024, lambda: b.live_bytes)  # the largest bucket, no eager step
    assert weights < small < big, "the largest step's temporaries are counted, and grow with its size"
    again = profile_non_kv_bytes(model, 16, 32, 2048, 1024, lambda: b.live_bytes)
    assert again == big, "the second run reuses the first's temporaries: its throwaway KV cache and driver were freed"
    eager = profile_non_kv_bytes(model, 16, 32, 4096, 1024, lambda: b.live_bytes)  # only the step budget grows
    assert eager > big, "a step past the largest bucket (eager, unsplit) is profiled too, and it is the larger"
