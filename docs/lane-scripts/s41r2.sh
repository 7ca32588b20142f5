#!/usr/bin/env bash
# Session 41, run 2 (warm): the cluster merge's leftovers, then an H200-only yardstick if the card is one.
. "$(dirname "$0")/lane-env.sh"
step "4 rope GPU tests: cluster, replayed decode step"
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/test_rope_attention.py \
  -k "cluster or replayed_decode_step" 2>&1 | tail -8
step "5 mutant: cluster launch still reduces"
timeout 150 python3 -m mutations run --lane gpu --no-cache --jobs 1 --report-dir "$OUT/mr" --only \
  cuda-decode-cluster-launch-still-reduces 2>&1 | tail -6
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  step "6 H200: realsize decode"
  VT_GEMM_PLAN_CACHE=1 timeout 220 python3 .device/realsize.py . "$OUT/rs" decode 2>&1 | tail -15
fi
step done
