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
    compute_90 PTX rejects wgmma: the check compiles each instance for its own target."""
    from backends.kernels.build import Instance, ci_instances, nvcc_check
    from backends.kernels.prefill_attention import WGMMA_ARCH

    expr = next(i.expr for i in ci_instances() if i.file == "prefill_wgmma.cu")
    one = Instance("prefill_wgmma.cu", expr, arch=WGMMA_ARCH)
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
    registers = ("ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized "
                 f"due to insufficient register resources for the wgmma pipeline in the function '{name}'\n")
    assert serialized_wgmma(registers) == [name], "another reason ptxas gives (too few registers) fails it too"


def test_the_wgmma_instances_carry_their_own_target() -> None:
    """Every instance CI compiles of the wgmma prefill kernel carries the sm_90a target (no nvcc needed: a lost target
    fails here on any machine, before the device's NVRTC would refuse it)."""
    from backends.kernels.build import ci_instances
    from backends.kernels.prefill_attention import WGMMA_ARCH

    wgmma = [i for i in ci_instances() if i.file == "prefill_wgmma.cu"]
    assert len(wgmma) >= 4, "non-vacuity: bf16 and fp16 at head dims 64 and 128"
    assert all(i.arch == WGMMA_ARCH for i in wgmma), "the wgmma instances carry their target"
    assert not any(i.arch for i in ci_instances() if i.file != "prefill_wgmma.cu"), "the others compile for the device"


def test_the_sm90a_cubin_cache_serves_a_second_process_and_replaces_a_bad_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """arch_cubin with NVRTC stood in for (no GPU, no libnvrtc here): the first call compiles and stores the CUBIN under
    $VT_CACHE_DIR/kernels, a second reads it back without compiling, fresh=True (the driver refused the file)
    compiles again and replaces it, a file cut short is compiled over, and no temporary file is left."""
    import sys
    import types

    from backends.kernels.build import arch_cubin
    from tests.helpers import flag_set

    compiled: list[str] = []

    class NVRTCError(Exception):
        pass

    stub = types.ModuleType("cupy_backends.cuda.libs.nvrtc")
    stub.NVRTCError = NVRTCError  # type: ignore[attr-defined]
    stub.getVersion = lambda: (12, 9)  # type: ignore[attr-defined]
    stub.createProgram = lambda text, name, h, i: text  # type: ignore[attr-defined]
    stub.addNameExpression = lambda prog, expr: None  # type: ignore[attr-defined]
    stub.compileProgram = lambda prog, options: compiled.append(prog)  # type: ignore[attr-defined]
    stub.getCUBIN = lambda prog: b"CUBIN" + str(len(compiled)).encode()  # type: ignore[attr-defined]
    stub.getLoweredName = lambda prog, expr: "_Z6kernel"  # type: ignore[attr-defined]
    stub.destroyProgram = lambda prog: None  # type: ignore[attr-defined]
    for name in ("cupy_backends", "cupy_backends.cuda", "cupy_backends.cuda.libs"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "cupy_backends.cuda.libs.nvrtc", stub)
    monkeypatch.setattr(sys.modules["cupy_backends.cuda.libs"], "nvrtc", stub, raising=False)
    opts = ("-arch=sm_90a",)
    with flag_set("VT_CACHE_DIR", str(tmp_path)):
        first = arch_cubin("text", opts, "vt::k<1>")
        assert first == (b"CUBIN1", "_Z6kernel") and len(compiled) == 1
        files = list((tmp_path / "kernels").iterdir())
        assert len(files) == 1 and files[0].suffix == ".cubin", files
        assert arch_cubin("text", opts, "vt::k<1>") == first and len(compiled) == 1, "served from disk"
        assert arch_cubin("text", opts, "vt::k<2>") == (b"CUBIN2", "_Z6kernel"), "another name: compiled"
        assert arch_cubin("text", opts, "vt::k<1>", fresh=True) == (b"CUBIN3", "_Z6kernel")
        assert arch_cubin("text", opts, "vt::k<1>") == (b"CUBIN3", "_Z6kernel"), "the fresh one replaced it"
        files[0].write_bytes(b"_Z6kernel")  # cut short: a name and no CUBIN
        assert arch_cubin("text", opts, "vt::k<1>") == (b"CUBIN4", "_Z6kernel")
    assert sorted(p.suffix for p in (tmp_path / "kernels").iterdir()) == [".cubin", ".cubin"], "no temporary left"
