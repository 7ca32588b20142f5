#!/usr/bin/env bash
# Session 47, run 3: the draft's KV sizing on the GPU (two new gpu tests, then their GPU mutant); on an H200, the
# goals' figures after them (temperature bench, 30B-A3B-8L decode, the yardstick's decode and 8k rows).
. "$(dirname "$0")/lane-env.sh"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader)
step "1 draft KV sizing GPU tests"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/engine/test_draft_kv_sizing.py tests/engine/test_memory_check.py 2>&1 | tail -5
step "2 its GPU mutant"
timeout 200 python3 -m mutations run --lane gpu --no-cache --jobs 1 --report-dir "$OUT/mut" --only cuda-kv-block-bytes-leave-out-the-draft 2>&1 | tail -6
grep "^| cuda-kv" "$OUT/mut/mutations.md" | cut -c1-600
if [[ $card == *H200* ]]; then
  step "3 temperature bench"
  timeout 70 python3 -m pytest -q -p no:cacheprovider benchmarks/test_sampler_bench.py --benchmark-only \
    -k "test_after_batched_sampler_cuda_graph and split and (temperature or greedy or min-p) and not readback and (-1- or -256-)" \
    --benchmark-columns=min,median,max --benchmark-json "$OUT/temp.json" 2>&1 | grep -E "test_|passed|failed|error" | tail -8
  step "4 30B-A3B-8L decode figures"
  VT_GEMM_PLAN_CACHE=1 timeout 100 python3 scripts/decode-figures --only-moe --skip-greedy --out "$OUT/moe" 2>&1 | grep -v '^\[' | tail -12
  mkdir -p "$OUT/rs"
  step "5 realsize decode,longctx"
  VT_GEMM_PLAN_CACHE=1 timeout 190 python3 .device/realsize.py . "$OUT/rs" decode,longctx 2>&1 | grep -v '^\[' | tail -16
fi
step done
