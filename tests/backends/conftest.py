"""Fixtures the backend tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers import flag_set


@pytest.fixture(params=["0", "4096"], ids=["no-prefetch", "prefetch-4096"])
def moe_prefetch(request: pytest.FixtureRequest) -> Iterator[str]:
    """The routed GEMMs with and without VT_MOE_PREFETCH_BYTES's L2 prefetch: a hint, so the same values
    (mutations/registry/moe.py's PREFETCH_IDS name these ids in the GPU mutants' gates)."""
    with flag_set("VT_MOE_PREFETCH_BYTES", request.param):
        yield request.param
