#!/usr/bin/env bash
# Session 50, run 2: the rope variant over wider tables (VT_ROPE_MAX_KEYS), an A/B of decode replays and the prefix
# hit, then the variant's GPU tests and structured outputs' (the mask kernel, the CUDA path end to end).
. "$(dirname "$0")/lane-env.sh"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
step "1 VT_ROPE_MAX_KEYS A/B, 0.6B replays ($card)"
timeout 300 python3 scripts/env-ab --set VT_ROPE_MAX_KEYS=256,131072 --rounds 2 --timeout 140 \
  --figures ms.1x128,ms.1x512,ms.1x1024,ms.1x4096,ms.8x1024,ms.8x8192,nodes.1x1024 --out "$OUT/ab" -- \
  python3 scripts/replay-ab --shape 0.6B --shapes 1x128,1x512,1x1024,1x4096,8x1024,8x8192 --reps 100 2>&1 | tail -20
step "2 GPU tests: the rope variant (a partitioned table's replay included), structured outputs' mask kernel"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/test_rope_attention.py \
  tests/engine/test_structured_outputs.py 2>&1 | tail -3
for k in 256 131072; do
  step "3 prefix hit tail 0, VT_ROPE_MAX_KEYS=$k"
  VT_ROPE_MAX_KEYS=$k VT_GEMM_PLAN_CACHE=1 timeout 80 python3 scripts/prefix-ttft --shape 0.6B --rounds 6 --anatomy \
    --hit-tail 0 --out "$OUT/ttft-$k" 2>&1 | grep -v '^\[' | tail -3
done
mkdir -p "$OUT/rs"
for k in 131072 256; do
  step "4 realsize longctx, VT_ROPE_MAX_KEYS=$k"
  VT_ROPE_MAX_KEYS=$k VT_GEMM_PLAN_CACHE=1 timeout 70 python3 .device/realsize.py . "$OUT/rs" longctx 2>&1 | grep -v '^\[' | tail -2
done
step "5 GPU mutant of the mask kernel, forked"
timeout 100 python3 -m mutations run --lane gpu --no-cache --jobs 1 --report-dir "$OUT/mut" \
  --only cuda-mask-tokens-reads-the-bits-backwards 2>&1 | grep -E "^baseline|wall|score|Survived|Crashed|Killed"
step done
