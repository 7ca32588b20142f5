#!/usr/bin/env bash
# Session 41, run 5 (warm after r4): VT_ROWS_MIN_PARTITION's A/B (580f89e), then the fused consumers' remaining
# GPU tests and mutants. No background jobs (a bare `wait` waits on the log's tee).
. "$(dirname "$0")/lane-env.sh"
T=tests/backends/test_skinny_mma.py
step "2c VT_ROWS_MIN_PARTITION 128 vs 64: the one-tile GPU test, the hit's attention alone, the hit"
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/test_rows_attention.py -k one_tile 2>&1 | tail -3
timeout 120 python3 scripts/env-ab --set VT_ROWS_MIN_PARTITION=128,64 --rounds 2 --figures 10.min_us,10.median_us \
  --out "$OUT/ab-rows" -- python3 scripts/attention-bench 2>&1 | tail -4
for v in 128 64; do VT_ROWS_MIN_PARTITION=$v VT_GEMM_PLAN_CACHE=1 timeout 90 python3 scripts/prefix-ttft --shape 0.6B --rounds 6 --anatomy 2>&1 | grep "anatomy\|^| 1024"; done
step "3 every epilogue kernel case"
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu $T -k "epilogue or 16_row_plan" 2>&1 | tail -4
step "4 mutants"
timeout 200 python3 -m mutations run --lane gpu --no-cache --jobs 2 --report-dir "$OUT/mr" --only \
  cuda-skinny-mma-norm-leaves-its-counter-counted cuda-skinny-mma-swiglu-swaps-gate-and-up \
  cuda-skinny-mma-split-swiglu-drops-the-last-slice 2>&1 | tail -4
step done
