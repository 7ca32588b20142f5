#!/usr/bin/env bash
# Session 43, run 1: the MoE kernels changed since their last GPU run (PREFETCH, then PREFETCH_DOWN and the
# evict-first loads): their GPU tests under every prefetch (the moe_prefetch fixture), then the A/B of VT_MOE_PREFETCH_DOWN on the
# 30B-A3B-8L replays, then where the step's time goes under the down prefetch.
. "$(dirname "$0")/lane-env.sh"
step "1 MoE + consumer-norm GPU tests, every prefetch"
timeout 180 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/test_moe_kernels.py tests/backends/test_consumer_norm.py 2>&1 | tail -4
step "2 VT_MOE_PREFETCH_DOWN A/B, 30B-A3B-8L replays"
VT_GEMM_PLAN_CACHE=1 timeout 150 python3 scripts/env-ab --set VT_MOE_PREFETCH_DOWN=0,1 --rounds 2 \
  --figures ms.1x128,ms.8x128 --out "$OUT/ab-down" -- \
  python3 scripts/replay-ab --shape 30B-A3B-8L --shapes 1x128,8x128 --reps 100 2>&1 | tail -5
for p in 0 1; do
  step "3 kernels at one row, VT_MOE_PREFETCH_DOWN=$p"
  VT_GEMM_PLAN_CACHE=1 VT_MOE_PREFETCH_DOWN=$p timeout 60 python3 scripts/replay-ab --shape 30B-A3B-8L \
    --shapes 1x128 --reps 50 --kernels 2>&1 | tail -1 > "$OUT/k-$p.json"
  python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
print('ms', d['ms'])
for key, ks in d['kernels'].items():
    for name, (us, n, marg) in list(ks.items())[:10]:
        print(f'{key:>6} {us:8.1f} us {n:3d}x  adds {marg:7.1f}  {name}')
" "$OUT/k-$p.json"
done
step done
