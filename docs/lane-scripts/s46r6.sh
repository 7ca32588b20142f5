#!/usr/bin/env bash
# Session 46, run 6: the two GPU mutants that run 5 saw killed by an exception, under the judge's Crashed rule, after
# the memory check's gate turned its out-of-memory into an assertion.
. "$(dirname "$0")/lane-env.sh"
step "1 two GPU mutants under the Crashed rule"
timeout 200 python3 -m mutations run --lane gpu --no-cache --jobs 2 --report-dir "$OUT/mut" --only \
  cuda-given-num-blocks-ignores-the-largest-step cuda-general-passes-skipped-after-a-graph 2>&1 | tail -8
grep -E "^\| cuda-(given|general)" "$OUT/mut/mutations.md" | awk -F'|' '{print $2 "|" $5 "|" $6}'
step done
