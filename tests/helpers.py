"""Small shared test helpers (a mock allocator for the pool, kernels for the backends, scripts as modules, faults
turned into the failing assertion of the guarantee they break)."""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from vt.backend import Buffer


class MockAllocator:
    """Stands in for a backend under the pool: counts and remembers every driver call."""

    name = "mock"

    def __init__(self) -> None:
        self.pool = None
        self.allocs: list[int] = []
        self.freed: list[Buffer] = []
        self.live: dict[int, Buffer] = {}
        self._next = 1
        self.capturing = False

    def alloc(self, nbytes: int) -> Buffer:
        if nbytes <= 0:
            raise ValueError(nbytes)
        buf = Buffer(self, nbytes, None, self._next, None)  # type: ignore[arg-type]
        self._next += 1
        self.allocs.append(nbytes)
        self.live[buf.id] = buf
        return buf

    def free(self, buf: Buffer) -> None:
        assert buf.id in self.live, f"driver free of unknown or freed buffer {buf.id}"
        del self.live[buf.id]
        buf.is_freed = True
        self.freed.append(buf)

    def _any_capture_active(self) -> bool:
        return self.capturing


def k_add(xp: Any, x: Any, y: Any, out: Any) -> None:
    xp.add(x, y, out=out)


def k_mul(xp: Any, x: Any, y: Any, out: Any) -> None:
    xp.multiply(x, y, out=out)


def k_tanh(xp: Any, x: Any, out: Any) -> None:
    xp.tanh(x, out=out)


def k_gemm(xp: Any, a: Any, b: Any, out: Any) -> None:
    xp.matmul(a, b, out=out)


def ends_within(fn: Any, seconds: float) -> dict[str, Any]:
    """{"value": fn()} or {"error": what it raised}, if fn ended within seconds, run in a daemon thread; the
    calling test fails by assertion if it is still running (a hang is the defect under test)."""
    import threading

    box: dict[str, Any] = {}

    def go() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            box["error"] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still running after {seconds} s: it hangs"
    return box


def load_script(name: str) -> ModuleType:
    """scripts/<name> (an executable without a .py suffix) imported as a module, its main() not run."""
    path = Path(__file__).resolve().parents[1] / "scripts" / name
    loader = importlib.machinery.SourceFileLoader(name.replace("-", "_"), str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


@contextlib.contextmanager
def flag_set(name: str, value: str | None) -> Iterator[None]:
    """The VT_* flag `name` set to value (None: unset) for the block, as it was after. vt/env.py reads the flags
    once, so their cache is cleared on entering and again on leaving, after the environment is restored."""
    from vt import env

    def put(v: str | None) -> None:
        if v is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = v

    before = os.environ.get(name)
    put(value)
    env.flags.cache_clear()
    try:
        yield
    finally:
        put(before)
        env.flags.cache_clear()


@contextlib.contextmanager
def guarding(guarantee: str, *faults: type[BaseException]) -> Iterator[None]:
    """The block checks `guarantee`: one of `faults` raised in it (vt's CPU emulation of a GPU fault, an engine
    invariant, a raw exception where a typed refusal is the guarantee) fails the test on an assertion that names the
    guarantee, the fault its cause. A gate must go red on its own assertion, not crash (mutations/judge.py's Crashed):
    so the mutant that breaks the guarantee is shown to be caught by the gate, not by whatever the break set off."""
    try:
        yield
    except faults as e:
        if isinstance(e, AssertionError):  # the gate's own assertions stand as they are
            raise
        raise AssertionError(f"{guarantee}: {type(e).__name__}: {e}") from e


def through_the_engine(llm: Any, prompts: list, params: Any) -> list[list[int]]:
    """Each prompt's token ids, run through the LLM's engine as the API server runs a request: a field params leave
    None is the checkpoint's generation_config default (the offline LLM uses given params as they are, as vLLM's)."""
    from vt.engine.core.request import RequestOutput

    reqs = [llm.engine.add_request(p, params) for p in prompts]
    while llm.engine.has_unfinished():
        llm.engine.step()
    return [RequestOutput.of(r).outputs[0].token_ids for r in reqs]
