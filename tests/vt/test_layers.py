"""The import layers DESIGN.md names, read from the source (every import statement, in functions and
under TYPE_CHECKING too): core <- kernels <- backends, models <- engine <- server, cli, where kernels is the
kernel library (backends/kernels/, which imports only core); every module of the project has a layer;
nothing imports in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = {"vt.backend", "vt.ops", "vt.pool", "vt.capture", "vt.env", "vt.errors", "vt.registry", "vt.dtypes",
        "vt.parallel", "vt.files"}
TOP = {"vt.cli", "vt.conformance", "vt"}  # the command, its tables, and the package's lazy public names
HARNESS = ("tests", "seams", "mutations")


def layer(module: str) -> str | None:
    if module in CORE:
        return "core"
    if module in TOP or module.startswith(("vt.server", "vt.cli")):
        return "top"
    if module == "backends.kernels" or module.startswith("backends.kernels."):
        return "kernels"  # the kernel library: a leaf under backends, models and the engine alike
    for pkg in ("vt.engine", "backends", "models"):
        if module == pkg or module.startswith(pkg + "."):
            return pkg.split(".")[-1]
    if module.split(".")[0] in HARNESS:
        return "harness"
    return None  # third party


ALLOWED = {  # layer -> the layers it may import
    "core": {"core"},
    "kernels": {"core", "kernels"},
    "backends": {"core", "kernels", "backends"},
    "models": {"core", "kernels", "models"},
    "engine": {"core", "kernels", "models", "engine"},
    "top": {"core", "kernels", "backends", "models", "engine", "top"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for pkg in ("vt", "backends", "models"):
        for path in (ROOT / pkg).rglob("*.py"):
            deps = set()
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    deps.add(node.module)
                elif isinstance(node, ast.Import):
                    deps.update(a.name for a in node.names)
            graph[module_name(path)] = {d for d in deps if layer(d) is not None}
    return graph


def test_every_module_of_the_project_has_a_layer() -> None:
    """A module no layer names is read as third party, and its imports go unchecked (vt/parallel.py was)."""
    graph = imports()
    unplaced = sorted(m for m in graph if layer(m) in (None, "harness"))
    assert not unplaced, f"modules with no layer: {unplaced}"
    assert "vt.parallel" in graph and "vt.engine.worker.graph_driver" in graph, "non-vacuity: subpackages were read"


def test_every_import_points_down_the_layers() -> None:
    graph = imports()
    assert len(graph) > 30 and sum(map(len, graph.values())) > 60, "non-vacuity: the project's imports were read"
    assert "vt.backend" in graph["vt.parallel"], "non-vacuity: vt/parallel.py's imports are read and checked"
    wrong = [f"{src} ({layer(src)}) imports {dst} ({layer(dst)})" for src, deps in sorted(graph.items())
             for dst in sorted(deps) if layer(dst) not in ALLOWED[layer(src) or "top"]]
    assert not wrong, "\n".join(wrong)


def test_nothing_imports_in_a_circle() -> None:
    graph = imports()
    graph = {m: {d for d in deps if d in graph and d != m and d != "vt"} for m, deps in graph.items() if m != "vt"}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state and (cycle := visit(d)):
                return cycle
        state[m] = 2
        path.pop()
        return None

    for m in sorted(graph):
        if m not in state and (cycle := visit(m)):
            raise AssertionError("import circle: " + " -> ".join(cycle))
    assert "vt.pool" in graph["backends.cpu"], "non-vacuity: the graph holds real edges"
