#!/usr/bin/env bash
# Session 46, run 3: the GPU mutants of the kernels that share common.cuh with the MoE kernels (skinny GEMMs, norms,
# activation), after the prefetches' removal from common.cuh.
. "$(dirname "$0")/lane-env.sh"
step "1 skinny / norm / common GPU mutants"
timeout 450 python3 -m mutations run --lane gpu --no-cache --jobs 5 --report-dir "$OUT/mut" --only cuda-bf16-narrow-truncates cuda-skinny-drops-a-k-slice-partial cuda-skinny-cluster-adds-its-own-slice-only cuda-skinny-cluster-swiglu-adds-its-own-slice-only cuda-skinny-counters-left-raised cuda-resid-one-slice-writes-c cuda-norm-in-divides-by-the-first-rows-norm cuda-resid-writes-c-instead-of-adding-into-x skinny-norm-runs-in-the-first-block-to-finish skinny-norm-counter-left-counting cuda-swiglu-epilogue-reads-gate-as-up cuda-rms-norm-drops-the-bias cuda-embed-reads-the-first-token cuda-silu-mul-swaps-gate-and-up cuda-skinny-mma-drops-the-last-warps-sum cuda-skinny-mma-a-fragment-halves-crossed cuda-skinny-mma-leaves-its-tile-counters-set cuda-skinny-mma-norm-leaves-its-counter-counted cuda-skinny-mma-swiglu-swaps-gate-and-up cuda-skinny-mma-split-swiglu-drops-the-last-slice  2>&1 | tail -14
step done
