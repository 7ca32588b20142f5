from __future__ import annotations

import functools

import pytest


@functools.cache
def has_cuda() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if has_cuda():
        return
    skip = pytest.mark.skip(reason="gpu: no CUDA GPU with CuPy on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
