"""Programmatic dependent launch: which kernels may start before the kernel ahead of them completes, and how a
launch reaches the driver. A captured kernel launched programmatically that read its input before its wait would
read the previous kernel's half-written output: a race no test on a CPU could see in the numbers, so the rule that
prevents it is checked here, on the sources and on the launcher's routing."""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

from backends.kernels import build, launch
from backends.kernels.build import KERNEL_DIR, Kernel, ci_instances, source, waits_first
from tests.helpers import flag_set


def test_every_library_kernel_waits_for_the_kernel_ahead_before_touching_memory() -> None:
    instances = ci_instances()
    late = sorted({i.expr for i in instances if not waits_first(source(i.file), i.expr)})
    assert late == [], f"kernels that would be launched plainly (no programmatic overlap): {late}"
    # non-vacuity: the instances cover every kernel the library's sources define
    defined = {m for f in KERNEL_DIR.glob("*.cu")
               for m in re.findall(r"__global__\s+void\s+(?:(?:__cluster_dims__|__launch_bounds__)\s*\([^)]*\)\s*)*"
                                   r"(\w+)\s*\(", f.read_text())}
    covered = {i.expr.split("<", 1)[0].rsplit("::", 1)[-1] for i in instances}
    assert len(defined) >= 20 and defined <= covered, defined - covered


def _skinny_kernel_bodies() -> list[tuple[str, str]]:
    text = re.sub(r"//[^\n]*", " ", source("skinny_gemm.cu"))
    bodies = re.findall(r"__global__\s+void[^{]*?(skinny_gemm\w*)\s*\([^{]*\{\s*([^;]*;)", text)
    assert {name for name, _ in bodies} == {"skinny_gemm", "skinny_gemm_cluster"}, bodies  # non-vacuity
    return bodies


def test_the_skinny_gemms_ask_l2_for_their_weights_before_the_wait() -> None:
    """A decode GEMM's weights come from L2 once the kernel ahead completes (session 24: a 0.6B step 10 us faster
    on the H200): each skinny kernel's body opens with its prefetch, which the rule below lets it keep."""
    for name, first in _skinny_kernel_bodies():
        assert build.PDL_PREFETCH.match(first), f"{name} opens with {first!r}"


def test_the_skinny_gemms_trigger_the_kernel_after_them_once_their_weights_are_read() -> None:
    """The prefetch pays only if the kernel after a skinny GEMM launches during its tail, not at its start (session
    23: launched at the start, the prefetch ran beside the GEMM's own weight stream, 19 us slower a step). So the
    kernels wait without triggering, and the body triggers after its loop over K, before the reduction."""
    for name, _ in _skinny_kernel_bodies():
        assert waits_first(source("skinny_gemm.cu"), f"vt::{name}<vt::bf16, 1, 8, 4>"), name
    text = re.sub(r"//[^\n]*", " ", source("skinny_gemm.cu"))
    body = text[text.index("skinny_body("):text.index("__global__")]
    assert body.count("vt::pdl_trigger();") == 1 and "vt::pdl_entry();" not in text, "one trigger, no early one"
    trigger, loop, reduce = (body.index(s) for s in ("vt::pdl_trigger();", "load_stream(b", "__shfl_xor_sync"))
    assert loop < trigger < reduce, "the trigger sits after the weight stream and before the reduction"


KERNELS = {
    "first": "__global__ void k(const float* x, float* y) {\n    vt::pdl_entry();\n    y[0] = x[0];\n}",
    "after-a-comment": "__global__ void k(float* y) { // why\n    /* more */ vt::pdl_entry(); y[0] = 1; }",
    "bounded-template": "template <int N>\n__global__ void __launch_bounds__(256)\nk(const float* __restrict__ x,\n"
                        "  float* y) {\n    vt::pdl_entry();\n}",
    "clustered-template": "template <int N>\n__global__ void __cluster_dims__(1, 8, 1) __launch_bounds__(256)\n"
                          "k(float* y) {\n    vt::pdl_entry();\n}",
    # the wait alone (pdl_wait: the kernel triggers its dependents later) is as safe a first statement
    "wait-alone-first": "__global__ void k(const float* x, float* y) {\n    vt::pdl_wait();\n    y[0] = x[0];\n"
                        "    vt::pdl_trigger();\n}",
    "wait-alone-after-a-read": "__global__ void k(const float* x, float* y) {\n    const float v = x[0];\n"
                               "    vt::pdl_wait();\n    y[0] = v;\n}",
    # an L2 prefetch of weights may come first: its arguments are parameters, template constants, coordinates
    "prefetch-then-wait": "template <typename T, int TC>\n__global__ void k(const T* __restrict__ b, int N, int K,\n"
                          "  int slice) {\n    vt::pdl_prefetch_l2(b, N, K, blockIdx.y * slice, slice, min(N, TC * 8), "
                          "TC * 8);\n    vt::pdl_wait();\n}",
    "prefetch-indexes-memory": "__global__ void k(const float* b, const int* rows, int N) {\n"
                               "    vt::pdl_prefetch_l2(b, N, N, rows[blockIdx.x], 1, 0, N);\n    vt::pdl_entry();\n}",
    "prefetch-dereferences": "__global__ void k(const float* b, const int* n) {\n"
                             "    vt::pdl_prefetch_l2(b, *n, 4, 0, 4, 0, 2 * *n);\n    vt::pdl_entry();\n}",
    "prefetch-calls": "__global__ void k(const float* b, int N) {\n"
                      "    vt::pdl_prefetch_l2(b, N, N, first_row(b), 1, 0, N);\n    vt::pdl_entry();\n}",
    "prefetch-of-a-global": "__device__ int rows_done;\n__global__ void k(const float* b, int N) {\n"
                            "    vt::pdl_prefetch_l2(b, N, N, rows_done, 1, 0, N);\n    vt::pdl_entry();\n}",
    # found by review (session 24): a cast's dereference, a global named like a coordinate, a functor's call
    "prefetch-casts-a-dereference": "template <typename T>\n__global__ void k(const float* b, const int* n, int N) {\n"
                                    "    vt::pdl_prefetch_l2(b, N, N, (T)*n, 1, 0, N);\n    vt::pdl_wait();\n}",
    "prefetch-of-a-global-x": "__device__ int x;\n__global__ void k(const float* b, int N) {\n"
                              "    vt::pdl_prefetch_l2(b, N, N, x, 1, 0, N);\n    vt::pdl_wait();\n}",
    "prefetch-calls-a-functor": "template <typename Op>\n__global__ void k(const float* b, Op op, int N) {\n"
                                "    vt::pdl_prefetch_l2(b, N, N, op(0), 1, 0, N);\n    vt::pdl_wait();\n}",
    "prefetch-of-a-scalar-base": "__global__ void k(const float* b, long base, int N) {\n"
                                 "    vt::pdl_prefetch_l2(base, N, N, 0, 1, 0, N);\n    vt::pdl_wait();\n}",
    "other-call-before": "__global__ void k(const float* b, float* y, int N) {\n    vt::fill(y, N, N, 0, 1, 0, N);\n"
                         "    vt::pdl_entry();\n}",
    # declared reads before the wait (VT_READS_BEFORE_WAIT): the step's inputs, which no kernel of the step writes
    "declared-reads-then-wait": "__global__ void k(const long long* rows, const float* x, float* y) {\n"
                                "    VT_READS_BEFORE_WAIT(rows);\n    const long long r = rows[blockIdx.x];\n"
                                "    vt::pdl_entry();\n    if (r < 0) return;\n    y[r] = x[r];\n}",
    "declared-aliases-an-undeclared-pointer": "__global__ void k(const long long* rows, const float* x, float* y) {\n"
                                              "    VT_READS_BEFORE_WAIT(rows);\n    const float* in = x;\n"
                                              "    vt::pdl_entry();\n    y[0] = in[rows[0]];\n}",
    "declared-returns-before-the-wait": "__global__ void k(const long long* rows, float* y) {\n"
                                        "    VT_READS_BEFORE_WAIT(rows);\n    if (rows[blockIdx.x] < 0) return;\n"
                                        "    vt::pdl_entry();\n    y[0] = 1;\n}",
    "declared-writes-through-a-dereference": "__global__ void k(long long* rows, float* y) {\n"
                                             "    VT_READS_BEFORE_WAIT(rows);\n    *(rows + blockIdx.x) = 0;\n"
                                             "    vt::pdl_entry();\n    y[0] = 1;\n}",
    "declared-reads-an-undeclared-pointer": "__global__ void k(const long long* rows, const float* x, float* y) {\n"
                                            "    VT_READS_BEFORE_WAIT(rows);\n    const float v = x[rows[0]];\n"
                                            "    vt::pdl_entry();\n    y[0] = v;\n}",
    "declared-writes-before-the-wait": "__global__ void k(long long* rows, float* y) {\n"
                                       "    VT_READS_BEFORE_WAIT(rows);\n    rows[blockIdx.x] += 1;\n"
                                       "    vt::pdl_entry();\n    y[0] = 1;\n}",
    "declared-wait-in-a-branch": "__global__ void k(const long long* rows, float* y) {\n"
                                 "    VT_READS_BEFORE_WAIT(rows);\n    if (rows[0] > 0) vt::pdl_entry();\n"
                                 "    y[0] = 1;\n}",
    "declared-a-global": "__device__ float g[4];\n__global__ void k(const long long* rows, float* y) {\n"
                         "    VT_READS_BEFORE_WAIT(g);\n    const float v = g[0];\n    vt::pdl_entry();\n"
                         "    y[0] = v;\n}",
    "prefetch-never-waits": "__global__ void k(const float* b, float* y, int N) {\n"
                            "    vt::pdl_prefetch_l2(b, N, N, 0, 1, 0, N);\n    y[0] = b[0];\n}",
    "read-before": "__global__ void k(const float* x, float* y) {\n    const float v = x[0];\n    vt::pdl_entry();\n"
                   "    y[0] = v;\n}",
    "write-before": "__global__ void k(float* y) {\n    y[threadIdx.x] = 0;\n    vt::pdl_entry();\n}",
    "conditional": "__global__ void k(float* y) {\n    if (threadIdx.x == 0) vt::pdl_entry();\n}",
    "never": "__global__ void k(const float* x, float* y) {\n    y[0] = x[0];\n}",
    # the parse cannot tell which body runs, or finds none: never programmatic
    "specialized": "template <typename T>\n__global__ void k(T* y) {\n    vt::pdl_entry();\n}\n"
                   "template <>\n__global__ void k<float>(float* y) {\n    y[0] = 1;\n}",
    "overloaded": "__global__ void k(float* y) {\n    vt::pdl_entry();\n}\n__global__ void k(int* y) {\n"
                  "    y[0] = 1;\n}",
    "if-variants": "#if VT_A\n__global__ void k(float* y) {\n    vt::pdl_entry();\n}\n#else\n"
                   "__global__ void k(float* y) {\n    y[0] = 1;\n}\n#endif",
    "declared-only": "__global__ void k(float* y);\n__global__ void j(float* y) {\n    vt::pdl_entry();\n}",
    "signature-in-a-comment": "// __global__ void k(float* y) { vt::pdl_entry(); }\n__global__ void k(float* y) {\n"
                              "    y[0] = 1;\n    vt::pdl_entry();\n}",
}


@pytest.mark.parametrize("case", sorted(KERNELS))
def test_only_a_kernel_whose_first_statement_is_the_wait_may_launch_programmatically(case: str) -> None:
    safe = case in ("first", "after-a-comment", "bounded-template", "clustered-template", "wait-alone-first",
                    "prefetch-then-wait", "declared-reads-then-wait")
    assert waits_first(KERNELS[case], "vt::k<4>") is safe
    assert waits_first(KERNELS[case], "other") is False  # a kernel the source does not define never qualifies


class FakeRaw:
    def __init__(self) -> None:
        self.plain: list = []

        class Fn:
            ptr = 0xF00

        self.kernel = Fn()

    def __call__(self, grid, block, args, shared_mem=0) -> None:
        self.plain.append((grid, block, args, shared_mem))


@pytest.mark.parametrize("waits", [True, False], ids=["waits", "reads-first"])
@pytest.mark.parametrize("capturing", [True, False], ids=["capturing", "eager"])
@pytest.mark.parametrize("enabled", [True, False], ids=["pdl", "VT_PDL=0"])
def test_a_kernel_launches_programmatically_only_when_it_waits_while_capturing(
        monkeypatch: pytest.MonkeyPatch, waits: bool, capturing: bool, enabled: bool) -> None:
    programmatic: list = []
    monkeypatch.setattr(build, "_programmatic", lambda: enabled)
    monkeypatch.setattr(build, "_capturing_stream", lambda: 0x5EA if capturing else None)
    monkeypatch.setattr(launch, "launch_ex", lambda *a, **kw: programmatic.append(a + (kw,)))
    raw = FakeRaw()
    Kernel(raw, waits)((3,), (128,), (np.int32(7),), shared_mem=64)
    expect = waits and capturing and enabled
    assert (len(programmatic), len(raw.plain)) == ((1, 0) if expect else (0, 1))
    if expect:
        assert programmatic[0] == (0xF00, (3,), (128,), (np.int32(7),), 64, 0x5EA,
                                   {"programmatic": True, "cluster": None})
    else:
        assert raw.plain == [((3,), (128,), (np.int32(7),), 64)]


@pytest.mark.parametrize("capturing", [True, False], ids=["capturing", "eager"])
def test_a_cluster_launch_passes_its_cluster_on_every_path(monkeypatch: pytest.MonkeyPatch, capturing: bool) -> None:
    """A kernel that reads its cluster's shared memory (the decode attention's cluster merge) is launched as clusters
    eagerly too, where CuPy's own call (which has no cluster) would run each block as a cluster of one and merge
    nothing: the driver's call with the cluster, on the capture's stream or the current one."""
    calls: list = []
    monkeypatch.setattr(build, "_programmatic", lambda: True)
    monkeypatch.setattr(build, "_capturing_stream", lambda: 0x5EA if capturing else None)
    monkeypatch.setattr(build, "_current_stream", lambda: 0xC0)
    monkeypatch.setattr(launch, "launch_ex", lambda *a, **kw: calls.append(a + (kw,)))
    raw = FakeRaw()
    Kernel(raw, True)((16, 1, 2), (256,), (np.int32(7),), cluster=(1, 1, 2))
    assert raw.plain == [], "never CuPy's call, which launches no cluster"
    assert calls == [(0xF00, (16, 1, 2), (256,), (np.int32(7),), 0, 0x5EA if capturing else 0xC0,
                      {"programmatic": capturing, "cluster": (1, 1, 2)})]
    Kernel(raw, True)((16, 1, 2), (256,), (np.int32(7),))
    assert len(calls) == 1 + capturing and len(raw.plain) == 1 - capturing, "non-vacuity: without one, as before"


@pytest.mark.parametrize("capturing", [True, False], ids=["capturing", "eager"])
def test_a_kernel_refuses_an_argument_the_programmatic_launch_cannot_pass_captured_or_not(
        monkeypatch: pytest.MonkeyPatch, capturing: bool) -> None:
    """None (CuPy's eager call takes it as a null pointer; the programmatic launch cannot pass it) is refused on both
    paths before anything launches, so a binding that runs eagerly runs captured."""
    programmatic: list = []
    monkeypatch.setattr(build, "_programmatic", lambda: True)
    monkeypatch.setattr(build, "_capturing_stream", lambda: 0x5EA if capturing else None)
    monkeypatch.setattr(launch, "launch_ex", lambda *a, **kw: programmatic.append(a + (kw,)))
    raw = FakeRaw()
    with pytest.raises(TypeError, match="NoneType"):
        Kernel(raw, True)((3,), (128,), (np.int32(7), None), shared_mem=0)
    assert programmatic == [] and raw.plain == [], "nothing launched"
    Kernel(raw, True)((3,), (128,), (np.int32(7), np.uint64(0)), shared_mem=0)
    assert len(programmatic) + len(raw.plain) == 1, "non-vacuity: a null pointer as NULL launches"


class DeviceArray:
    class data:
        ptr = 0x7F00_0000_1234


@pytest.mark.parametrize("value, raw", [
    (np.int32(-7), np.int32(-7).tobytes()),
    (np.float32(1.5), np.float32(1.5).tobytes()),
    (np.uint64(0), bytes(8)),
    (np.int64(1 << 40), np.int64(1 << 40).tobytes()),
    (12, np.int64(12).tobytes()),  # a Python int is an int64, as CuPy passes it
    (0.25, np.float64(0.25).tobytes()),
    (DeviceArray(), np.uint64(0x7F00_0000_1234).tobytes()),
], ids=["int32", "float32", "null", "int64", "py-int", "py-float", "device-array"])
def test_kernel_arguments_reach_the_driver_as_cupy_passes_them(value: object, raw: bytes) -> None:
    arg = launch.argument(value)
    assert ctypes.string_at(ctypes.addressof(arg), ctypes.sizeof(arg)) == raw


def test_an_argument_cupy_cannot_pass_is_refused() -> None:
    with pytest.raises(TypeError, match="str"):
        launch.argument("x")


def test_the_launch_structures_have_the_drivers_layout() -> None:
    # cuda.h: CUlaunchAttribute is a 4-byte id, 4 bytes of padding and a 64-byte union; CUlaunchConfig has seven
    # 4-byte dimensions, the stream (at 32) and attribute pointers, then the attribute count
    assert ctypes.sizeof(launch.LaunchAttribute) == 72 and launch.LaunchAttribute.value.offset == 8
    assert launch.LaunchConfig.stream.offset == 32 and launch.LaunchConfig.num_attrs.offset == 48
    attr = launch._attribute(launch.PROGRAMMATIC_STREAM_SERIALIZATION, 1)
    value = ctypes.string_at(ctypes.addressof(attr) + launch.LaunchAttribute.value.offset, 4)
    assert attr.id == 6 and value == np.int32(1).tobytes()
    # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION (4): the value's first 12 bytes, three unsigned ints x, y, z
    attr = launch._attribute(launch.CLUSTER_DIMENSION, 1, 1, 2)
    value = ctypes.string_at(ctypes.addressof(attr) + launch.LaunchAttribute.value.offset, 16)
    assert attr.id == 4 and value == np.array([1, 1, 2, 0], np.uint32).tobytes()


@pytest.mark.gpu
@pytest.mark.parametrize("early_keys", ["0", "1", "2"])
def test_on_the_gpu_a_captured_decode_step_chains_its_kernels_programmatically_and_computes_the_same(
        monkeypatch: pytest.MonkeyPatch, early_keys: str) -> None:
    """With VT_DECODE_EARLY_KEYS=1 the rope variant (two one-token rows) reads its first keys while the qkv GEMM
    ahead of it still runs, each row's own key (20, 5) in a first tile: the logits equal a plain chain's all the
    same. "2": VT_DECODE_EARLY_TILES=2, two tiles read before the wait, the own keys (200, 150) in the second (head
    dim 16: a block's tile is 128 keys)."""
    from backends.cuda import CudaBackend
    from models.loader import load_checkpoint, resolve_model
    from models.registry import load_model
    from vt.engine.worker.graph_driver import DecodeInputs, GraphDriver

    model = load_model(load_checkpoint(resolve_model("tiny-qwen3")), CudaBackend(), "bfloat16")
    kv = model.make_kv_cache(num_blocks=32, block_size=16)
    if early_keys == "2":
        tables = np.array([list(range(1, 14)), list(range(14, 27))])
        inp = DecodeInputs(np.array([11, 400]), np.array([200, 150]), np.array([13 * 16 + 8, 23 * 16 + 6]), tables)
    else:
        tables = np.array([[3, 5], [7, 9]])
        inp = DecodeInputs(np.array([11, 400]), np.array([20, 5]), np.array([5 * 16 + 4, 7 * 16 + 5]), tables)
    got = {}
    for pdl in (True, False):
        monkeypatch.setattr(build, "_programmatic", lambda pdl=pdl: pdl)
        with (flag_set("VT_DECODE_EARLY_KEYS", "1" if early_keys == "2" else early_keys),
              flag_set("VT_DECODE_EARLY_TILES", "2" if early_keys == "2" else "1")):
            driver = GraphDriver(model, kv, max_num_seqs=4)
            for _ in range(3):  # cold, capture, replay
                driver.step(inp)
        assert driver.num_replays > 0, "non-vacuity: the step replayed a captured graph"
        graph = driver.last_slot.graph
        got[pdl] = graph.programmatic_edges, driver.last_logits()
    layers = model.cfg.num_hidden_layers
    assert got[True][0] >= 2 * layers, f"{got[True][0]} programmatic edges for {layers} layers"
    assert got[False][0] == 0
    np.testing.assert_array_equal(got[True][1], got[False][1])


@pytest.mark.parametrize("status, name", [(900, "CaptureUnsupported"), (901, "CaptureInvalidated"),
                                          (905, "CaptureIsolation")])
def test_a_programmatic_launch_a_capture_refuses_fails_with_vts_typed_error(status: int, name: str) -> None:
    from backends.cuda import _translate

    # as CuPy's own launch errors do, the driver's code rides on `status`, which the backend types
    assert type(_translate(launch.LaunchError(status))).__name__ == name
