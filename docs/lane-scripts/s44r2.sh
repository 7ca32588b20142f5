#!/usr/bin/env bash
# Session 44, run 2: issue 30's prefix hit at the default tail (a block) and sent again whole (--hit-tail 0: one
# token computed since this session), the GPU mutant of session 43's evict-first loads, then the yardstick's decode rows.
. "$(dirname "$0")/lane-env.sh"
step "0 the full prefix hit on CUDA: one token computed, no KV written into the shared block"
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/engine/test_prefix_cache_outputs.py 2>&1 | tail -2
prefix_ttft_tails 16 0
step "2 GPU mutant: evict-first loads"
timeout 150 python3 -m mutations run --lane gpu --no-cache --only cuda-moe-evict-first-load-reads-the-next-vector \
  --report-dir "$OUT/mut" 2>&1 | tail -6
step "3 realsize decode"
VT_GEMM_PLAN_CACHE=1 timeout 220 python3 .device/realsize.py . "$OUT/rs" decode 2>&1 | grep -v '^\[' | tail -14
step done
