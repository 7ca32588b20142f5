"""What a KV cache of num_blocks and the weights need, against the memory the backend has, checked before
anything is allocated: a pool that cannot fit is one line with both figures (and how many blocks would fit),
never a process that builds a billion-entry free list or dies in the allocator."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from vt.errors import CapacityError, ConfigError


def kv_bytes_per_block(model_cfg: Any, block_size: int, itemsize: int, tp: int = 1) -> int:
    """K and V of every layer for one block, on one tensor-parallel rank (its share of the KV heads)."""
    heads = max(1, model_cfg.num_key_value_heads // tp)
    return 2 * model_cfg.num_hidden_layers * block_size * heads * model_cfg.head_dim * itemsize


def weight_bytes(infos: dict[str, Any], itemsize: int, tp: int = 1) -> int:
    """The checkpoint's tensors in the model dtype, one rank's share (norms, held in float32, are a rounding)."""
    return sum(math.prod(info.shape) for info in infos.values()) * itemsize // tp


def available_bytes(backend: str) -> tuple[int, str] | None:
    """(bytes free now, where): the GPU's free memory on CUDA, the host's available memory on the CPU; None when
    CUDA cannot be asked (no CuPy, no driver: the CUDA backend explains that, in one place)."""
    if backend == "cuda":
        try:
            import cupy

            return int(cupy.cuda.runtime.memGetInfo()[0]), "the GPU"
        except Exception:  # noqa: BLE001 - see the docstring
            return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "this host"
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "this host"


def gib(n: float) -> str:
    """A size in the largest unit it fills, with enough digits that a small pool never reads as 0.0."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} bytes"


def kv_pool_bytes(num_blocks: int, per_block: int) -> int:
    """What a pool of num_blocks allocates: make_kv_cache (models/base.py) adds one trash block to each group's
    arrays, and per_block counts every group that allocates the blocks (the target's and a draft model's)."""
    return (num_blocks + 1) * per_block


def check_fits(num_blocks: int, per_block: int, weights: int, available: int, where: str,
               what: str = "the weights") -> None:
    """Refuses a KV pool that, with the weights (or what else the engine holds), needs more than is available."""
    need = kv_pool_bytes(num_blocks, per_block)
    if need + weights <= available:
        return
    fit = max(0, (available - weights) // per_block - 1)
    raise ConfigError(f"num_blocks={num_blocks}: the KV cache needs {gib(need)} ({per_block} bytes a block) and "
                      f"{what} {gib(weights)}, but {gib(available)} are available on {where}; at most {fit} blocks "
                      f"fit (lower num_blocks)")


def check_kv_gib(kv_cache_gib: float, weights: int, available: int, where: str) -> None:
    """Refuses a kv_cache_gib that, with the weights, needs more than is available, before anything is allocated
    (100,000 GiB on the CPU used to start sizing and the kernel's OOM killer ended the engine process)."""
    need = int(kv_cache_gib * 2**30)
    if weights + need <= available:
        return
    raise ConfigError(f"kv_cache_gib={kv_cache_gib:g}: the KV cache needs {gib(need)} and the weights {gib(weights)}, "
                      f"but {gib(available)} are available on {where}; at most {gib(max(0, available - weights))} "
                      f"fit (lower kv_cache_gib)")


CPU_KV_DEFAULT_BYTES = 4 * 2**30  # vLLM's CPU default KV space; a quarter of the available memory if less
GRAPH_RESERVE_FRACTION = 0.02  # of the GPU, held back for the start-up graphs' own buffers (not profiled)


@dataclass(frozen=True, slots=True)
class KVPlan:
    """What the KV cache is sized to, and why: the lines the engine prints at start-up."""

    num_blocks: int
    max_model_len: int
    lines: tuple[str, ...]


def gpu_kv_budget(total: int, free_at_start: int, utilization: float, non_kv: int) -> int:
    """vLLM's rule: the engine may hold utilization x the GPU; what the weights, the profiled largest step and
    the graphs' reserve do not take is the KV cache's. A GPU that others already fill past that is refused."""
    requested = int(total * utilization)
    if free_at_start < requested:
        raise ConfigError(f"gpu_memory_utilization={utilization}: the engine may use {gib(requested)} of the GPU's "
                          f"{gib(total)}, but only {gib(free_at_start)} were free at start-up (another process holds "
                          f"the rest); lower gpu_memory_utilization or free the GPU")
    budget = requested - non_kv - int(total * GRAPH_RESERVE_FRACTION)
    if budget <= 0:
        raise ConfigError(f"gpu_memory_utilization={utilization}: {gib(requested)} leaves nothing for the KV cache "
                          f"after the weights and the largest step ({gib(non_kv)}); raise it")
    return budget


def cpu_kv_budget(kv_cache_gib: float | None, available: int) -> int:
    if kv_cache_gib is not None:
        return int(kv_cache_gib * 2**30)
    return min(CPU_KV_DEFAULT_BYTES, available // 4)


def plan_kv(budget: int, per_block: int, block_size: int, groups: int, model_max_len: int,
            max_model_len: int | None, max_num_seqs: int, cap_to_concurrency: bool) -> KVPlan:
    """Blocks from a byte budget (their trash block included), then plan_blocks. cap_to_concurrency (the CPU's
    default): no more blocks than max_num_seqs sequences of max_model_len can use, since on the host every block
    is touched at start-up."""
    blocks = max(0, budget // per_block - 1)
    if cap_to_concurrency:
        want_len = max_model_len if max_model_len is not None else model_max_len
        blocks = min(blocks, max_num_seqs * -(-want_len // block_size) * groups)
    return plan_blocks(blocks, per_block, block_size, groups, model_max_len, max_model_len,
                       f"the KV cache budget {gib(budget)}", "give it more memory")


def plan_blocks(blocks: int, per_block: int, block_size: int, groups: int, model_max_len: int,
                max_model_len: int | None, source: str, remedy: str) -> KVPlan:
    """max_model_len when not given: model_max_len, capped by what the blocks hold (a request holds as many blocks
    in every group). A pool that cannot hold one request of two tokens (a prompt token and one generated) is
    refused with what it needs, never settled to a length of 0."""
    need = -(-2 // block_size) * groups
    if blocks < need:
        each = "; a draft model holds as many as the target" if groups > 1 else ""
        raise CapacityError(f"{source} holds {blocks} KV blocks of {block_size} tokens ({gib(per_block)} each): not "
                            f"one request; it needs at least {need}{each}; {remedy}")
    want_len = max_model_len if max_model_len is not None else model_max_len
    lines = []
    if max_model_len is None:
        fits = blocks // groups * block_size
        if fits < want_len:
            lines.append(f"max_model_len {fits}: the checkpoint's {model_max_len} does not fit the KV cache "
                         f"({blocks} blocks); give more memory or a smaller max_model_len")
            want_len = fits
        else:
            lines.append(f"max_model_len {want_len}, from the checkpoint")
    per_seq = -(-want_len // block_size) * groups
    pool = kv_pool_bytes(blocks, per_block)
    lines.append(f"KV cache: {blocks} blocks ({gib(pool)}, {pool} bytes with the trash block"
                 f"{', the target and the draft' if groups > 1 else ''}; {blocks * block_size // groups} tokens); "
                 f"{blocks // per_seq} requests of {want_len} tokens fit at once")
    return KVPlan(blocks, want_len, tuple(lines))
