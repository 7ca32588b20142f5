#!/usr/bin/env bash
# Session 41, run 3: the yardstick's decode rows, the temperature bench and the prefix hit's anatomy (issues 25, 29,
# 30), at today's defaults. No background jobs: a bare `wait` would wait on the log's tee.
. "$(dirname "$0")/lane-env.sh"
mkdir -p "$OUT/rs"
step "1 realsize decode"
timeout 200 python3 .device/realsize.py . "$OUT/rs" decode 2>&1 | grep -v '^\[' | grep -E "^== |tpot|floor" | tail -8
python3 -c "import json; [print(r) for r in json.load(open('$OUT/rs/realsize.json'))['rows']]"
step "2 temperature bench"
timeout 100 python3 -m pytest -q -p no:cacheprovider benchmarks/test_sampler_bench.py --benchmark-only \
  -k "test_after_batched_sampler_cuda_graph and split and temperature and not readback" \
  --benchmark-columns=min,median,max --benchmark-json "$OUT/temp.json" 2>&1 | grep -E "test_|passed|failed|error" | tail -8
step "3 prefix-ttft anatomy"
timeout 120 python3 scripts/prefix-ttft --shape 0.6B --rounds 8 --anatomy --out "$OUT/ttft" 2>&1 | grep -v '^\[' | tail -6
step done
