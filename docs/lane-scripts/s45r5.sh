#!/usr/bin/env bash
# Session 45, run 5 (what the budget's last minutes hold): the MoE and consumer-norm GPU tests after the prefetches'
# removal.
. "$(dirname "$0")/lane-env.sh"
step "1 MoE + consumer-norm GPU tests (no prefetch instances left)"
timeout 140 python3 -m pytest -q -p no:cacheprovider -m gpu -x tests/backends/test_moe_kernels.py tests/backends/test_consumer_norm.py 2>&1 | tail -4
step done
