#!/usr/bin/env bash
# Session 48, run 2: on an H200, issue 29's temperature bench and realsize decode (the kernels unchanged since
# session 42's H200 figures); on an H100, more GPU mutants through the fork server.
. "$(dirname "$0")/lane-env.sh"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$card" in
  *H200*)
    step "1 H200: temperature bench"
    timeout 70 python3 -m pytest -q -p no:cacheprovider benchmarks/test_sampler_bench.py --benchmark-only \
      -k "test_after_batched_sampler_cuda_graph and split and (temperature or greedy or min-p) and not readback and (-1- or -256-)" \
      --benchmark-columns=min,median,max --benchmark-json "$OUT/temp.json" 2>&1 | grep -E "test_|passed|failed|error" | tail -8
    step "2 H200: realsize decode"
    mkdir -p "$OUT/rs"
    VT_GEMM_PLAN_CACHE=1 timeout 240 python3 .device/realsize.py . "$OUT/rs" decode 2>&1 | grep -v '^\[' | tail -14
    ;;
  *)
    step "1 $card: GPU mutants under the fork server"
    timeout 330 python3 -m mutations run --lane gpu --no-cache --jobs 2 --report-dir "$OUT/mut" --only \
      cuda-relaxed-capture-mode cuda-cublas-no-preset-workspace cuda-query-not-guarded cuda-bf16-narrow-truncates \
      cuda-min-p-off cuda-seed-counter-ignored cuda-decode-drops-the-online-rescale cuda-rms-norm-drops-the-bias \
      cuda-embed-reads-the-first-token cuda-silu-mul-swaps-gate-and-up cuda-moe-weights-not-renormalized \
      cuda-prefill-two-heads-attend-one 2>&1 | grep -E "^\[|^baseline|wall|score"
    grep "^| cuda" "$OUT/mut/mutations.md" | cut -d'|' -f2,5,6 | cut -c1-220
    ;;
esac
step done
