"""A kernel of the library: one semantics, two bodies. The NumPy twin is the reference (the CPU backend runs
it as one launch on plain arrays, so it is charged nothing, as the CUDA kernel with preallocated outputs
allocates nothing); the CUDA body launches the `.cu` kernel through CuPy. Which body runs follows the
array namespace a backend launches with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

NULL = np.uint64(0)  # a null pointer argument (an optional input left out)
CTYPE = {"float32": "float", "uint16": "vt::bf16", "float16": "vt::f16"}  # uint16 holds bf16 bits (vt/dtypes.py)
# The head dims the attention and rotary kernels serve, every one compiled in CI: the decode kernel sums a key's
# dims over a power-of-two count of lanes (xor shuffles), the prefill kernel's tensor-core tiles take 16 dims at a
# time in fixed per-thread copy slots. The CUDA backend refuses any other head dim when it loads a model.
HEAD_DIMS = (16, 32, 64, 128, 256)


def ctype(dtype: Any) -> str:
    """The C++ storage type of a NumPy / CuPy dtype, as the kernels' templates name it."""
    return CTYPE[np.dtype(dtype).name]


def grid_1d(n: int, threads: int = 256, max_blocks: int = 132 * 16) -> tuple[tuple[int], tuple[int]]:
    """The one launch-config helper for grid-stride loops over n elements."""
    return (max(1, min(max_blocks, -(-n // threads))),), (threads,)


class FusedKernel:
    """kernel(xp, *arrays, **scalars), as every vt kernel; `writes` names the outputs by argument position
    (the CPU stream simulator reads it)."""

    def __init__(self, name: str, twin: Callable[..., None], cuda: Callable[..., None], writes: tuple[int, ...]):
        self.__name__ = name
        self.twin, self.cuda, self.writes = twin, cuda, writes

    def __call__(self, xp: Any, *args: Any, **kw: Any) -> None:
        if hasattr(xp, "RawModule"):
            self.cuda(xp, *args, **kw)
        else:
            self.twin(*(_host(a) for a in args), **{k: _host(v) for k, v in kw.items()})

    def __repr__(self) -> str:
        return f"<kernel {self.__name__}>"


def _host(a: Any) -> Any:
    return np.asarray(a) if isinstance(a, np.ndarray) else a
