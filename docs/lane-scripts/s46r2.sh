#!/usr/bin/env bash
# Session 46, run 2: the MoE kernels' GPU mutants after the prefetches' removal (moe.cu changed; no GPU has judged
# its mutants since), four at a time on the one GPU.
. "$(dirname "$0")/lane-env.sh"
step "1 MoE GPU mutants"
timeout 480 python3 -m mutations run --lane gpu --no-cache --jobs 4 --report-dir "$OUT/mut" --only \
  cuda-moe-drops-the-second-expert cuda-moe-weights-not-renormalized cuda-moe-expert-offsets-off-by-one \
  cuda-moe-rows-write-the-wrong-row cuda-moe-combine-norm-drops-the-second-expert \
  cuda-moe-route-rows-run-the-first-choices-expert cuda-moe-route-always-renormalizes \
  cuda-moe-norm-route-stages-x-not-its-norm 2>&1 | tail -14
step done
