#!/usr/bin/env bash
# Session 43, run 1: the MoE kernels changed (PREFETCH template argument) since their last GPU run: their GPU tests
# with and without VT_MOE_PREFETCH_BYTES, then the flag's A/B on the 30B-A3B-8L replays, then the card's own leftover.
. "$(dirname "$0")/lane-env.sh"
step "1 MoE kernel GPU tests, prefetching whole rows"
VT_MOE_PREFETCH_BYTES=4096 timeout 110 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/test_moe_kernels.py 2>&1 | tail -3
step "2 MoE + consumer-norm GPU tests, default"
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/test_moe_kernels.py tests/backends/test_consumer_norm.py 2>&1 | tail -3
step "3 VT_MOE_PREFETCH_BYTES A/B, 30B-A3B-8L replays"
VT_GEMM_PLAN_CACHE=1 timeout 190 python3 scripts/env-ab --set VT_MOE_PREFETCH_BYTES=0,4096 --rounds 2 \
  --figures ms.1x128,ms.8x128 --out "$OUT/ab-moe" -- \
  python3 scripts/replay-ab --shape 30B-A3B-8L --shapes 1x128,8x128 --reps 100 2>&1 | tail -6
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100; then
  step "4 swiglu epilogue tests on the H100 (per-sum bound)"
  timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/test_skinny_mma.py -k "swiglu_epilogue" 2>&1 | tail -4
fi
step done
