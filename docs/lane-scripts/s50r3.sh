#!/usr/bin/env bash
# Session 50, run 3 (what little budget is left): the GPU tests of what landed without a GPU, then the mask kernel's
# GPU mutant.
. "$(dirname "$0")/lane-env.sh"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
step "1 GPU tests: structured outputs (mask kernel, CUDA end to end), the rope variant ($card)"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/engine/test_structured_outputs.py \
  tests/backends/test_rope_attention.py 2>&1 | tail -4
step "2 GPU mutant of the mask kernel, forked"
timeout 90 python3 -m mutations run --lane gpu --no-cache --jobs 1 --report-dir "$OUT/mut" \
  --only cuda-mask-tokens-reads-the-bits-backwards 2>&1 | grep -E "^baseline|wall|score|Survived|Crashed|Killed"
grep "^| cuda-mask" "$OUT/mut/mutations.md" | cut -d'|' -f2,5,6 | cut -c1-160
step done
