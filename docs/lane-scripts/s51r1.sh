#!/usr/bin/env bash
# Session 51, run 1: session 50's untried GPU code first (structured outputs' mask kernel and CUDA path, the rope
# variant over a partitioned table), the mask kernel's GPU mutant, the sampler's round trip by the engine's read-back,
# then the VT_ROPE_MAX_KEYS A/B of decode replays.
. "$(dirname "$0")/lane-env.sh"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
step "1 GPU tests: structured outputs (mask kernel, CUDA end to end), the rope variant ($card)"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/engine/test_structured_outputs.py \
  tests/backends/test_rope_attention.py 2>&1 | tail -6
step "2 GPU mutant of the mask kernel, forked"
timeout 90 python3 -m mutations run --lane gpu --no-cache --jobs 1 --report-dir "$OUT/mut" \
  --only cuda-mask-tokens-reads-the-bits-backwards 2>&1 | grep -E "^baseline|wall|score|Survived|Crashed|Killed"
grep "^| cuda-mask" "$OUT/mut/mutations.md" | cut -d'|' -f2,5,6 | cut -c1-200
step "3 sampler B=1: device time, CuPy's read-back, the engine's pinned read-back"
timeout 40 python3 .device/sampler-replay.py 2>&1 | tail -4
step "4 VT_ROPE_MAX_KEYS A/B, 0.6B replays"
timeout 250 python3 scripts/env-ab --set VT_ROPE_MAX_KEYS=256,131072 --rounds 2 --timeout 110 \
  --figures ms.1x128,ms.1x512,ms.1x1024,ms.1x4096,ms.8x1024,ms.8x8192,nodes.1x1024 --out "$OUT/ab" -- \
  python3 scripts/replay-ab --shape 0.6B --shapes 1x128,1x512,1x1024,1x4096,8x1024,8x8192 --reps 100 2>&1 | tail -12
step done
