"""Flags are read once per process."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import MockAllocator
from vt.env import Flags, as_environ, flags
from vt.pool import DevicePool


def test_flags_are_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    first = flags()
    monkeypatch.setenv("VT_POOL_BYPASS", "0" if first.pool_bypass else "1")
    assert flags() is first and flags().pool_bypass == first.pool_bypass


def test_pool_lane_does_not_change_when_the_environment_does(monkeypatch: pytest.MonkeyPatch) -> None:
    lane = flags().pool_bypass
    monkeypatch.setenv("VT_POOL_BYPASS", "0" if lane else "1")
    a = MockAllocator()
    pool = DevicePool(a)
    pool.put(pool.get(1000))
    assert bool(a.freed) == lane, "the pool must follow the flag as read at process start"


def test_bad_flag_value_names_the_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VT_CUDAGRAPH", "maybe")
    with pytest.raises(ValueError, match="VT_CUDAGRAPH"):
        Flags.from_environ()


@pytest.mark.parametrize("value", ["32", "100", "-64", "lots"])
def test_a_decode_partition_floor_off_the_offered_ones_names_the_flag(value: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VT_DECODE_MIN_PARTITION", value)
    with pytest.raises(ValueError, match="VT_DECODE_MIN_PARTITION.*128, 256, 64"):
        Flags.from_environ()
    monkeypatch.setenv("VT_DECODE_MIN_PARTITION", "64")
    assert Flags.from_environ().decode_min_partition == 64, "non-vacuity: an offered floor is taken"


@pytest.mark.parametrize("value", ["0", "7", "-8", "all"])
def test_a_rope_row_limit_off_the_offered_ones_names_the_flag(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VT_ROPE_MAX_ROWS", value)
    with pytest.raises(ValueError, match="VT_ROPE_MAX_ROWS"):
        Flags.from_environ()
    monkeypatch.setenv("VT_ROPE_MAX_ROWS", "1024")
    assert Flags.from_environ().rope_max_rows == 1024, "non-vacuity: an offered limit is taken"


@pytest.mark.parametrize("value", ["0", "255", "300", "262144", "any"])
def test_a_rope_key_limit_off_the_offered_ones_names_the_flag(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VT_ROPE_MAX_KEYS", value)
    with pytest.raises(ValueError, match="VT_ROPE_MAX_KEYS.*256, 512"):
        Flags.from_environ()
    monkeypatch.setenv("VT_ROPE_MAX_KEYS", "4096")
    assert Flags.from_environ().rope_max_keys == 4096, "non-vacuity: an offered limit is taken"


def test_pool_stats_print_at_shutdown_when_asked() -> None:
    import os
    import subprocess
    import sys

    code = ("from backends.cpu import CpuBackend\n"
            "b = CpuBackend()\n"
            "b.pool.put(b.pool.get(1000)); b.pool.put(b.pool.get(1000))\n")
    run = lambda flag: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,  # noqa: E731
                                      env={**os.environ, "VT_POOL_STATS": flag}, check=True).stdout
    out = run("1")
    from seams.lanes import is_bypass_lane

    hits = 0 if is_bypass_lane() else 1  # the second get is a hit, except on the bypass lane
    assert "vt pool stats (cpu)" in out and f"'hits': {hits}" in out, out
    assert "vt pool stats" not in run("0"), "non-vacuity: silent without the flag"


def test_the_cpu_backend_sets_blas_threads_as_the_flag_says() -> None:
    """NumPy's BLAS runs VT_BLAS_THREADS threads once a CPU backend exists (a separate process: the flag
    and the limit are process-wide); auto leaves one core to the server and its clients."""
    import os
    import subprocess
    import sys

    code = ("from threadpoolctl import threadpool_info\n"
            "from backends.cpu import CpuBackend\n"
            "CpuBackend()\n"
            "print(sorted({i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'}))\n")
    run = lambda flag: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,  # noqa: E731
                                      env={**os.environ, "VT_BLAS_THREADS": flag}, check=True).stdout.strip()
    cores = os.cpu_count() or 1
    assert run("1") == "[1]"
    assert run("auto") == f"[{max(1, cores - 1)}]"
    assert run("3") == "[3]", "non-vacuity: a count other than auto's is taken as given"


def test_a_bad_blas_thread_count_names_the_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VT_BLAS_THREADS", "0")
    with pytest.raises(ValueError, match="VT_BLAS_THREADS='0'"):
        Flags.from_environ()


def test_a_tensor_parallel_rank_reads_back_every_flag_rank_0_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """as_environ is what a rank's process gets (vt/engine/worker/tp.py): every flag that shapes a step must read
    back as rank 0 read it, a flag added later included (the key and the server's engine process are not a rank's)."""
    import dataclasses
    import os

    from vt.env import as_environ

    base = Flags.from_environ()
    flipped: dict[str, Any] = {}
    for f in dataclasses.fields(Flags):
        value = getattr(base, f.name)
        flipped[f.name] = (not value) if isinstance(value, bool) else value
    flipped |= {"blas_threads": 3, "sampler": "block" if base.sampler == "split" else "split", "cache_dir": "/tmp/x",
                "decode_min_partition": 64 if base.decode_min_partition != 64 else 256,
                "rope_max_rows": 1024 if base.rope_max_rows != 1024 else 8,
                "rope_max_keys": 512 if base.rope_max_keys != 512 else 1024,
                "rows_target_blocks": 8 if base.rows_target_blocks != 8 else 256,
                "rows_min_partition": 64 if base.rows_min_partition != 64 else 128,
                "shared_rows_attention": "rows" if base.shared_rows_attention != "rows" else "off",
                "prefill_heads_a_block": 3 - base.prefill_heads_a_block,
                "decode_early_tiles": 3 - base.decode_early_tiles,
                "decode_merge_in_attention": "cluster" if base.decode_merge_in_attention != "cluster" else "0",
                "decode_mma_from": 2048 if base.decode_mma_from != 2048 else 0,
                "prefill_wgmma": "0" if base.prefill_wgmma != "0" else "1",
                "gemm_plan_cache": "retime" if base.gemm_plan_cache != "retime" else "1"}
    want = Flags(**flipped)
    for name in [k for k in os.environ if k.startswith("VT_")]:
        monkeypatch.delenv(name)
    for k, v in as_environ(want).items():
        monkeypatch.setenv(k, v)
    got = Flags.from_environ()
    not_a_ranks = {"api_key", "engine_process"}
    differ = [f.name for f in dataclasses.fields(Flags)
              if f.name not in not_a_ranks and getattr(got, f.name) != getattr(want, f.name)]
    assert differ == [], f"flags a rank would read differently: {differ}"
    assert sum(isinstance(getattr(want, f.name), bool) for f in dataclasses.fields(Flags)) >= 8, "non-vacuity"
    same = [f.name for f in dataclasses.fields(Flags) if f.name not in not_a_ranks | {"api_key"}
            and getattr(want, f.name) == getattr(base, f.name)]
    assert same == [], f"non-vacuity: flags the test leaves at this process's value, so a rank could not differ: {same}"


@pytest.mark.parametrize("name,value,old_defaults", [("VT_TEMPERATURE_DRAW", "race", ("mass", " MASS ")),
                                                      ("VT_TEMPERATURE_DRAW", "bogus", ("mass",)),
                                                      ("VT_MOE_PREFETCH_BYTES", "4096", ("0", " 0 ")),
                                                      ("VT_MOE_PREFETCH_DOWN", "1", ("0", "false", " Off ", "NO"))])
def test_a_retired_flag_set_to_what_it_no_longer_offers_is_refused_by_name(
        name: str, value: str, old_defaults: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """VT_TEMPERATURE_DRAW chose the race draw until session 24 removed it; the MoE prefetches went in session 45.
    Asked for now, one typed line says so; the old default in any spelling the flag took (a boolean's every "off"),
    any case, padded, or empty, is still read without a word."""
    from vt.errors import ConfigError

    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=rf"{name}=.*removed"):
        Flags.from_environ()
    refused = []
    for unset in (*old_defaults, ""):  # read as every choice flag is: stripped, any case; empty is unset
        monkeypatch.setenv(name, unset)
        try:
            Flags.from_environ()
        except ConfigError as e:
            refused.append(str(e))
    assert not refused, f"the old default refused: {refused}"


# (VT_DECODE_MIN_PARTITION and VT_ROPE_MAX_ROWS have their own tests above, over numeric edges)
@pytest.mark.parametrize("name", ["VT_SAMPLER", "VT_SHARED_ROWS_ATTENTION", "VT_ROWS_TARGET_BLOCKS",
                                  "VT_ROWS_MIN_PARTITION", "VT_PREFILL_HEADS_A_BLOCK", "VT_PREFILL_WGMMA"])
def test_a_choice_flag_refuses_a_value_it_does_not_offer_in_one_typed_line(name: str,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A flag with a few values (a typo in VT_PREFILL_WGMMA=atuo would otherwise pick a kernel silently) refuses any
    other with a ConfigError naming the flag and the value (the CLI's exit 2 and one line); each value it offers
    reads back."""
    from vt.errors import ConfigError

    monkeypatch.setenv(name, "bogus7")
    err: Exception | None = None
    try:
        Flags.from_environ()
    except Exception as e:  # noqa: BLE001 - which exception is the assertion
        err = e
    assert isinstance(err, ConfigError), f"{name}=bogus7: {type(err).__name__} {err} where one typed line was due"
    assert f"{name}='bogus7'" in str(err) and "\n" not in str(err), str(err)
    monkeypatch.delenv(name)
    default = as_environ(Flags.from_environ())[name]
    monkeypatch.setenv(name, default.upper())
    assert as_environ(Flags.from_environ())[name] == default, "non-vacuity: its own value, in any case, reads back"


def test_flag_names_are_every_variable_this_module_reads() -> None:
    """flag_names (what scripts/env-ab accepts) against the names vt/env.py's source hands to os.environ or a reader:
    a flag added later is in it, or this test names it."""
    import re
    from pathlib import Path

    from vt import env

    source = Path(env.__file__).read_text()
    read = set(re.findall(r'(?:environ\.get|_read_\w+)\("(VT_[A-Z0-9_]+)"', source))
    assert read and "VT_DECODE_MIN_PARTITION" in read, "non-vacuity: the source's reads were found"
    assert read <= env.flag_names(), f"read but not named: {sorted(read - env.flag_names())}"
