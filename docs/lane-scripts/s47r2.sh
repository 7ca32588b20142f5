#!/usr/bin/env bash
# Session 47, run 2: the 28 GPU mutants of the MoE kernels and of the skinny GEMMs, norms and activation that share
# common.cuh with them, under the Crashed rule, six at a time on the one GPU.
. "$(dirname "$0")/lane-env.sh"
only() { grep -ho -- '--only .*2>&1' "$@" | sed 's/--only //; s/2>&1//'; }
ids="$(only .device/s46r3.sh) $(grep -o 'cuda-moe[a-z-]*' .device/s46r2.sh | tr '\n' ' ')"
step "1 MoE + skinny / norm / common GPU mutants ($(echo $ids | wc -w))"
timeout 450 python3 -m mutations run --lane gpu --no-cache --jobs 6 --report-dir "$OUT/mut2" --only $ids 2>&1 | tail -14
step done
