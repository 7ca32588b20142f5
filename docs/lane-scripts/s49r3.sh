#!/usr/bin/env bash
. "$(dirname "$0")/lane-env.sh"
step "1 realsize 8b"
mkdir -p "$OUT/rs"
VT_GEMM_PLAN_CACHE=1 timeout 330 python3 .device/realsize.py . "$OUT/rs" 8b 2>&1 | grep -v '^\[' | tail -8
step done
