"""Pool get+put round trip on the hit path vs a bare dict-of-lists free list, in one run.

Read the ratio, not the absolute numbers: `pytest benchmarks/ --benchmark-only` prints both rows;
the floor is what any Python free list must pay (a dict lookup, a pop, an append).
"""

from __future__ import annotations

from tests.helpers import MockAllocator
from vt.pool import DevicePool

N = 1 << 20  # 1 MiB, as in the CuPy anchor (1.21 us per malloc+free on an H200 host)


def test_pool_get_put_hit(benchmark) -> None:
    pool = DevicePool(MockAllocator(), bypass=False)
    pool.put(pool.get(N))

    def round_trip() -> None:
        pool.put(pool.get(N))

    benchmark(round_trip)
    assert pool.stats()["misses"] == 1


def test_floor_dict_of_lists(benchmark) -> None:
    free: dict[int, list[object]] = {N: [object()]}

    def round_trip() -> None:
        lst = free[N]
        b = lst.pop()
        free[N].append(b)

    benchmark(round_trip)
