#!/usr/bin/env bash
# Session 45, run 2: the GPU mutant of session 43's evict-first loads, the yardstick's decode rows, then the MoE and
# consumer-norm GPU test files under every prefetch (never run whole).
. "$(dirname "$0")/lane-env.sh"
step "2 GPU mutant: evict-first loads"
timeout 150 python3 -m mutations run --lane gpu --no-cache --only cuda-moe-evict-first-load-reads-the-next-vector \
  --report-dir "$OUT/mut" 2>&1 | tail -6
mkdir -p "$OUT/rs"
step "3 realsize decode"
VT_GEMM_PLAN_CACHE=1 timeout 200 python3 .device/realsize.py . "$OUT/rs" decode 2>&1 | grep -v '^\[' | tail -14
step "4 MoE + consumer-norm GPU tests"
timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/test_moe_kernels.py tests/backends/test_consumer_norm.py 2>&1 | tail -4
step done
