#!/usr/bin/env bash
# Session 43, run 3 (what ~600 s of device budget can hold after failed starts): the MoE kernels' GPU tests under
# every prefetch, then the VT_MOE_PREFETCH_DOWN A/B on the 30B-A3B-8L one-row replay.
. "$(dirname "$0")/lane-env.sh"
step "1 MoE + consumer-norm GPU tests, every prefetch"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/test_moe_kernels.py tests/backends/test_consumer_norm.py 2>&1 | tail -4
step "2 VT_MOE_PREFETCH_DOWN A/B, 30B-A3B-8L replays"
VT_GEMM_PLAN_CACHE=1 timeout 140 python3 scripts/env-ab --set VT_MOE_PREFETCH_DOWN=0,1 --rounds 2 \
  --figures ms.1x128 --out "$OUT/ab-down" -- \
  python3 scripts/replay-ab --shape 30B-A3B-8L --shapes 1x128 --reps 100 2>&1 | tail -5
step done
