#!/usr/bin/env bash
# Session 45, run 1 (session 44 run 3 again, ~9 min): the full prefix hit on CUDA, issue 30's
# hit at both tails, then both MoE prefetch flags' A/B on the 30B-A3B-8L replays.
. "$(dirname "$0")/lane-env.sh"
step "0 the full prefix hit on CUDA: one token computed, no KV written into the shared block"
timeout 75 python3 -m pytest -q -p no:cacheprovider -m gpu tests/engine/test_prefix_cache_outputs.py 2>&1 | tail -2
prefix_ttft_tails 16 0
for flag in VT_MOE_PREFETCH_DOWN=0,1 VT_MOE_PREFETCH_BYTES=0,4096; do
  step "A/B $flag, 30B-A3B-8L replays"
  VT_GEMM_PLAN_CACHE=1 timeout 130 python3 scripts/env-ab --set "$flag" --rounds 2 \
    --figures ms.1x128,ms.8x128 --out "$OUT/ab-${flag%%=*}" -- \
    python3 scripts/replay-ab --shape 30B-A3B-8L --shapes 1x128,8x128 --reps 100 2>&1 | tail -5
done
step done
