"""Fixtures the backend tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers import flag_set


@pytest.fixture(params=["0", "4096", "down"], ids=["no-prefetch", "prefetch-4096", "prefetch-down"])
def moe_prefetch(request: pytest.FixtureRequest) -> Iterator[str]:
    """The routed GEMMs with no L2 prefetch, with VT_MOE_PREFETCH_BYTES's, and with VT_MOE_PREFETCH_DOWN's (the
    routing gate/up GEMM asks for the down weights a test hands it and streams its own evict-first): hints, so the
    same values (mutations/registry/moe.py's PREFETCH_IDS name these ids in the GPU mutants' gates)."""
    down = request.param == "down"
    with flag_set("VT_MOE_PREFETCH_BYTES", "0" if down else request.param), \
            flag_set("VT_MOE_PREFETCH_DOWN", "1" if down else "0"):
        yield request.param
