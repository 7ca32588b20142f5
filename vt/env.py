"""Every VT_* flag, read once per process, in one place.

A flag that is re-read on every call lets a test (or an operator) flip behaviour half-way through a
run; the pool bypass lane in particular must be one process, one answer. `flags()` reads the
environment the first time it is called and never again.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _read_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw.strip().lower() in TRUE:
        return True
    if raw.strip().lower() in FALSE:
        return False
    from vt.errors import ConfigError

    raise ConfigError(f"{name}={raw!r}: expected one of {', '.join(TRUE)} or {', '.join(FALSE)} (any case)")


def _read_threads(name: str) -> int:
    """A thread count, or `auto` (the default): every core but one, which the server and its clients keep."""
    raw = (os.environ.get(name) or "auto").strip().lower()
    if raw == "auto":
        return max(1, (os.cpu_count() or 1) - 1)
    if raw.isdigit() and int(raw) >= 1:
        return int(raw)
    from vt.errors import ConfigError

    raise ConfigError(f"{name}={raw!r}: expected a thread count >= 1 or 'auto'")


def _read_choice(name: str, choices: tuple[str, ...]) -> str:
    """One of choices (the first is the default)."""
    raw = (os.environ.get(name) or choices[0]).strip().lower()
    if raw in choices:
        return raw
    from vt.errors import ConfigError

    raise ConfigError(f"{name}={raw!r}: expected one of {', '.join(choices)}")


ROWS_ATTENTION = ("auto", "off", "rows", "mma")  # VT_SHARED_ROWS_ATTENTION's choices (Flags.shared_rows_attention)
# VT_ROWS_TARGET_BLOCKS's choices: none over the reduce kernel's 256 partitions (tests/backends/test_kernels.py)
ROWS_TARGET_BLOCKS = ("256", "32", "16", "8")


def _read_rows_attention() -> str:
    """VT_SHARED_ROWS_ATTENTION: one of ROWS_ATTENTION, or a boolean as the flag was before `mma` (1: rows, 0: off)."""
    raw = (os.environ.get("VT_SHARED_ROWS_ATTENTION") or "auto").strip().lower()
    if raw in ROWS_ATTENTION:
        return raw
    if raw in TRUE + FALSE:
        return "rows" if raw in TRUE else "off"
    from vt.errors import ConfigError

    raise ConfigError(f"VT_SHARED_ROWS_ATTENTION={raw!r}: expected one of {', '.join(ROWS_ATTENTION)} (or 1 for "
                      "rows, 0 for off)")


# Flags that were read once and are no longer: set to anything but a spelling of their old default (a boolean flag's
# every "off"), they are refused by name (a user asking for the behaviour must hear it is gone), never ignored.
RETIRED = {
    "VT_TEMPERATURE_DRAW": (("mass",), "the race draw was removed in session 24 (on the H200 no faster than the mass "
                                       "draw at B <= 8, slower from B = 32 up): a temperature row has one draw"),
    "VT_MOE_PREFETCH_BYTES": (("0",), "the routed GEMMs' L2 bulk prefetch was removed in session 45 (30B-A3B-8L "
                                      "replays, H100: 0.853 against 0.826 ms at one row, 2.481 against 2.362 at "
                                      "eight)"),
    "VT_MOE_PREFETCH_DOWN": (FALSE, "the routing GEMM's prefetch of the down weights was removed in session 45 "
                                    "(30B-A3B-8L replays, H100: 0.836 against 0.829 ms at one row, 2.367 against 2.377 "
                                    "at eight; session 43: 0.825 against 0.820)"),
}


def _refuse_retired() -> None:
    for name, (defaults, why) in RETIRED.items():
        raw = (os.environ.get(name) or defaults[0]).strip().lower()
        if raw not in defaults:
            from vt.errors import ConfigError

            raise ConfigError(f"{name}={raw!r}: {why}")


@dataclass(frozen=True, slots=True)
class Flags:
    pool_bypass: bool  # VT_POOL_BYPASS=1: every get is a driver alloc, every put a driver free
    pool_exact: bool  # VT_POOL_EXACT=1: size classes are the exact byte counts
    pool_borrow: bool  # VT_POOL_BORROW=0: no best-fit borrow from larger classes
    pool_stats: bool  # VT_POOL_STATS=1: print pool stats at shutdown
    cudagraph: bool  # VT_CUDAGRAPH=0: capture scopes are inert, everything runs eagerly
    sanitize: bool  # VT_SANITIZE=1: CPU sanitizer (poison on free, checked launches)
    gemm_tuned: bool  # VT_GEMM_TUNED=0: cuBLAS's first heuristic pick for every GEMM, no cuBLASLt timing
    # VT_GEMM_PLAN_CACHE: the GEMM tuner's picks under VT_CACHE_DIR/gemm-plans (backends/gemm_plans.py): 1 takes and
    # keeps them (default: its GPU test passed on an H100, session 38), retime times every shape and overwrites them,
    # 0 neither (every process times its shapes)
    gemm_plan_cache: str
    cache_dir: str  # VT_CACHE_DIR: built-in tiny checkpoints (checkpoints/) and sm_90a kernels' CUBINs (kernels/)
    blas_threads: int  # VT_BLAS_THREADS: the CPU backend's BLAS threads (auto: cores - 1)
    api_key: str | None = None  # VT_API_KEY: `vt serve`'s API key when --api-key is not given (vLLM's VLLM_API_KEY)
    sampler: str = "split"  # VT_SAMPLER: the CUDA decode sampler, split (SPLIT blocks per row) or block (one)
    engine_process: bool = True  # VT_ENGINE_PROCESS=0: `vt serve` runs the engine on a thread of its own process
    pdl: bool = True  # VT_PDL=0: captured kernels launch plainly, not with programmatic stream serialization
    # VT_SKINNY_CLUSTER=1: the GEMM tuner also times the skinny GEMM's cluster configurations (a column tile's K
    # slices summed through distributed shared memory; backends/kernels/skinny_gemm.py): correct on the H200, and
    # no faster a decode step there (session 23)
    skinny_cluster: bool = False
    # VT_CONSUMER_NORM=0: the o and down projections of a one-row step run the residual add + RMSNorm after them
    # in their own last block (a grid-wide tail), instead of adding into x and leaving the norm to the GEMM that
    # reads it (models/decoder.py, backends/kernels/skinny_gemm.py; H200, 0.6B: 42 us a step faster on)
    consumer_norm: bool = True
    # VT_ROPE_IN_ATTENTION=0: a decode step of one token a sequence runs q/k norm + rotary + the KV write as a launch
    # of its own again, instead of in the decode attention's prologue (paged_decode_attention_rope)
    rope_in_attention: bool = True
    # VT_ROPE_MAX_ROWS=16..1024: the rope variant up to this many rows a step (8 by default: it was measured at 1 and
    # 8 rows on the H200; at 8 x 8k, 1,024 blocks each paying its prologue before its first key load, 19% slower
    # (session 25, before session 33's 256 blocks a launch, at which the variant is not measured);
    # c=128's TPOT was 2.711 ms in session 28 against 2.439 before the variant). 1024: any row count (sessions 25-27)
    rope_max_rows: int = 8
    # VT_ROPE_MAX_KEYS=512..131072: the rope variant over block tables up to this many keys (256 by default: one
    # partition at the 128-key floor's widest short table). Wider tables split the context into partitions, each
    # block computing its query heads' rotary itself and the own key's partition writing the KV (session 50's A/B)
    rope_max_keys: int = 256
    # VT_DECODE_MIN_PARTITION=128 (the default), 256 or 64: the decode attention splits a context into partitions no
    # shorter than this (backends/kernels/decode_attention.py partition_size), so a launch of few rows over a short
    # context runs on more blocks, then the merge of their partitions (the reduce launch, or the last of those blocks:
    # VT_DECODE_MERGE_IN_ATTENTION). On the H200 64 was
    # slower at c=1 (session 28, when the graph driver still padded tables to 256 keys at any floor). On the H100, the
    # yardstick's c=1 ladder with one process's GEMM picks (plan cache), two rounds: 1.116 / 1.117 ms TPOT at 128
    # against 1.129 / 1.129 at 256 (session 39, with the reduce launch still after the attention)
    decode_min_partition: int = 128
    # VT_DECODE_EARLY_KEYS=0: the rope variant reads its first tile of keys and values after its wait, not before it
    # while the qkv GEMM ahead of it finishes (the keys before the token's own: earlier steps wrote them;
    # VT_READS_BEFORE_WAIT). H100, session 37, three rounds: a 0.6B one-row step's replay 1.086 ms with it against
    # 1.103 without at 128 keys, 1.141 against 1.157 at 255, 1.346 against 1.348 at 8 x 128
    decode_early_keys: bool = True
    # VT_DECODE_EARLY_TILES=2 (with early keys): the rope variant requests its first two tiles of keys and values
    # before its wait, not one: at one row a block walks its partition a tile (64 keys at head dim 128) a DRAM round
    # trip, so 129-255 keys took four round trips, three after the wait (H200, session 28: 1.043 ms a step at 255
    # keys against 0.991 at 128). Off (1): correct on the H100 and no faster there (session 38, replays: 1.134 against
    # 1.137 ms at 1x255, 1.084 against 1.081 at 1x128)
    decode_early_tiles: int = 1
    # VT_DECODE_MERGE_IN_ATTENTION: a decode step's rope attention split into partitions merges them itself, instead
    # of the reduce kernel, a launch of its own after it (H100, session 39: the reduce cost a 0.6B one-row step
    # 54.6 us of its 1.097 ms replay, replay-ab --kernels, marginal). 1: the last block of each token's partitions
    # (decode_attention.cu merge_in_last_block, counters the CUDA backend keeps at zero); correct on the H100 and
    # slower there (session 40: 1.155 ms a one-row step against 1.110, the kernel 12.3 us against 8.8 under ncu: its
    # fence, count and L2 reads in series). cluster: the token's two partitions as one thread-block cluster whose
    # rank 0 merges through distributed shared memory (merge_in_cluster); correct on the H100 and no faster there
    # (session 40, two rounds: 1.145 / 1.140 ms at 1x128, 1.151 / 1.152 at 1x200, 1.328 / 1.343 at 8x200 replayed;
    # c=1 ladder TPOT 1.157 / 1.156). The reduce launch it replaces overlaps the attention under PDL. Off (0)
    decode_merge_in_attention: str = "0"
    # VT_DECODE_MMA_FROM=1024..8192: a step's decode rows over tables of at least this many keys attend with the
    # tensor-core rows kernel (rows_attention.cu, each token a run of its own; P rounded to the cache dtype), not the
    # CUDA-core decode kernel. Off (0): on an H100 (session 41) the decode kernel already reads the cache at 2.83 TB/s
    # at 8 x 8k keys and wins alone (94.8 against 127.3 us a layer) and in replays at 1 x 8k (1.575 against 1.760 ms)
    # and 8 x 2k (2.146 against 2.538); a block's 64-row tile holds one token's query heads
    decode_mma_from: int = 0
    # VT_MOE_CONSUMER_NORM=1 (with VT_CONSUMER_NORM): a MoE layer of a one-token step takes the consumer's norm too:
    # its o projection only adds into x, the router GEMM and the routed gate/up GEMM (moe_norm_route_gemm_rows) each
    # norm the row themselves. Off: on an H100 (session 37) the 30B-A3B-8L one-row replay took 0.8031 ms with it
    # against 0.8054 without, within the noise
    moe_consumer_norm: bool = False
    # VT_SHARED_ROWS_ATTENTION: how a short prefill run whole as a decode step (rows sharing sequences: a prefix hit's
    # tail) attends, in graphs apart from decode steps' (H200, 0.6B, 16 rows over 1,024 keys: attention 0.78 of a
    # 2.03 ms step, session 18). off (0): the plain decode kernel, a row at a time. rows (1):
    # paged_decode_attention_rows, a key read once for 4 rows on CUDA cores (H200: 0.26 ms slower, session 28).
    # mma: paged_rows_attention, a key read once for 64 query rows on tensor cores (H200, session 30: hit TTFT 2.755
    # -> 2.43 ms). auto (the default): mma where the model takes it (a 16-bit cache, at most 64 query heads a KV
    # head), else off, silently; an explicit rows or mma the model cannot take is said in a line (models/decoder.py)
    shared_rows_attention: str = "auto"
    # VT_ROWS_TARGET_BLOCKS=32, 16 or 8: the tensor-core rows kernel splits a context until its launch has about this
    # many working blocks (256 by default; backends/kernels/rows_attention.py partition_size). A hit's 16 rows over
    # 1,024 keys on the 0.6B shape: 8 partitions of 128 keys at 256 (64 blocks of two tiles each, plus the reduce
    # launch), 4 at 32, 2 at 16, 1 at 8 (8 blocks of 16 tiles, no reduce). An A/B knob: on the H200 (session 30) the
    # kernel at 256 was latency-bound (82% of cycles with no warp eligible); on the H100 (session 31) fewer blocks
    # were slower still: kernel + reduce 20.8 / 24.2 / 28.5 / 36.5 us at 256 / 32 / 16 / 8, the hit 2.57 / 3.09 ms
    # at 256 / 8
    rows_target_blocks: int = 256
    # VT_ROWS_MIN_PARTITION=64: the rows kernel's partitions may be one key tile (128 by default: two, so a block's
    # next tile is in flight while one is computed). A hit's 16 rows over 1,024 keys then split into 16 partitions,
    # 128 working blocks of one tile, where the default gives 64 blocks of two. An A/B knob for the hit's latency-bound
    # attention (session 31, H100: 20.8 / 24.2 / 28.5 / 36.5 us at 8 / 4 / 2 / 1 partitions: more was faster down
    # to the floor). Slower at 64 (H100, session 42: the hit's attention 21.9 against 21.05 us, two rounds each; the
    # hit's TTFT 2.13 against 2.16 ms, one process each), so 128 stays
    rows_min_partition: int = 128
    # VT_PREFILL_HEADS_A_BLOCK=2: the tensor-core prefill kernel serves two query heads of one KV head a block (eight
    # warps, each K and V tile copied once for both: half the L2 reads a tile's work), where the model has an even
    # number of query heads a KV head and a head dim of 32 or more. Correct on the H200 and slower at 4,096 and
    # 7,936 tokens (session 30: 414.5 / 1,184 us against 373.6 / 1,155 at one head a block), so one stays
    prefill_heads_a_block: int = 1
    # VT_PREFILL_WGMMA=auto (default), 1 or 0: prefill attention on an sm_90 device (H100, H200) at head dims 64 and 128
    # with a 16-bit cache runs the warpgroup (wgmma) kernel, backends/kernels/prefill_wgmma.cu, compiled for sm_90a;
    # elsewhere the mma.sync kernel. auto takes it where it applies without a word; 1 says once a shape where it
    # cannot; 0 keeps the mma.sync kernel. On an H100 (session 32) it took 36.1 / 241.6 / 716.6 us against 58.9 /
    # 384.0 / 1,148.8 at 1,024 / 4,096 / 7,936 tokens, and the yardstick's 8k c=8 TPOT from 6.46 to 5.70 ms in one call
    prefill_wgmma: str = "auto"
    # VT_SKINNY_MMA=1: the GEMM tuner also times the tensor-core skinny GEMM (backends/kernels/skinny_mma.py) on every
    # plan of 2..16 rows, beside cuBLASLt and the CUDA-core skinny GEMM, with a plan's norm or SwiGLU in its own launch
    # (session 41). Correct on the H200 and no faster a prefix hit's 16-row step there before those consumers were
    # fused (session 30: 2.48 against 2.43 ms). With them fused (H100, session 42) the tuner still picked cuBLASLt,
    # and a consumer launch after it, for every 8- and 16-row plan of the 0.6B step: replays 1.360 / 1.493 ms at 8 /
    # 16 rows against 1.369 / 1.493 without, the prefix hit 2.16 ms both. So off
    skinny_mma: bool = False

    @classmethod
    def from_environ(cls) -> Flags:
        _refuse_retired()
        return cls(
            pool_bypass=_read_bool("VT_POOL_BYPASS", False),
            pool_exact=_read_bool("VT_POOL_EXACT", False),
            pool_borrow=_read_bool("VT_POOL_BORROW", True),
            pool_stats=_read_bool("VT_POOL_STATS", False),
            cudagraph=_read_bool("VT_CUDAGRAPH", True),
            sanitize=_read_bool("VT_SANITIZE", False),
            gemm_tuned=_read_bool("VT_GEMM_TUNED", True),
            gemm_plan_cache=_read_choice("VT_GEMM_PLAN_CACHE", ("1", "0", "retime")),
            cache_dir=os.environ.get("VT_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "vt"),
            blas_threads=_read_threads("VT_BLAS_THREADS"),
            api_key=os.environ.get("VT_API_KEY") or None,
            sampler=_read_choice("VT_SAMPLER", ("split", "block")),
            engine_process=_read_bool("VT_ENGINE_PROCESS", True),
            pdl=_read_bool("VT_PDL", True),
            skinny_cluster=_read_bool("VT_SKINNY_CLUSTER", False),
            consumer_norm=_read_bool("VT_CONSUMER_NORM", True),
            rope_in_attention=_read_bool("VT_ROPE_IN_ATTENTION", True),
            rope_max_rows=int(_read_choice("VT_ROPE_MAX_ROWS", ("8", "16", "32", "64", "128", "1024"))),
            rope_max_keys=int(_read_choice("VT_ROPE_MAX_KEYS", tuple(str(256 << i) for i in range(10)))),
            decode_min_partition=int(_read_choice("VT_DECODE_MIN_PARTITION", ("128", "256", "64"))),
            decode_early_keys=_read_bool("VT_DECODE_EARLY_KEYS", True),
            decode_early_tiles=int(_read_choice("VT_DECODE_EARLY_TILES", ("1", "2"))),
            decode_merge_in_attention=_read_choice("VT_DECODE_MERGE_IN_ATTENTION", ("0", "1", "cluster")),
            decode_mma_from=int(_read_choice("VT_DECODE_MMA_FROM", ("0", "1024", "2048", "4096", "8192"))),
            moe_consumer_norm=_read_bool("VT_MOE_CONSUMER_NORM", False),
            shared_rows_attention=_read_rows_attention(),
            rows_target_blocks=int(_read_choice("VT_ROWS_TARGET_BLOCKS", ROWS_TARGET_BLOCKS)),
            rows_min_partition=int(_read_choice("VT_ROWS_MIN_PARTITION", ("128", "64"))),
            prefill_heads_a_block=int(_read_choice("VT_PREFILL_HEADS_A_BLOCK", ("1", "2"))),
            prefill_wgmma=_read_choice("VT_PREFILL_WGMMA", ("auto", "1", "0")),
            skinny_mma=_read_bool("VT_SKINNY_MMA", False),
        )


@functools.cache
def flags() -> Flags:
    """The process's flags, read from the environment on first use only."""
    return Flags.from_environ()


def as_environ(f: Flags) -> dict[str, str]:
    """The environment that reads back as f: what a child process (a tensor-parallel rank) needs to run
    with this process's flags, whatever its own environment says."""
    names = {"pool_bypass": "VT_POOL_BYPASS", "pool_exact": "VT_POOL_EXACT", "pool_borrow": "VT_POOL_BORROW",
             "pool_stats": "VT_POOL_STATS", "cudagraph": "VT_CUDAGRAPH", "sanitize": "VT_SANITIZE",
             "gemm_tuned": "VT_GEMM_TUNED", "pdl": "VT_PDL", "consumer_norm": "VT_CONSUMER_NORM",
             "rope_in_attention": "VT_ROPE_IN_ATTENTION", "skinny_mma": "VT_SKINNY_MMA",
             "decode_early_keys": "VT_DECODE_EARLY_KEYS", "moe_consumer_norm": "VT_MOE_CONSUMER_NORM"}
    out = {env: "1" if getattr(f, field) else "0" for field, env in names.items()}
    out["VT_SHARED_ROWS_ATTENTION"] = f.shared_rows_attention
    out["VT_GEMM_PLAN_CACHE"] = f.gemm_plan_cache
    out["VT_PREFILL_HEADS_A_BLOCK"] = str(f.prefill_heads_a_block)
    out["VT_PREFILL_WGMMA"] = f.prefill_wgmma
    out["VT_CACHE_DIR"] = f.cache_dir
    out["VT_BLAS_THREADS"] = str(f.blas_threads)
    out["VT_SAMPLER"] = f.sampler
    out["VT_DECODE_EARLY_TILES"] = str(f.decode_early_tiles)
    out["VT_DECODE_MERGE_IN_ATTENTION"] = f.decode_merge_in_attention
    out["VT_DECODE_MMA_FROM"] = str(f.decode_mma_from)
    out["VT_SKINNY_CLUSTER"] = "1" if f.skinny_cluster else "0"
    out["VT_DECODE_MIN_PARTITION"] = str(f.decode_min_partition)
    out["VT_ROPE_MAX_ROWS"] = str(f.rope_max_rows)
    out["VT_ROPE_MAX_KEYS"] = str(f.rope_max_keys)
    out["VT_ROWS_TARGET_BLOCKS"] = str(f.rows_target_blocks)
    out["VT_ROWS_MIN_PARTITION"] = str(f.rows_min_partition)
    return out


def flag_names() -> frozenset[str]:
    """Every VT_* variable this module reads (a tool that sets flags refuses any other name: a typo would run both
    sides of an A/B alike)."""
    return frozenset(as_environ(flags())) | {"VT_API_KEY", "VT_ENGINE_PROCESS", *RETIRED}
