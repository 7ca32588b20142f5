#!/usr/bin/env bash
# Session 49, run 4: bad_words through the CUDA sampler (the GPU variants of its tests), then the sampler's device
# time per replay (events-free: back-to-back replays, one synchronize) beside the harness's round trip.
. "$(dirname "$0")/lane-env.sh"
step "1 bad_words on CUDA"
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/engine/test_bad_words.py 2>&1 | tail -3
step "2 sampler device time, B=1 and 256"
timeout 150 python3 -m pytest -q -p no:cacheprovider benchmarks/test_sampler_bench.py --benchmark-only \
  -k "(device_time or (cuda_graph and split and not readback)) and (temperature or greedy or min-p) and (-1- or -256- or -1] or -256])" \
  --benchmark-json "$OUT/dev.json" 2>&1 | grep -E "passed|failed|error" | tail -3
python3 - "$OUT/dev.json" <<'PY'
import json, sys
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    x, s = b.get("extra_info", {}), b["stats"]
    if "us_per_replay_min" in x:
        print(f"{b['name']:70s} device us/replay min {x['us_per_replay_min']:.2f} median {x['us_per_replay_median']:.2f}")
    else:
        print(f"{b['name']:70s} round trip us min {1e6*s['min']:.2f} median {1e6*s['median']:.2f}")
PY
step done
