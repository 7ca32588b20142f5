"""The CI compile check (`python -m backends.kernels.build`) refuses what the GPU's NVRTC refuses: nvcc for sm_90a
compiles a kernel with more than 48 KB of static shared memory, and only the device's ptxas then fails it ("uses
too much shared data"). A kernel of the library that outgrows the limit must fail on the CPU machine."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
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


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_an_instance_with_its_own_target_compiles_for_it_alone() -> None:
    """The wgmma prefill kernel compiles for sm_90a (`Instance.arch`) and fails under the shared `-arch=sm_90a`, whose
    compute_90 PTX rejects wgmma: the check compiles each instance for its own target, and the instance list asks for
    it (an instance that lost its arch would fail CI here, before the device's NVRTC)."""
    from backends.kernels.build import ci_instances, nvcc_check
    from backends.kernels.prefill_attention import WGMMA_ARCH

    wgmma = [i for i in ci_instances() if i.file == "prefill_wgmma.cu"]
    assert wgmma and all(i.arch == WGMMA_ARCH for i in wgmma), "the wgmma instances carry their target"
    one = wgmma[0]
    assert nvcc_check([one]) == []
    failed = nvcc_check([replace(one, arch="")])
    assert len(failed) == 1 and "wgmma" in failed[0][1] and "sm_90" in failed[0][1], failed


def test_the_check_fails_a_kernel_whose_wgmma_ptxas_serializes() -> None:
    """ptxas -v's C7513 (as ptxas 13.0 printed it for session 32's first overlapped prefill kernel, whose softmax
    branched while a P.V was in flight) names the kernel; a log without it names none."""
    from backends.kernels.build import serialized_wgmma

    name = "_ZN2vt19paged_prefill_wgmmaINS_4bf16ES1_Li128ELi2ELb1EEEvPKfPKT_S6_PKxPKiPT0_iiii"
    log = ("ptxas info    : (C7513) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non "
           "wgmma instructions defining input registers of a wgmma between start and end of the pipeline stage in the "
           f"function '{name}'\nptxas info    : Compiling entry function '{name}' for 'sm_90a'\n"
           "ptxas info    : Used 190 registers, used 1 barriers\n")
    assert serialized_wgmma(log) == [name]
    assert serialized_wgmma(log.split("\n", 1)[1]) == [], "non-vacuity: the same log without the line names none"
