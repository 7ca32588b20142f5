"""The mutation runner's baseline deadline, on the fixture project: a hanging baseline stops the run naming
it. Apart from test_runner.py and test_runner_hangs.py (each waits out a mutant's deadline)."""

from __future__ import annotations

from pathlib import Path

from mutations.runner import BaselineError
from tests.helpers import ends_within
from tests.mutations.runner_rig import BREAK_ADD, M, T, run


def test_a_hanging_baseline_stops_the_run_naming_it(project: Path) -> None:
    calc = project / "calc.py"
    slow = "    import time\n    time.sleep(90)\n    return x * k"
    calc.write_text(calc.read_text().replace("    return x * k", slow))
    box = ends_within(lambda: run(project, M("any", **BREAK_ADD, gates=(f"{T}::test_scale",)),
                                   baseline_timeout=3.0), 15)  # ~4 s: the 3 s deadline, the sandbox, xdist
    assert isinstance(box.get("error"), BaselineError) and "a hang" in str(box["error"]), box
