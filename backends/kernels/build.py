"""How a kernel of the library becomes a callable CUDA function, and the CI compile of every kernel.

One place for compile options (`NVRTC_OPTIONS` at run time through CuPy's RawModule, `NVCC_OPTIONS` for
the CI check). A `.cu` file includes only headers of this folder; `source` inlines them before NVRTC sees
the text, so CuPy's on-disk cache (keyed by the text it compiles) never serves a kernel built against an
older header. Template instantiations are NVRTC name expressions; each op module lists the ones CI must
compile in `CI_INSTANCES`, and `python -m backends.kernels.build` compiles them all with nvcc, without a GPU.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vt.files import replace_whole

KERNEL_DIR = Path(__file__).resolve().parent
NVRTC_OPTIONS = ("--std=c++17",)  # CuPy adds the device's -arch
NVCC_OPTIONS = ("-arch=sm_90a", "-std=c++17")
# An instance with its own target (Instance.arch, e.g. "sm_90a" for wgmma): nvcc's -arch=sm_90a also assembles a
# compute_90 PTX, which rejects wgmma, so such an instance compiles for that target alone.
NVCC_ARCH_OPTIONS = ("-std=c++17",)
_INCLUDE = re.compile(r'^#include "([A-Za-z0-9_.]+)"\s*$', re.M)


@dataclass(frozen=True, slots=True)
class Instance:
    """One compiled kernel: a .cu file of this folder, a name expression in it, and the macros it is built with."""

    file: str
    expr: str
    defines: tuple[tuple[str, int], ...] = ()
    arch: str = ""  # a target of its own ("sm_90a"): compiled for it alone, not for the device's plain one

    @property
    def options(self) -> tuple[str, ...]:
        return tuple(f"-D{k}={v}" for k, v in self.defines)


def source(file: str) -> str:
    """The text of a .cu file with this folder's headers inlined (each once)."""
    seen: set[str] = set()

    def expand(name: str) -> str:
        if name in seen:
            return ""
        seen.add(name)
        text = (KERNEL_DIR / name).read_text()
        return _INCLUDE.sub(lambda m: expand(m.group(1)), text)

    return expand(file)


PDL_ENTRY = "vt::pdl_entry();"  # common.cuh: the wait that makes a programmatic launch safe
PDL_WAIT = "vt::pdl_wait();"  # ... the same wait, the kernel triggering its dependents later (pdl_trigger)
# common.cuh's L2 prefetch of weights, the only statement a kernel may open with before the wait
PDL_PREFETCH = re.compile(r"vt::pdl_prefetch_l2\s*\(([^;{}]*)\)\s*;\s*")
PREFETCH_ARGS = 7  # pdl_prefetch_l2(base, ld, nrows, row0, rows, col0, cols)
# common.cuh's VT_READS_BEFORE_WAIT(names): the pointer parameters a kernel reads before its wait, each one that no
# kernel of a step writes (the step's inputs, the KV cache at keys earlier steps wrote)
PRE_WAIT_READS = re.compile(r"VT_READS_BEFORE_WAIT\s*\(([^;()]*)\)\s*;\s*")
# what the code before a declared kernel's wait may not hold: an assignment through a subscript, a dereference or a
# reference, a member access through a pointer, an atomic, a copy or store call, inline assembly, an increment; and a
# return (a block that ends before its wait breaks the chain: the kernel after waits for this one alone)
_WRITE = re.compile(r"\]\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)|(?:^|[;{}])\s*\(?\s*\*|\w\s*&\s*\w+\s*=(?!=)|"
                    r"\b(?:atomic\w*|memcpy|memset|__st\w+|asm|return)\b|->|\+\+|--")
_OPERATORS = ("+", "-", "*", "/", "%")
_COORD = re.compile(r"(?:blockIdx|threadIdx|blockDim|gridDim)\.[xyz]")
_TOKEN = re.compile(r"(?:blockIdx|threadIdx|blockDim|gridDim)\.[xyz]|\w+|\S")


def _kernel_name(expr: str) -> str:
    """`vt::skinny_gemm<vt::bf16, 1, 8, 4>` -> `skinny_gemm`."""
    return expr.split("<", 1)[0].rsplit("::", 1)[-1]


def waits_first(text: str, expr: str) -> bool:
    """Whether the kernel `expr` names opens its body with PDL_ENTRY (or PDL_WAIT), after nothing but L2 prefetches
    of its weights (PDL_PREFETCH, arguments that read no memory): it then reads and writes nothing before the kernel
    ahead of it in the stream has completed, so it may be launched programmatically. Anything the parse cannot pin
    down is a no: a name not defined exactly once as a kernel (a declaration, an overload, an explicit
    specialization, a variant under #if), or any other statement before the wait."""
    text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)  # a signature in a comment is no definition
    name = re.escape(_kernel_name(expr))
    head = r"__global__\s+void\s+(?:(?:__cluster_dims__|__launch_bounds__)\s*\([^)]*\)\s*)*" + name + r"\s*"
    if len(re.findall(head + r"[(<]", text)) != 1 or len(re.findall(r"\b" + name + r"\s*<[^;{()]*>\s*\(", text)):
        return False
    m = re.search(head + r"\(", text)
    if m is None:
        return False
    depth, i = 1, m.end()
    while depth and i < len(text):  # to the parameter list's closing parenthesis
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    body = re.match(r"\s*\{\s*", text[i:])  # a definition, not a declaration
    if body is None:
        return False
    template = re.search(r"template\s*<([^<>]*)>\s*$", text[:m.start()])
    pointers, scalars = _parameters(text[m.end():i - 1])
    scalars |= _template_values(template[1] if template else "")
    rest = text[i + body.end():]
    while (call := PDL_PREFETCH.match(rest)) is not None:
        if not _reads_nothing(call[1], pointers, scalars):
            return False
        rest = rest[call.end():]
    declared = PRE_WAIT_READS.match(rest)
    if declared is not None:
        rest = _after_declared_reads(rest[declared.end():], {n.strip() for n in declared[1].split(",")}, pointers)
    return rest.startswith((PDL_ENTRY, PDL_WAIT))


def _after_declared_reads(rest: str, names: set[str], pointers: set[str]) -> str:
    """The body from its wait on, when what comes before the wait touches no pointer parameter but the declared ones,
    writes nothing through any (_WRITE: no subscript, dereference or reference assigned, no atomic, copy, store or
    increment), returns nowhere and leaves the wait at the body's top level (braces closed, after a complete
    statement); else '' (the kernel does not wait first). A heuristic over the kernel's own text: the helpers it calls
    before the wait are not read, so they must take only declared pointers, and read through them alone."""
    if not names or not names <= pointers:
        return ""
    found = [i for i in (rest.find(PDL_ENTRY), rest.find(PDL_WAIT)) if i >= 0]
    if not found:
        return ""
    head = rest[:min(found)]
    words = set(re.findall(r"\w+", _COORD.sub(" ", head)))  # blockIdx.x reads no parameter named x
    top_level = head.count("{") == head.count("}") and (not head.strip() or head.rstrip()[-1] in ";}")
    if words & (pointers - names) or _WRITE.search(head) or not top_level:
        return ""
    return rest[min(found):]


def _parameters(decls: str) -> tuple[set[str], set[str]]:
    """A parameter list's names: those of pointers, and those of everything else (each declarator's last word)."""
    pointers: set[str] = set()
    scalars: set[str] = set()
    for d in decls.split(","):
        words = re.findall(r"\w+", d.split("=", 1)[0])
        if words:
            (pointers if "*" in d or "&" in d or "[" in d else scalars).add(words[-1])
    return pointers, scalars


def _template_values(decls: str) -> set[str]:
    """A template's non-type parameters (`int TC`): constants; a type parameter (`typename T`) is no value."""
    out: set[str] = set()
    for d in decls.split(","):
        words = re.findall(r"\w+", d.split("=", 1)[0])
        if len(words) >= 2 and words[0] not in ("typename", "class"):
            out.add(words[-1])
    return out


def _reads_nothing(args: str, pointers: set[str], scalars: set[str]) -> bool:
    """Whether a prefetch's arguments read no memory the kernel ahead may be writing: the base is a pointer parameter
    by name, and the others arithmetic (+ - * / %, parentheses, min and max) over scalar parameters, non-type template
    constants, thread coordinates (blockIdx.x ...) and integer literals. So no indexing, dereference, cast, member,
    global, macro or call but min and max can read memory before the wait."""
    parts, depth, start = [], 0, 0
    for j, ch in enumerate(args + ","):  # split at the top level's commas (min and max hold their own)
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(args[start:j].strip())
            start = j + 1
    if len(parts) != PREFETCH_ARGS or parts[0] not in pointers:
        return False
    for part in parts[1:]:
        toks = _TOKEN.findall(part)
        for j, t in enumerate(toks):
            after = toks[j + 1] if j + 1 < len(toks) else ""
            before = toks[j - 1] if j else ""
            if _COORD.fullmatch(t) or re.fullmatch(r"\d+[uU]?", t):
                ok = after not in ("(", "[")
            elif t in ("min", "max"):
                ok = after == "("
            elif re.fullmatch(r"\w+", t):
                ok = t in scalars and after not in ("(", "[", ".")
            elif t == "(":  # grouping, or min / max's call: never a cast's opening (it follows an operand)
                ok = before in ("", "(", ",", "min", "max", *_OPERATORS)
            elif t == ")":  # never a cast's closing: an operand does not follow it
                ok = after in ("", ")", ",", *_OPERATORS)
            else:  # an operator, or a comma between min's or max's arguments (the top level's are split off)
                ok = t in (",", *_OPERATORS)
            if not ok:
                return False
    return True


class Kernel:
    """A compiled kernel of the library, called as CuPy's RawKernel is: (grid, block, args, shared_mem=0). While the
    current stream captures (a graph's launches, not an eager step's), a kernel that waits first is launched with
    programmatic stream serialization (backends/kernels/launch.py), unless VT_PDL=0."""

    def __init__(self, raw: Any, waits: bool) -> None:
        self.raw, self.waits = raw, waits

    def __call__(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0,
                 cluster: tuple[int, int, int] | None = None) -> None:
        """cluster: launch the grid as thread-block clusters of these blocks (sm_90; a kernel that reads its
        cluster's shared memory must always be launched so)."""
        from backends.kernels.launch import launch_ex

        # None is refused eagerly too: CuPy's own call takes it as a null pointer, the programmatic launch cannot
        # pass it, so a binding passing None ran eagerly and broke only once captured (session 37:
        # moe_route_gemm_rows's optional norm, seen first in the GPU lane's replays). A null pointer is fused.NULL.
        unset = [i for i, a in enumerate(args) if a is None]
        if unset:
            raise TypeError(f"a kernel argument of type NoneType cannot be passed (argument {unset[0]}; a null "
                            "pointer is np.uint64(0))")
        stream = _capturing_stream() if self.waits and _programmatic() else None
        if stream is None and cluster is None:
            self.raw(grid, block, args, shared_mem=shared_mem)
            return
        launch_ex(self.raw.kernel.ptr, grid, block, args, shared_mem, _current_stream() if stream is None else stream,
                  programmatic=stream is not None, cluster=cluster)

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return int(self.raw.max_dynamic_shared_size_bytes)

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, n: int) -> None:
        self.raw.max_dynamic_shared_size_bytes = n


def _programmatic() -> bool:
    from vt.env import flags

    return flags().pdl and _device_waits()


@functools.cache
def _device_waits() -> bool:
    """The wait compiles to `griddepcontrol.wait` only from sm_90 (common.cuh); below it, no programmatic launch."""
    import cupy

    return int(cupy.cuda.Device().compute_capability) >= 90


def _current_stream() -> int:
    import cupy

    return int(cupy.cuda.get_current_stream().ptr)


def _capturing_stream() -> int | None:
    """CuPy's current stream's handle while it captures, else None."""
    import cupy

    stream = cupy.cuda.get_current_stream()
    return int(stream.ptr) if stream.is_capturing() else None


_functions: dict[Instance, Kernel] = {}


def is_loaded(inst: Instance) -> bool:
    """Whether `function` has compiled and loaded inst already (a capture may launch it; it may not load it)."""
    return inst in _functions


def function(cp: Any, inst: Instance) -> Kernel:
    """The kernel of an instance, compiled (NVRTC) and loaded on first use. A first use happens in a slot's cold
    eager step, never inside a capture (loading a module is not a capturable operation)."""
    fn = _functions.get(inst)
    if fn is None:
        templated = "<" in inst.expr or "::" in inst.expr  # a namespaced name needs its lowered name
        text = source(inst.file)
        if inst.arch:
            # -default-device: the kernels' lambdas are device code (NVRTC 12.9 refuses them as host code otherwise)
            options = NVRTC_OPTIONS + inst.options + (f"-arch={inst.arch}", "-default-device")
            raw: Any = _ArchFunction(text, options, inst.expr)
        else:
            raw = cp.RawModule(code=text, options=NVRTC_OPTIONS + inst.options,
                               name_expressions=(inst.expr,) if templated else None).get_function(inst.expr)
        fn = _functions[inst] = Kernel(raw, waits_first(text, inst.expr))
    return fn


class _ArchFunction:
    """A kernel compiled for a target of its own (sm_90a) by NVRTC directly, its CUBIN loaded as a module: CuPy's
    RawModule appends the device's plain -arch, under which wgmma does not assemble. Called and attributed as the
    RawKernel that Kernel wraps (`kernel.ptr`, max_dynamic_shared_size_bytes)."""

    def __init__(self, text: str, options: tuple[str, ...], expr: str) -> None:
        from cupy.cuda import function as cuda_function

        self.module = cuda_function.Module()
        try:
            cubin, name = arch_cubin(text, options, expr)
            self.module.load(cubin)
        except Exception:  # noqa: BLE001 - a cached CUBIN the driver refuses (cut short, corrupt): compile it afresh
            cubin, name = arch_cubin(text, options, expr, fresh=True)
            self.module = cuda_function.Module()
            self.module.load(cubin)
        self.kernel = self.module.get_function(name)

    def __call__(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0) -> None:
        self.kernel(grid, block, args, shared_mem=shared_mem)

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        from cupy_backends.cuda.api import driver

        return int(driver.funcGetAttribute(driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, self.kernel.ptr))

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, n: int) -> None:
        from cupy_backends.cuda.api import driver

        driver.funcSetAttribute(self.kernel.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, n)


def arch_cubin(text: str, options: tuple[str, ...], expr: str, fresh: bool = False) -> tuple[bytes, str]:
    """(CUBIN, lowered name) of `expr` in `text`, from the disk cache under $VT_CACHE_DIR/kernels (keyed by the text,
    options, name and NVRTC's version, as CuPy keys its own), unless fresh, or compiled now and stored there (written
    whole and flushed, then renamed: a reader never sees half a file). A cache that cannot be read or written is
    passed by; one the driver cannot load is replaced (`_ArchFunction` asks again with fresh)."""
    from cupy_backends.cuda.libs import nvrtc

    from vt.env import flags

    key = hashlib.sha256("\0".join((text, *options, expr, repr(nvrtc.getVersion()))).encode()).hexdigest()
    path = Path(flags().cache_dir) / "kernels" / f"{key}.cubin"
    if not fresh:
        try:
            name, _, cubin = path.read_bytes().partition(b"\n")
            if name and cubin:
                return cubin, name.decode()
        except (OSError, UnicodeDecodeError):
            pass
    prog = nvrtc.createProgram(text, "vt_kernel.cu", (), ())
    try:
        # CuPy before 13 spelled it addAddNameExpression
        (getattr(nvrtc, "addNameExpression", None) or nvrtc.addAddNameExpression)(prog, expr)
        try:
            nvrtc.compileProgram(prog, options)
        except nvrtc.NVRTCError as e:
            raise RuntimeError(f"NVRTC {' '.join(options)}: {expr}\n{nvrtc.getProgramLog(prog)}") from e
        cubin, lowered = nvrtc.getCUBIN(prog), nvrtc.getLoweredName(prog, expr)
    finally:
        nvrtc.destroyProgram(prog)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_whole(path, lowered.encode() + b"\n" + cubin)
    except OSError:
        pass
    return cubin, lowered


def ci_instances() -> list[Instance]:
    """Every instance the op modules ask CI to compile."""
    from backends.kernels import (
        activation,
        convert,
        decode_attention,
        moe,
        norm,
        prefill_attention,
        rotary,
        rows_attention,
        sampler,
        skinny_gemm,
        skinny_mma,
        tokens,
    )

    mods = (convert, norm, rotary, activation, decode_attention, prefill_attention, rows_attention, moe, skinny_gemm,
            skinny_mma, sampler, tokens)
    return [i for mod in mods for i in mod.CI_INSTANCES]


STATIC_SHARED_MAX = 48 * 1024  # bytes of __shared__ arrays a kernel may declare (more needs dynamic shared memory)


def over_static_shared(ptxas_log: str) -> list[tuple[str, int]]:
    """(kernel, bytes) for each entry function whose static shared memory, as ptxas -v reports it, is over
    STATIC_SHARED_MAX. nvcc for sm_90a compiles such a kernel; the GPU's NVRTC refuses it ("uses too much shared
    data"), so without this check it would fail first on the device."""
    out, entry = [], ""
    for line in ptxas_log.splitlines():
        if m := re.search(r"Compiling entry function '([^']+)'", line):
            entry = m.group(1)
        elif (m := re.search(r"(\d+) bytes smem", line)) and entry and int(m.group(1)) > STATIC_SHARED_MAX:
            out.append((entry, int(m.group(1))))
    return out


def serialized_wgmma(ptxas_log: str) -> list[str]:
    """The kernels ptxas -v reports with their wgmma serialized (its C75xx "Potential Performance Loss" lines: C7513, an
    instruction might define what an in-flight wgmma reads; C7511, too few registers; C7515, accumulators defined
    between wgmmas): every wgmma of such a kernel waits for the one before. Correct, and slow, so the check fails them
    (nvcc's ptxas here; the device's NVRTC assembles with its own)."""
    return re.findall(r"\(C75\d\d\)[^\n]*wgmma\.mma_async instructions are serialized[^\n]*in the function '([^']+)'",
                      ptxas_log)


def nvcc_check(instances: list[Instance], nvcc: str = "nvcc") -> list[tuple[str, str]]:
    """Compiles each (file, macros) group of instances with nvcc for sm_90a; returns (what, error) per failure."""
    groups: dict[tuple[str, tuple, str], list[str]] = {}
    for inst in instances:
        groups.setdefault((inst.file, inst.defines, inst.arch), []).append(inst.expr)
    with tempfile.TemporaryDirectory() as tmp:

        def compile_unit(n: int, file: str, defines: tuple, arch: str, exprs: list[str]) -> tuple[str, str] | None:
            unit = Path(tmp) / f"unit{n}.cu"
            refs = ",\n    ".join(f"(void*)&{e}" for e in exprs)
            unit.write_text(f'#include "{KERNEL_DIR / file}"\nvoid* vt_ci_instances[] = {{\n    {refs}\n}};\n')
            target = (f"-gencode=arch={arch.replace('sm_', 'compute_')},code={arch}", *NVCC_ARCH_OPTIONS) if arch \
                else NVCC_OPTIONS
            cmd = [nvcc, *target, "-Xptxas=-v", f"-I{KERNEL_DIR}", *Instance(file, "", defines).options, "-c",
                   str(unit), "-o", str(Path(tmp) / f"unit{n}.o")]
            p = subprocess.run(cmd, capture_output=True, text=True)
            what = f"{file} {dict(defines)}{' ' + arch if arch else ''}: {', '.join(exprs)}"
            if p.returncode != 0:
                return what, p.stderr.strip()[-3000:]
            over = over_static_shared(p.stderr)
            if over:
                return what, "static shared memory over 48 KB (NVRTC's ptxas refuses it at load): " + ", ".join(
                    f"{name} {size} bytes" for name, size in over)
            serialized = serialized_wgmma(p.stderr)
            return (what, "wgmma serialized by ptxas (C75xx): " + ", ".join(serialized)) if serialized else None

        # one unit per (file, macros), split in two when large, as many at once as there are cores
        units = [(n, file, defines, arch, part) for n, (file, defines, arch, part) in enumerate(
            (f, d, a, es[i::2]) for (f, d, a), es in groups.items() for i in range(min(2, len(es))))]
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            return [f for f in pool.map(lambda u: compile_unit(*u), units) if f is not None]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m backends.kernels.build",
                                 description="compile every kernel instance with nvcc -arch=sm_90a (no GPU needed)")
    ap.add_argument("--nvcc", default=shutil.which("nvcc") or "nvcc")
    args = ap.parse_args(argv)
    if shutil.which(args.nvcc) is None:
        print(f"nvcc not found ({args.nvcc}): the kernels cannot be checked", file=sys.stderr)
        return 2
    instances = ci_instances()
    failures = nvcc_check(instances, args.nvcc)
    for what, err in failures:
        print(f"FAILED {what}\n{err}\n", file=sys.stderr)
    files = sorted({i.file for i in instances})
    if failures:
        print(f"{len(failures)} compile unit(s) failed")
    else:
        own = sorted({f"{i.file} for {i.arch} alone" for i in instances if i.arch})
        print(f"nvcc {' '.join(NVCC_OPTIONS)}: {len(instances)} kernel instances compiled, from {len(files)} "
              f"files ({', '.join(files)}){'; ' + ', '.join(own) if own else ''}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
