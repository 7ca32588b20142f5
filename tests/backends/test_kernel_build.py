"""The CI compile check (`python -m backends.kernels.build`) refuses what the GPU's NVRTC refuses: nvcc for sm_90a
compiles a kernel with more than 48 KB of static shared memory, and only the device's ptxas then fails it ("uses
too much shared data"). A kernel of the library that outgrows the limit must fail on the CPU machine."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from backends.kernels.build import NVCC_OPTIONS, over_static_shared


def ptxas_log(tmp_path: Path, shared_bytes: int) -> str:
    unit = tmp_path / f"k{shared_bytes}.cu"
    unit.write_text(f"""extern "C" __global__ void big(float* out) {{
    __shared__ float buf[{shared_bytes // 4}];
    buf[threadIdx.x] = out[threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = buf[{shared_bytes // 4 - 1} - threadIdx.x];
}}
""")
    p = subprocess.run(["nvcc", *NVCC_OPTIONS, "-Xptxas=-v", "-c", str(unit), "-o", str(tmp_path / "k.o")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr  # nvcc itself accepts it: the reason for the check
    return p.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_a_kernel_over_48_kb_of_static_shared_memory_fails_the_compile_check(tmp_path: Path) -> None:
    over = over_static_shared(ptxas_log(tmp_path, 49 * 1024))
    assert [name for name, _ in over] == ["big"], over
    assert over[0][1] >= 49 * 1024
    assert over_static_shared(ptxas_log(tmp_path, 40 * 1024)) == [], "non-vacuity: 40 KB is within the limit"
