#!/usr/bin/env bash
# Session 42, run 2: VT_MOE_PREFETCH_BYTES (the routed-expert GEMMs ask L2 for their weight rows once the expert is
# known): the MoE kernels' GPU tests under it, then its A/B on the 30B-A3B-8L replays at 1 and 8 rows.
. "$(dirname "$0")/lane-env.sh"
step "1 MoE kernel GPU tests, prefetching whole rows"
VT_MOE_PREFETCH_BYTES=4096 timeout 80 python3 -m pytest -q -p no:cacheprovider -m gpu tests/backends/test_moe_kernels.py 2>&1 | tail -3
step "2 VT_MOE_PREFETCH_BYTES A/B, 30B-A3B-8L replays"
VT_GEMM_PLAN_CACHE=1 timeout 200 python3 scripts/env-ab --set VT_MOE_PREFETCH_BYTES=0,4096 --rounds 2 \
  --figures ms.1x128,ms.8x128 --out "$OUT/ab-moe" -- \
  python3 scripts/replay-ab --shape 30B-A3B-8L --shapes 1x128,8x128 --reps 100 2>&1 | tail -6
step done
