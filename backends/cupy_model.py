"""The CPU backend's model of CuPy's allocations: a CPU step's demand profile is the CUDA step's.

On CUDA every array a kernel creates is a pool block, because CuPy's allocator is routed through the
pool (backends/cuda.py): the temporary of `x * y`, a reduction's output, `arange`, a fancy-index
result. NumPy makes the same arrays from the heap, where the pool never sees them, so a CPU profile
would miss them and the CPU would pre-grow less than a CUDA capture needs. Here, while a kernel
runs eagerly (or is shadow-run for a capture), every array it creates is charged to the pool for
exactly its life: the block goes back when the array's memory is freed, as CuPy's does.

What CuPy allocates beyond NumPy's arrays, measured on an H200 (CuPy 14.2, CUB on by default):
- CUB's segmented reductions (sum/max/min/mean over the trailing axes of a C-contiguous array) take
  1 byte of temp storage after the output, returned when the call returns. `argmax` over an axis is
  not a CUB reduction and takes none.
- The GEMM's staged operands and outputs: both backends stage through backends/gemm.py, so both
  make the same copies.
"""

from __future__ import annotations

import threading
import types
import weakref
from typing import Any

import numpy as np

from backends.gemm import numpy_sgemm, staged_matmul

CUB_TEMP_BYTES = 1
_CUB_UFUNCS = (np.add, np.maximum, np.minimum)
_CUB_FUNCTIONS = {np.sum, np.mean, np.max, np.min, np.amax, np.amin}
_CREATORS = ("arange", "empty", "zeros", "ones", "full", "asarray", "array", "ascontiguousarray")


class Charger:
    """Charges the arrays a kernel creates to a backend's pool; each block goes back when its array's
    memory is freed.

    A kernel's pool traffic depends on its arguments' shapes, never their values (a capturable kernel
    has no data-dependent allocation), so the first launch at a signature runs charged and records its
    traffic as a plan; later launches at that signature run on plain arrays and replay the plan: the
    same gets and puts in the same order, at NumPy's speed."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self._held: dict[int, Any] = {}  # id(memory owner) -> (weakref to it, its pool block, log index)
        self.plans: dict[tuple, list[tuple[str, int]]] = {}  # signature -> [("get", nbytes) | ("put", get #)]
        self._log: list[tuple[str, int]] | None = None

    def call(self, kernel: Any, xp: Any, arrays: list, kwarrays: dict, *, execute: bool = True) -> None:
        """Runs kernel(xp, *arrays, **kwarrays) with its pool traffic; execute=False charges only."""
        key = _signature(kernel, arrays, kwarrays)
        plan = self.plans.get(key) if key is not None else None
        if plan is not None:
            self._replay(plan)
            if execute:
                kernel(xp, *arrays, **kwarrays)
            return
        log: list[tuple[str, int]] = []
        self._log = log
        try:
            args = [a.view(DeviceArray) if type(a) is np.ndarray else a for a in arrays]
            kw = {k: (v.view(DeviceArray) if type(v) is np.ndarray else v) for k, v in kwarrays.items()}
            run_charged(self, lambda: kernel(xp, *args, **kw))
        finally:
            self._log = None
        if key is not None and 2 * sum(op == "put" for op, _ in log) == len(log):
            self.plans[key] = log  # complete: every array the kernel made died inside it

    def _replay(self, plan: list[tuple[str, int]]) -> None:
        blocks: list[Any] = [None] * len(plan)  # by plan position of the get
        try:
            for i, (op, n) in enumerate(plan):
                if op == "get":
                    blocks[i] = self.backend.attribution.get(n)
                else:
                    self.backend.pool.put(blocks[n])
                    blocks[n] = None
        except BaseException:
            for blk in blocks:
                if blk is not None:
                    self.backend.pool.put(blk)
            raise

    def charge(self, a: Any) -> None:
        root = _root(a)
        key = id(root)
        if key not in self._held:
            self._hold(root, key)

    def new(self, r: Any) -> Any:
        """r (an ndarray a ufunc or a creation function just made) charged, as a DeviceArray."""
        self._hold(r, id(r))
        return r.view(DeviceArray)

    def _hold(self, owner: Any, key: int) -> None:
        blk = self.backend.attribution.get(owner.nbytes)
        index = self._record("get", owner.nbytes)
        self._held[key] = (weakref.ref(owner, self._releaser(key)), blk, index)

    def _releaser(self, key: int) -> Any:
        return lambda _ref: self._release(key)

    def _release(self, key: int) -> None:
        _, blk, index = self._held.pop(key)
        self._record("put", index)
        self.backend.pool.put(blk)

    def _record(self, op: str, n: int) -> int:
        if self._log is None:
            return -1
        self._log.append((op, n))
        return len(self._log) - 1

    def cub_temp(self) -> None:
        index = self._record("get", CUB_TEMP_BYTES)
        self.backend.pool.put(self.backend.attribution.get(CUB_TEMP_BYTES))
        self._record("put", index)

    def wrap(self, r: Any, inputs: tuple = ()) -> Any:
        """r as a DeviceArray, charged if it is new memory (not a view of one of `inputs`)."""
        if not isinstance(r, np.ndarray):
            return r
        root = _root(r)
        if all(_root(x) is not root for x in _arrays(inputs)):
            self.charge(root)
        return r.view(DeviceArray)


def _signature(kernel: Any, arrays: list, kwarrays: dict) -> tuple | None:
    """What a kernel's pool traffic depends on: its arrays' shapes, dtypes and strides and its other
    arguments, when those are plain scalars; None (never cached) for anything else (host metadata)."""
    parts: list[Any] = [kernel]
    for name, v in (*enumerate(arrays), *kwarrays.items()):
        if isinstance(v, np.ndarray):
            parts.append((name, v.shape, v.dtype.str, v.strides))
        elif v is None or type(v) in (int, float, bool, str):
            parts.append((name, v))
        else:
            return None
    return tuple(parts)


_tls = threading.local()  # .charger: the charger of the kernel this thread runs now, if any


def _active() -> Charger | None:
    return getattr(_tls, "charger", None)


def _root(a: Any) -> Any:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _arrays(xs: Any) -> list:
    out: list = []
    for x in xs:
        if isinstance(x, np.ndarray):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            out += [y for y in x if isinstance(y, np.ndarray)]
    return out


def _plain(x: Any) -> Any:
    t = type(x)
    if t is DeviceArray:
        return x.view(np.ndarray)
    if t is tuple or t is list:
        return t([_plain(y) for y in x])
    return x


def _is_basic_index(key: Any) -> bool:
    """Ints, slices, None and Ellipsis only: the result is a view."""
    if type(key) is not tuple:
        key = (key,)
    return all(k is None or k is Ellipsis or type(k) in (int, slice) for k in key)


def _is_cub_reduction(a: Any, axis: Any) -> bool:
    """CuPy sends a reduction to CUB's segmented reduce when it covers the trailing axes of a
    C-contiguous array."""
    if axis is None or not a.flags.c_contiguous:
        return False
    axes = sorted(ax % a.ndim for ax in (axis if isinstance(axis, tuple) else (axis,)))
    return axes == list(range(a.ndim - len(axes), a.ndim))


class DeviceArray(np.ndarray):
    """An array inside a CPU kernel: what it creates is charged as CuPy's allocator would be."""

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kw: Any) -> Any:
        out = kw.get("out")
        if out is not None:
            kw["out"] = tuple([_plain(o) for o in out])
        args = [i.view(np.ndarray) if type(i) is DeviceArray else i for i in inputs]
        r = ufunc(*args, **kw) if method == "__call__" else getattr(ufunc, method)(*args, **kw)
        if out is not None:
            return out[0] if len(out) == 1 else out
        c = _active()
        if c is None or type(r) is not np.ndarray:
            return r
        r = c.new(r)  # a ufunc without `out` always makes new memory
        if method == "reduce" and ufunc in _CUB_UFUNCS and _is_cub_reduction(inputs[0], kw.get("axis", 0)):
            c.cub_temp()
        return r

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        r = func._implementation(*_plain(args), **{k: _plain(v) for k, v in kwargs.items()})
        c = _active()
        if c is None or kwargs.get("out") is not None:
            return r
        r = c.wrap(r, (*args, *kwargs.values()))
        axis = kwargs.get("axis", args[1] if len(args) > 1 else None)
        if func in _CUB_FUNCTIONS and _is_cub_reduction(args[0], axis):
            c.cub_temp()
        return r

    # Methods that make new arrays without passing through the two protocols above.
    def _made(self, name: str, *args: Any, **kw: Any) -> Any:
        r = getattr(self.view(np.ndarray), name)(*args, **kw)
        c = _active()
        return r if c is None else c.wrap(r, (self,))

    def __getitem__(self, key: Any) -> Any:
        if _is_basic_index(key):
            return np.ndarray.__getitem__(self, key)  # a view: nothing to charge
        return self._made("__getitem__", _plain(key))

    def copy(self, *args: Any, **kw: Any) -> Any:  # type: ignore[override]
        return self._made("copy", *args, **kw)

    def astype(self, *args: Any, **kw: Any) -> Any:  # type: ignore[override]
        return self._made("astype", *args, **kw)

    def reshape(self, *args: Any, **kw: Any) -> Any:  # type: ignore[override]
        r = np.ndarray.reshape(self, *args, **kw)
        if np.may_share_memory(r, self) or (c := _active()) is None:
            return r  # a view
        return c.wrap(r.view(np.ndarray), (self,))

    def ravel(self, *args: Any, **kw: Any) -> Any:  # type: ignore[override]
        return self._made("ravel", *args, **kw)

    def flatten(self, *args: Any, **kw: Any) -> Any:  # type: ignore[override]
        return self._made("flatten", *args, **kw)

    def argmax(self, *args: Any, **kw: Any) -> Any:  # type: ignore[override]
        return self._made("argmax", *args, **kw)

    def argmin(self, *args: Any, **kw: Any) -> Any:  # type: ignore[override]
        return self._made("argmin", *args, **kw)


def _creator(fn: Any) -> Any:
    def make(*args: Any, **kw: Any) -> Any:
        r = fn(*_plain(args), **kw)
        c = _active()
        return r if c is None else c.wrap(r, args)

    return make


def modeled_numpy(charger: Charger) -> types.SimpleNamespace:
    """The CPU backend's `xp`: NumPy, with creation functions charged and GEMMs staged as on CUDA."""
    xp = types.SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
    for name in _CREATORS:
        setattr(xp, name, _creator(getattr(np, name)))
    xp.matmul = lambda a, b, out=None: staged_matmul(xp, numpy_sgemm, a, b, out)
    return xp


def run_charged(charger: Charger, fn: Any) -> Any:
    """Runs fn (a kernel call) with `charger` charging the arrays it creates."""
    prev = _active()
    _tls.charger = charger
    try:
        return fn()
    finally:
        _tls.charger = prev
