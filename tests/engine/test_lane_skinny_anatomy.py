"""scripts/skinny-anatomy refuses a case it cannot time (not MxNxK, a shape the skinny GEMM does not serve, no
reps) as vt's CLI does: exit 2 and one line naming it, never a traceback, before any device; its default cases
pass those checks and, on a machine without CUDA, stop at the device check in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKINNY_REFUSALS = {  # name: (arguments, what the one line must name)
    "not-a-case": (["--cases", "1x1024"], "--cases '1x1024': MxNxK"),
    "too-many-rows": (["--cases", "1x1024x1024,9x1024x1024"], "'9x1024x1024': not a shape the skinny GEMM serves"),
    "swiglu-half-pairs": (["--cases", "1x1000x64+swiglu"], "'1x1000x64+swiglu': not a shape the skinny GEMM serves"),
    "no-reps": (["--reps", "0"], "--reps must be at least 1"),
}


@pytest.mark.parametrize("case", sorted(SKINNY_REFUSALS))
def test_skinny_anatomy_refuses_a_case_it_cannot_time_before_any_device(case: str) -> None:
    args, names = SKINNY_REFUSALS[case]
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "skinny-anatomy"), *args], capture_output=True,
                       text=True, timeout=120, cwd=ROOT)
    lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith("usage:") and not x.startswith("  ")]
    assert (r.returncode, "Traceback" in r.stderr) == (2, False), r.stderr[-2000:]
    assert len(lines) == 1 and names in lines[0], r.stderr


def test_skinny_anatomy_without_cuda_is_one_line() -> None:
    """The default cases pass the checks above (non-vacuity: they refuse only what they name) and stop at the device
    check on a machine without CUDA."""
    try:
        import cupy  # noqa: F401

        pytest.skip("CuPy is here: this machine may time the kernels")
    except ImportError:
        pass
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "skinny-anatomy"), "--reps", "1"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "skinny-anatomy: needs CUDA" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
