#!/usr/bin/env bash
# Session 46, run 1: the MoE and consumer-norm GPU tests after the prefetches' removal (no GPU has run them), the
# temperature bench (issue 29), the 30B-A3B-8L decode figures (issue 27), then the yardstick's decode rows (issue 25).
. "$(dirname "$0")/lane-env.sh"
step "1 MoE + consumer-norm GPU tests (no prefetch instances left)"
timeout 140 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/test_moe_kernels.py tests/backends/test_consumer_norm.py 2>&1 | tail -4
step "2 temperature bench"
timeout 70 python3 -m pytest -q -p no:cacheprovider benchmarks/test_sampler_bench.py --benchmark-only \
  -k "test_after_batched_sampler_cuda_graph and split and (temperature or greedy or min-p) and not readback and (-1- or -256-)" \
  --benchmark-columns=min,median,max --benchmark-json "$OUT/temp.json" 2>&1 | grep -E "test_|passed|failed|error" | tail -8
step "3 30B-A3B-8L decode figures"
VT_GEMM_PLAN_CACHE=1 timeout 150 python3 scripts/decode-figures --only-moe --skip-greedy --out "$OUT/moe" 2>&1 | grep -v '^\[' | tail -12
mkdir -p "$OUT/rs"
step "4 realsize decode"
VT_GEMM_PLAN_CACHE=1 timeout 180 python3 .device/realsize.py . "$OUT/rs" decode 2>&1 | grep -v '^\[' | tail -14
step done
