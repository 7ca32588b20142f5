"""backend="auto" (the default): CUDA where CuPy sees a GPU, else the CPU; decided once, in the config."""

from __future__ import annotations

import sys
import types

import pytest

from vt.engine.config import EngineConfig


def fake_cupy(devices: int | Exception) -> types.ModuleType:
    def count() -> int:
        if isinstance(devices, Exception):
            raise devices
        return devices

    mod = types.ModuleType("cupy")
    mod.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=count))  # type: ignore[attr-defined]
    return mod


@pytest.mark.parametrize("devices,want", [(1, "cuda"), (0, "cpu"), (RuntimeError("no CUDA driver"), "cpu")])
def test_auto_picks_cuda_only_where_cupy_sees_a_gpu(monkeypatch, devices, want: str) -> None:
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(devices))
    assert EngineConfig(model="tiny-qwen3").backend == want
    assert EngineConfig(model="tiny-qwen3", backend="cpu").backend == "cpu", "an explicit backend is kept"


def test_without_cupy_auto_is_the_cpu(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    assert EngineConfig(model="tiny-qwen3").backend == "cpu"
