#!/usr/bin/env bash
# Session 42, run 3 (s42r2 trimmed to what 289 s of device time can hold after a start): VT_MOE_PREFETCH_BYTES's
# A/B on the 30B-A3B-8L one-token replay first, then the MoE kernels' GPU tests under it.
. "$(dirname "$0")/lane-env.sh"
step "1 VT_MOE_PREFETCH_BYTES A/B, 30B-A3B-8L replay at one row"
VT_GEMM_PLAN_CACHE=1 timeout 130 python3 scripts/env-ab --set VT_MOE_PREFETCH_BYTES=0,4096 --rounds 2 \
  --figures ms.1x128 --out "$OUT/ab-moe" -- \
  python3 scripts/replay-ab --shape 30B-A3B-8L --shapes 1x128 --reps 100 2>&1 | tail -5
step "2 MoE kernel GPU tests, prefetching whole rows"
VT_MOE_PREFETCH_BYTES=4096 timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/test_moe_kernels.py 2>&1 | tail -3
step done
