#!/usr/bin/env bash
# Session 49, run 6 (an H100): attention GPU mutants through the fork server (never run forked before).
. "$(dirname "$0")/lane-env.sh"
step "1 attention GPU mutants, forked"
timeout 400 python3 -m mutations run --lane gpu --no-cache --jobs 2 --report-dir "$OUT/mut" --only \
  cuda-decode-reads-a-block-past-the-table cuda-decode-split-blocks-read-the-wrong-kv-head \
  cuda-decode-warp-merge-ignores-the-max cuda-decode-reduction-sums-unrescaled-parts \
  cuda-rope-variant-ignored-by-the-fused-op cuda-prefill-chunk-blind-to-earlier-kv \
  cuda-rope-attention-keeps-its-own-key-in-the-second-early-tile-as-read \
  cuda-rope-attention-keeps-its-own-key-as-read-before-the-wait \
  cuda-rope-attention-leaves-a-partitioned-contexts-key-unwritten cuda-rope-attention-writes-a-padding-rows-kv \
  cuda-rows-attention-ignores-a-rows-own-end cuda-rows-attention-reads-the-leads-table-for-every-row \
  cuda-rows-attention-weighs-a-later-rows-value cuda-rows-attention-leads-only-aligned-groups \
  cuda-rows-attention-partials-in-log2-units cuda-rows-attention-reads-the-first-kv-heads-queries \
  cuda-tensor-core-tile-drops-the-online-rescale cuda-decode-merge-takes-the-count-one-partition-early \
  cuda-decode-merge-leaves-its-counter-counted cuda-decode-cluster-merge-reads-rank-0s-partials-alone \
  cuda-decode-cluster-launch-still-reduces cuda-prefill-wgmma-second-slab-never-read \
  cuda-prefill-wgmma-copies-unswizzled cuda-prefill-wgmma-tiles-land-in-one-stage 2>&1 | grep -E "^baseline|wall|score|Survived|Crashed"
grep "^| cuda" "$OUT/mut/mutations.md" | cut -d'|' -f2,5 | cut -c1-120
step done
