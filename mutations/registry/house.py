"""The house (issue 24): the import layers cover every module, vt/parallel.py included."""

from __future__ import annotations

from mutations.model import Mutation

LAYERS = "tests/vt/test_layers.py"

ENTRIES: list[Mutation] = [
    Mutation(
        id="layers-upward-import-in-parallel",
        description="vt/parallel.py (core: models import it) imports the engine, an arrow pointing up",
        file="vt/parallel.py", old="from vt.backend import Backend, Tensor\n",
        new="from vt.backend import Backend, Tensor\nfrom vt.engine.config import EngineConfig  # noqa: F401\n",
        gates=(f"{LAYERS}::test_every_import_points_down_the_layers",),
        expect="vt.parallel (core) imports vt.engine.config (engine)",
    ),
]
