#!/usr/bin/env bash
# Session 48, run 1: the draft's KV sizing GPU gate after its fix (session 47 left it unrun), its GPU mutant, then on
# an H200 the temperature bench (issue 29) and realsize decode.
. "$(dirname "$0")/lane-env.sh"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
step "1 draft KV sizing GPU tests"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/engine/test_draft_kv_sizing.py tests/engine/test_memory_check.py -rs 2>&1 | tail -6
step "2 its GPU mutant"
timeout 200 python3 -m mutations run --lane gpu --no-cache --jobs 1 --report-dir "$OUT/mut" --only cuda-kv-block-bytes-leave-out-the-draft 2>&1 | tail -6
grep "^| cuda-kv" "$OUT/mut/mutations.md" | cut -c1-700
case "$card" in
  *H200*)
    step "3 H200: temperature bench"
    timeout 70 python3 -m pytest -q -p no:cacheprovider benchmarks/test_sampler_bench.py --benchmark-only \
      -k "test_after_batched_sampler_cuda_graph and split and (temperature or greedy or min-p) and not readback and (-1- or -256-)" \
      --benchmark-columns=min,median,max --benchmark-json "$OUT/temp.json" 2>&1 | grep -E "test_|passed|failed|error" | tail -8
    ;;
  *) step "3 skipped: $card is not an H200" ;;
esac
step done
