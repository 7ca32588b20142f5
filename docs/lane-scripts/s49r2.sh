#!/usr/bin/env bash
. "$(dirname "$0")/lane-env.sh"
step "1 sampler replays back to back"
timeout 60 python3 .device/sampler-replay.py 2>&1 | tail -4
step "2 realsize longctx"
mkdir -p "$OUT/rs"
VT_GEMM_PLAN_CACHE=1 timeout 200 python3 .device/realsize.py . "$OUT/rs" longctx 2>&1 | grep -v '^\[' | tail -6
step done
