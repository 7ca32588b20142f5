#!/usr/bin/env bash
# Session 44, H100 run: the prefix hit at a block's tail and sent again whole (--hit-tail 0), the
# VT_MOE_PREFETCH_BYTES A/B (never timed), then the GPU mutant of session 43's evict-first loads.
. "$(dirname "$0")/lane-env.sh"
step "0 the full prefix hit on CUDA: one token computed, no KV written into the shared block"
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/engine/test_prefix_cache_outputs.py 2>&1 | tail -2
prefix_ttft_tails 16 0
step "2 VT_MOE_PREFETCH_BYTES A/B, 30B-A3B-8L replays"
VT_GEMM_PLAN_CACHE=1 timeout 150 python3 scripts/env-ab --set VT_MOE_PREFETCH_BYTES=0,4096 --rounds 2 \
  --figures ms.1x128,ms.8x128 --out "$OUT/ab-bytes" -- \
  python3 scripts/replay-ab --shape 30B-A3B-8L --shapes 1x128,8x128 --reps 100 2>&1 | tail -5
step "3 GPU mutant: evict-first loads"
timeout 150 python3 -m mutations run --lane gpu --no-cache --only cuda-moe-evict-first-load-reads-the-next-vector \
  --report-dir "$OUT/mut" 2>&1 | tail -6
step done
