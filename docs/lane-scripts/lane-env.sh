# Sourced by every lane script of session 41 (`. "$(dirname "$0")/lane-env.sh"`, from the repo root): the log under
# $OUT teed from here on, the carried wheels and the `vt` entry point on the paths, the kernel and plan caches in the
# tree, and `step` to mark each part. Never end a script with a bare `wait`: it waits on this tee too, until the
# call's limit (session 41's r1: 600 s for 160 s of work).
set -u
mkdir -p "$OUT"
exec > >(tee -a "$OUT/lane.log") 2>&1
export PYTHONPATH=.:.device/site PATH=$PWD/.device/bin:$PATH PYTHONUNBUFFERED=1
export VT_CACHE_DIR=$PWD/.vt-cache
step() { echo "=== $(date +%T) $*"; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
# Issue 30's prefix hit on the 0.6B shape, anatomy on, at each hit tail given (16: a block; 0: the prompt sent whole).
prefix_ttft_tails() {
  for t in "$@"; do
    step "prefix-ttft anatomy, hit tail $t"
    VT_GEMM_PLAN_CACHE=1 timeout 90 python3 scripts/prefix-ttft --shape 0.6B --rounds 6 --anatomy --hit-tail "$t" \
      --out "$OUT/ttft-$t" 2>&1 | grep -v '^\[' | tail -4
  done
}
