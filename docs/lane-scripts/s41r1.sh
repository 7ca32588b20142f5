#!/usr/bin/env bash
# Session 41, run 1 (priority order): issue 25's 8k row (tensor-core decode), then the cluster leftovers.
# As run it also tarred .vt-cache in the background and ended with a bare `wait`, which waited on the log's tee
# until the call's limit (600 s for 160 s of work): both removed here.
. "$(dirname "$0")/lane-env.sh"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  step "0 H200: realsize decode,longctx at today's defaults"
  mkdir -p "$OUT/rs"
  VT_GEMM_PLAN_CACHE=1 timeout 300 python3 .device/realsize.py . "$OUT/rs" decode,longctx 2>&1 | grep -v '^\[' | tail -14
fi
step "1 attention-bench (rows 11-13 tensor-core decode vs 1-3)"
timeout 260 python3 scripts/attention-bench --json "$OUT/attn.json" 2>&1 | grep -v '^\[' | tail -22
step "2 long decode on tensor cores, GPU test"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/test_rows_attention.py -k long_decode 2>&1 | tail -8
step "3 VT_DECODE_MMA_FROM A/B, replays"
VT_GEMM_PLAN_CACHE=1 timeout 240 python3 scripts/env-ab --set VT_DECODE_MMA_FROM=0,2048 --rounds 2 \
  --figures ms.1x8192,ms.8x8192,ms.8x2048 --out "$OUT/ab-mma" -- \
  python3 scripts/replay-ab --shape 0.6B --shapes 1x8192,8x8192,8x2048 --reps 100 2>&1 | tail -12
step done
