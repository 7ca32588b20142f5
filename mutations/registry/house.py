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

# vt/files.py: files kept between processes are replaced whole, and a failed write leaves no temporary.
FILES = "tests/vt/test_files.py"
ENTRIES += [
    Mutation(
        id="replace-whole-leaves-its-temporary",
        description="a failed write leaves its temporary file beside the target: every failure litters the cache",
        file="vt/files.py",
        old="        with contextlib.suppress(OSError):\n            os.unlink(tmp)\n",
        new="        pass\n",
        gates=(f"{FILES}::test_a_failed_write_keeps_the_old_content_and_leaves_no_temporary",),
        expect="a temporary was left",
    ),
    Mutation(
        id="replace-whole-writes-in-place",
        description="the file is written in place, not renamed over: a failed write leaves half a file",
        file="vt/files.py",
        old="    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f\".{path.name}.\", suffix=\".tmp\")\n",
        new="    fd, tmp = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CREAT), f\"{path}.none\"\n",
        gates=(f"{FILES}::test_a_failed_write_keeps_the_old_content_and_leaves_no_temporary",),
        expect="the old content survives",
    ),
]
