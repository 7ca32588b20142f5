#!/usr/bin/env bash
# Session 44, run 5 (s44r4.sh cut to ~4 min, the device time left): the full prefix hit on CUDA, then issue 30's hit
# sent whole and at a block's tail.
. "$(dirname "$0")/lane-env.sh"
step "0 the full prefix hit on CUDA: one token computed, no KV written into the shared block"
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/engine/test_prefix_cache_outputs.py 2>&1 | tail -2
prefix_ttft_tails 0 16
step done
