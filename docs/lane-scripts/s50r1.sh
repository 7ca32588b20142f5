#!/usr/bin/env bash
# Session 50, run 1 (an H100): skinny GEMM GPU mutants through the fork server (s49r7 timed out).
. "$(dirname "$0")/lane-env.sh"
step "1 skinny GEMM GPU mutants, forked"
timeout 520 python3 -m mutations run --lane gpu --no-cache --jobs 4 --report-dir "$OUT/mut" --only \
  cuda-skinny-drops-a-k-slice-partial cuda-skinny-cluster-adds-its-own-slice-only \
  cuda-skinny-cluster-swiglu-adds-its-own-slice-only cuda-skinny-counters-left-raised cuda-resid-one-slice-writes-c \
  cuda-norm-in-divides-by-the-first-rows-norm cuda-resid-writes-c-instead-of-adding-into-x \
  skinny-norm-runs-in-the-first-block-to-finish skinny-norm-counter-left-counting \
  cuda-skinny-mma-a-fragment-halves-crossed cuda-skinny-mma-leaves-its-tile-counters-set \
  cuda-skinny-mma-norm-leaves-its-counter-counted cuda-skinny-mma-swiglu-swaps-gate-and-up \
  cuda-skinny-mma-split-swiglu-drops-the-last-slice cuda-swiglu-epilogue-reads-gate-as-up 2>&1 | grep -E "^baseline|wall|score|Survived|Crashed"
grep "^| cuda\|^| skinny" "$OUT/mut/mutations.md" | cut -d'|' -f2,5 | cut -c1-120
step done
