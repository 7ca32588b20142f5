#!/usr/bin/env bash
# Session 41, run 4: the tensor-core GEMM's fused norm and SwiGLU (d8acbe0): its GPU tests, then its A/B on the 8- and
# 16-row replays, then its mutants. No background jobs (a bare `wait` waits on the log's tee).
. "$(dirname "$0")/lane-env.sh"
T=tests/backends/test_skinny_mma.py
step "1 epilogue kernels, one configuration; the tiny step at 8 and 16 rows"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu $T -k "(epilogue and nt8s4x2) or step_on_tensor_core" 2>&1 | tail -6
step "2 VT_SKINNY_MMA A/B, replays"
VT_GEMM_PLAN_CACHE=1 timeout 170 python3 scripts/env-ab --set VT_SKINNY_MMA=0,1 --rounds 2 \
  --figures ms.8x128,ms.16x128,nodes.8x128,nodes.16x128 --out "$OUT/ab-mma" -- \
  python3 scripts/replay-ab --shape 0.6B --shapes 8x128,16x128 --reps 100 2>&1 | tail -6
python3 -c "
import json,glob
for f in sorted(glob.glob('$OUT/ab-mma/*VT_SKINNY_MMA_1.json'))[:1]:
    d=json.load(open(f)); [print(k, '->', v) for k, v in d['row']['picks'].items() if not k.startswith('1x')]"
step "2b prefix hit, VT_SKINNY_MMA 0 then 1 (one process each)"
for v in 0 1; do VT_SKINNY_MMA=$v VT_GEMM_PLAN_CACHE=1 timeout 90 python3 scripts/prefix-ttft --shape 0.6B --rounds 6 --anatomy 2>&1 | grep "anatomy\|^| 1024"; done
step done
