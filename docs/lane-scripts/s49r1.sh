#!/usr/bin/env bash
# Session 49, run 1: issue 29's temperature bench and its kernels' times (either card); on an H200 realsize decode;
# the prefix hit's anatomy.
. "$(dirname "$0")/lane-env.sh"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
step "1 $card: sampler bench B=1 and 256"
timeout 90 python3 -m pytest -q -p no:cacheprovider benchmarks/test_sampler_bench.py --benchmark-only \
  -k "test_after_batched_sampler_cuda_graph and split and (temperature or greedy or min-p) and (-1- or -256-)" \
  --benchmark-columns=min,median,max --benchmark-json "$OUT/temp.json" 2>&1 | grep -E "test_|passed|failed|error" | tail -14
step "2 sampler kernels under ncu (B=1)"
for prm in temperature greedy; do
  timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw --log-file "$OUT/sampler-$prm.csv" \
    python3 .device/sampler-ncu.py $prm 2>&1 | grep -v "^==PROF==" | tail -2
  python3 scripts/kernel-times "$OUT/sampler-$prm.csv" --per 6 2>&1 | tail -6
done
case "$card" in
  *H200*)
    step "3 H200: realsize decode"
    mkdir -p "$OUT/rs"
    VT_GEMM_PLAN_CACHE=1 timeout 240 python3 .device/realsize.py . "$OUT/rs" decode 2>&1 | grep -v '^\[' | tail -14
    ;;
esac
prefix_ttft_tails 0
step done
