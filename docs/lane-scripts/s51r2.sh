#!/usr/bin/env bash
# Session 51, run 2: the figures under each VT_ROPE_MAX_KEYS setting (the prefix hit, issue 30; the 8k row, issue
# 25), then realsize's decode rows (issue 25's c=1 and c=32).
. "$(dirname "$0")/lane-env.sh"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
for k in 131072 256; do
  step "1 prefix hit tail 0, VT_ROPE_MAX_KEYS=$k ($card)"
  VT_ROPE_MAX_KEYS=$k VT_GEMM_PLAN_CACHE=1 timeout 70 python3 scripts/prefix-ttft --shape 0.6B --rounds 6 --anatomy \
    --hit-tail 0 --out "$OUT/ttft-$k" 2>&1 | grep -v '^\[' | tail -3
done
mkdir -p "$OUT/rs" "$OUT/rs2"
for k in 131072 256; do
  step "2 realsize longctx, VT_ROPE_MAX_KEYS=$k"
  VT_ROPE_MAX_KEYS=$k VT_GEMM_PLAN_CACHE=1 timeout 70 python3 .device/realsize.py . "$OUT/rs" longctx 2>&1 \
    | grep -v '^\[' | grep "^|" | tail -2
done
step "3 realsize decode (c=1, 32, 128)"
VT_GEMM_PLAN_CACHE=1 timeout 150 python3 .device/realsize.py . "$OUT/rs2" decode 2>&1 | grep -v '^\[' | grep "^|" | tail -4
step done
