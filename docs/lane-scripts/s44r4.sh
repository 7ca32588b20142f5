#!/usr/bin/env bash
# Session 44, run 4 (s44r3.sh cut to the device time left, ~6 min): the full prefix hit on CUDA, issue 30's hit sent
# whole then at a block's tail, then the VT_MOE_PREFETCH_DOWN A/B.
. "$(dirname "$0")/lane-env.sh"
step "0 the full prefix hit on CUDA: one token computed, no KV written into the shared block"
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/engine/test_prefix_cache_outputs.py 2>&1 | tail -2
prefix_ttft_tails 0 16
step "A/B VT_MOE_PREFETCH_DOWN=0,1, 30B-A3B-8L replays"
VT_GEMM_PLAN_CACHE=1 timeout 130 python3 scripts/env-ab --set VT_MOE_PREFETCH_DOWN=0,1 --rounds 2 \
  --figures ms.1x128,ms.8x128 --out "$OUT/ab-down" -- \
  python3 scripts/replay-ab --shape 30B-A3B-8L --shapes 1x128,8x128 --reps 100 2>&1 | tail -5
step done
