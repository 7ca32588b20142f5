#!/usr/bin/env bash
# Session 42, run 1: the tensor-core SwiGLU epilogue's miss (diagnosis, then its test with the sums' bound carried
# through), its three mutants; then, on an H200, s41r3 (the yardstick's decode rows, temperature, prefix hit).
. "$(dirname "$0")/lane-env.sh"
step "1 swiglu diagnosis"
timeout 120 python3 docs/lane-scripts/swiglu-diag.py 2>&1 | tail -20
step "2 swiglu epilogue tests, every configuration"
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/test_skinny_mma.py -k "swiglu_epilogue" 2>&1 | tail -4
step "3 mutants"
timeout 200 python3 -m mutations run --lane gpu --no-cache --jobs 2 --report-dir "$OUT/mr" --only \
  cuda-skinny-mma-norm-leaves-its-counter-counted cuda-skinny-mma-swiglu-swaps-gate-and-up \
  cuda-skinny-mma-split-swiglu-drops-the-last-slice 2>&1 | tail -6
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then bash "$(dirname "$0")/s41r3.sh"; fi
step done
