#!/usr/bin/env bash
# Session 43, run 2: where the 30B-A3B-8L step's time goes under each VT_MOE_PREFETCH_BYTES named (replay-ab
# --kernels: torch.profiler at the card's own clocks, each kernel's duration and what it adds to the replay's end),
# then the MoE decode figures under the first one. Usage: s43r2.sh 4096 0
. "$(dirname "$0")/lane-env.sh"
for p in "$@"; do
  step "kernels, 30B-A3B-8L, VT_MOE_PREFETCH_BYTES=$p"
  VT_GEMM_PLAN_CACHE=1 VT_MOE_PREFETCH_BYTES=$p timeout 120 python3 scripts/replay-ab --shape 30B-A3B-8L \
    --shapes 1x128,8x128 --reps 100 --kernels 2>&1 | tail -1 > "$OUT/k-$p.json"
  python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
print('ms', d['ms'])
for key, ks in d['kernels'].items():
    for name, (us, n, marg) in list(ks.items())[:9]:
        print(f'{key:>6} {us:8.1f} us {n:3d}x  adds {marg:7.1f}  {name}')
" "$OUT/k-$p.json"
done
step "MoE decode figures, VT_MOE_PREFETCH_BYTES=$1"
VT_MOE_PREFETCH_BYTES=$1 timeout 150 python3 scripts/decode-figures --only-moe --skip-greedy --out "$OUT/df" 2>&1 \
  | grep -E "floor|decode step|nodes per" | head -8
step done
