#!/usr/bin/env bash
# Session 50, run 2: the GPU tests of what landed untried (structured outputs' mask kernel and CUDA path, the rope
# variant over a partitioned table), the VT_ROPE_MAX_KEYS A/B of decode replays, the mask kernel's GPU mutant, then
# the prefix hit and the 8k row under each setting while the call's time lasts.
. "$(dirname "$0")/lane-env.sh"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
step "1 GPU tests: structured outputs (mask kernel, CUDA end to end), the rope variant ($card)"
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/engine/test_structured_outputs.py \
  tests/backends/test_rope_attention.py 2>&1 | tail -4
step "2 VT_ROPE_MAX_KEYS A/B, 0.6B replays"
timeout 260 python3 scripts/env-ab --set VT_ROPE_MAX_KEYS=256,131072 --rounds 2 --timeout 120 \
  --figures ms.1x128,ms.1x512,ms.1x1024,ms.1x4096,ms.8x1024,ms.8x8192,nodes.1x1024 --out "$OUT/ab" -- \
  python3 scripts/replay-ab --shape 0.6B --shapes 1x128,1x512,1x1024,1x4096,8x1024,8x8192 --reps 100 2>&1 | tail -12
step "3 GPU mutant of the mask kernel, forked"
timeout 80 python3 -m mutations run --lane gpu --no-cache --jobs 1 --report-dir "$OUT/mut" \
  --only cuda-mask-tokens-reads-the-bits-backwards 2>&1 | grep -E "^baseline|wall|score|Survived|Crashed|Killed"
grep "^| cuda-mask" "$OUT/mut/mutations.md" | cut -d'|' -f2,5,6 | cut -c1-160
for k in 131072 256; do
  step "4 prefix hit tail 0, VT_ROPE_MAX_KEYS=$k"
  VT_ROPE_MAX_KEYS=$k VT_GEMM_PLAN_CACHE=1 timeout 60 python3 scripts/prefix-ttft --shape 0.6B --rounds 6 --anatomy \
    --hit-tail 0 --out "$OUT/ttft-$k" 2>&1 | grep -v '^\[' | tail -3
done
mkdir -p "$OUT/rs"
for k in 131072 256; do
  step "5 realsize longctx, VT_ROPE_MAX_KEYS=$k"
  VT_ROPE_MAX_KEYS=$k VT_GEMM_PLAN_CACHE=1 timeout 60 python3 .device/realsize.py . "$OUT/rs" longctx 2>&1 | grep -v '^\[' | tail -2
done
step done
