"""Failures: a request with non-finite logits fails alone; a fatal engine error names the requests in flight."""

from __future__ import annotations

from mutations.model import Mutation
from mutations.registry.gates import FIL

ENTRIES: list[Mutation] = [
    Mutation(
        id="nonfinite-logits-sampled-anyway",
        description="a request whose logits are NaN is sampled as if nothing happened (the CPU sampler skips the check)",
        file="vt/engine/sample/sampler.py", old="    out_ids[bad] = -1\n", new="",
        gates=("tests/engine/test_failures.py::test_a_request_with_non_finite_logits_fails_alone",
               *(f"tests/engine/test_failures.py::test_a_failed_requests_garbage_kv_never_reaches_its_neighbours[{k}]"
                 for k in ("plain", "speculative")),
               f"{FIL}::test_banned_tokens_are_never_drawn_and_non_finite_rows_fail_alone[cpu]"),
    ),
    Mutation(
        id="fatal-error-hides-requests-in-flight",
        description="a fatal engine error no longer names the requests in flight",
        file="vt/engine/front/llm_engine.py",
        old='            print(f"vt: fatal engine error; requests in flight: {in_flight}", file=sys.stderr)\n',
        new="",
        gates=("tests/engine/test_failures.py::test_a_fatal_error_prints_the_traceback_and_the_requests_in_flight",),
    ),
    Mutation(
        id="overflowed-temperature-row-drawn-anyway",
        description="the NumPy sampler draws a row of temperature alone whose tempered maximum is +inf (a penalty "
                    "pushed a logit past float32): its Gumbel-max takes the overflowed token, and the request goes on",
        file="vt/engine/sample/sampler.py", old="            finite = np.isfinite(x.max(axis=1))\n",
        new="            finite = np.ones(len(rows), bool)\n",
        gates=("tests/engine/test_failures.py::test_a_penalty_that_overflows_its_logits_fails_its_request_alone"
               "[no-filters-cpu]",),
        expect="finish_reason",
    ),
    Mutation(
        id="nan-masses-drawn-anyway-through-filters",
        description="the NumPy sampler draws a filtered row (top-k / top-p) whose masses are NaN",
        file="vt/engine/sample/sampler.py",
        old="            out_ids[r] = idx[_draw(w[None], u[r : r + 1])[0]] if np.isfinite(w).all() else -1\n",
        new="            out_ids[r] = idx[_draw(w[None], u[r : r + 1])[0]]\n",
        gates=("tests/engine/test_failures.py::test_a_penalty_that_overflows_its_logits_fails_its_request_alone"
               "[checkpoint-filters-cpu]",),
        expect="took the engine down",
    ),
]
