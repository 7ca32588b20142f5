#!/usr/bin/env bash
# Session 47, run 4: the draft's KV sizing on the GPU again after its gate's fix (an out-of-memory start under the
# mutant is now the gate's assertion, not a crash): the gpu tests, then the GPU mutant.
. "$(dirname "$0")/lane-env.sh"
step "1 draft KV sizing GPU tests"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/engine/test_draft_kv_sizing.py tests/engine/test_memory_check.py -rs 2>&1 | tail -6
step "2 its GPU mutant"
timeout 200 python3 -m mutations run --lane gpu --no-cache --jobs 1 --report-dir "$OUT/mut" --only cuda-kv-block-bytes-leave-out-the-draft 2>&1 | tail -6
grep "^| cuda-kv" "$OUT/mut/mutations.md" | cut -c1-700
step done
