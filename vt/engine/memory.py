"""What a KV cache of num_blocks and the weights need, against the memory the backend has, checked before
anything is allocated: a pool that cannot fit is one line with both figures (and how many blocks would fit),
never a process that builds a billion-entry free list or dies in the allocator."""

from __future__ import annotations

import math
import os
from typing import Any

from vt.errors import ConfigError


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
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def check_fits(num_blocks: int, per_block: int, weights: int, available: int, where: str) -> None:
    """Refuses a KV pool that, with the weights, needs more than is available."""
    need = num_blocks * per_block
    if need + weights <= available:
        return
    fit = max(0, (available - weights) // per_block)
    raise ConfigError(f"num_blocks={num_blocks}: the KV cache needs {gib(need)} ({per_block} bytes a block) and the "
                      f"weights {gib(weights)}, but {gib(available)} are available on {where}; at most {fit} blocks "
                      f"fit (lower num_blocks)")
