#!/usr/bin/env bash
# Session 44, run 1: the MoE kernels' GPU tests under every prefetch, then both prefetch flags' A/B on the
# 30B-A3B-8L replays (VT_MOE_PREFETCH_DOWN, VT_MOE_PREFETCH_BYTES), each step bounded.
. "$(dirname "$0")/lane-env.sh"
step "1 MoE + consumer-norm GPU tests, every prefetch"
timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/test_moe_kernels.py tests/backends/test_consumer_norm.py 2>&1 | tail -4
step "2 VT_MOE_PREFETCH_DOWN A/B, 30B-A3B-8L replays"
VT_GEMM_PLAN_CACHE=1 timeout 150 python3 scripts/env-ab --set VT_MOE_PREFETCH_DOWN=0,1 --rounds 2 \
  --figures ms.1x128,ms.8x128 --out "$OUT/ab-down" -- \
  python3 scripts/replay-ab --shape 30B-A3B-8L --shapes 1x128,8x128 --reps 100 2>&1 | tail -5
step "3 VT_MOE_PREFETCH_BYTES A/B, 30B-A3B-8L replays"
VT_GEMM_PLAN_CACHE=1 timeout 150 python3 scripts/env-ab --set VT_MOE_PREFETCH_BYTES=0,4096 --rounds 2 \
  --figures ms.1x128,ms.8x128 --out "$OUT/ab-bytes" -- \
  python3 scripts/replay-ab --shape 30B-A3B-8L --shapes 1x128,8x128 --reps 100 2>&1 | tail -5
step done
