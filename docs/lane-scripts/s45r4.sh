#!/usr/bin/env bash
# Session 45, run 4 (run 3 cut to fit the budget left): the MoE and consumer-norm GPU tests after the prefetches' removal, the temperature bench
# (issue 29).
. "$(dirname "$0")/lane-env.sh"
step "1 MoE + consumer-norm GPU tests (no prefetch instances left)"
timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/test_moe_kernels.py tests/backends/test_consumer_norm.py 2>&1 | tail -4
step "2 temperature bench"
timeout 70 python3 -m pytest -q -p no:cacheprovider benchmarks/test_sampler_bench.py --benchmark-only \
  -k "test_after_batched_sampler_cuda_graph and split and (temperature or greedy or min-p) and not readback and (-1- or -256-)" \
  --benchmark-columns=min,median,max --benchmark-json "$OUT/temp.json" 2>&1 | grep -E "test_|passed|failed|error" | tail -8
step done
