#!/usr/bin/env bash
# Session 47, run 1: on an H200, the goals' figures first (temperature bench, 30B-A3B-8L decode, the yardstick's
# decode and 8k rows, the prefix hit), then the attention kernels' 29 GPU mutants under the Crashed rule. On an H100
# the figures are skipped (session 46 took them there): the 29 attention mutants, then the 28 MoE / skinny ones.
. "$(dirname "$0")/lane-env.sh"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader)
only() { grep -ho -- '--only .*2>&1' "$@" | sed 's/--only //; s/2>&1//'; }
if [[ $card == *H200* ]]; then
  step "1 temperature bench"
  timeout 70 python3 -m pytest -q -p no:cacheprovider benchmarks/test_sampler_bench.py --benchmark-only \
    -k "test_after_batched_sampler_cuda_graph and split and (temperature or greedy or min-p) and not readback and (-1- or -256-)" \
    --benchmark-columns=min,median,max --benchmark-json "$OUT/temp.json" 2>&1 | grep -E "test_|passed|failed|error" | tail -8
  step "2 30B-A3B-8L decode figures"
  VT_GEMM_PLAN_CACHE=1 timeout 120 python3 scripts/decode-figures --only-moe --skip-greedy --out "$OUT/moe" 2>&1 | grep -v '^\[' | tail -12
  mkdir -p "$OUT/rs"
  step "3 realsize decode,longctx"
  VT_GEMM_PLAN_CACHE=1 timeout 200 python3 .device/realsize.py . "$OUT/rs" decode,longctx 2>&1 | grep -v '^\[' | tail -16
  prefix_ttft_tails 0
fi
step "4 attention GPU mutants ($(only .device/s46r4.sh | wc -w))"
timeout 200 python3 -m mutations run --lane gpu --no-cache --jobs 6 --report-dir "$OUT/mut" --only $(only .device/s46r4.sh) 2>&1 | tail -14
if [[ $card != *H200* ]]; then
  ids="$(only .device/s46r3.sh) $(grep -o 'cuda-moe[a-z-]*' .device/s46r2.sh | tr '\n' ' ')"
  step "5 MoE + skinny / norm / common GPU mutants ($(echo $ids | wc -w))"
  timeout 330 python3 -m mutations run --lane gpu --no-cache --jobs 6 --report-dir "$OUT/mut2" --only $ids 2>&1 | tail -14
fi
step done
