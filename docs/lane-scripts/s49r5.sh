#!/usr/bin/env bash
# Session 49, run 5 (an H100): twelve sampler GPU mutants through the fork server (never run forked before).
. "$(dirname "$0")/lane-env.sh"
step "1 sampler GPU mutants, forked"
timeout 420 python3 -m mutations run --lane gpu --no-cache --jobs 2 --report-dir "$OUT/mut" --only \
  cuda-gumbel-merge-drops-the-last-block cuda-gumbel-draws-an-overflowed-row cuda-gumbel-skips-the-finite-check \
  cuda-one-block-gumbel-takes-an-overflowed-row cuda-gumbel-bound-without-its-slack cuda-gumbel-skips-by-the-logit-alone \
  cuda-gumbel-threshold-misreads-negative-scores cuda-mass-draws-in-the-next-sixteenth \
  cuda-split-drops-a-blocks-partial-histogram cuda-candidates-drop-ties-at-the-bound cuda-overflowed-row-draws-a-token \
  cuda-one-block-draw-takes-an-overflowed-row 2>&1 | grep -E "^\[|^baseline|wall|score"
grep "^| cuda" "$OUT/mut/mutations.md" | cut -d'|' -f2,5,6 | cut -c1-200
step done
