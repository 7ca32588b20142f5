import os
from pathlib import Path

import pytest


def pytest_sessionstart(session):
    sandbox = os.environ.get("VT_MUTATION_SANDBOX")
    if sandbox:
        import calc

        if not Path(calc.__file__).resolve().is_relative_to(Path(sandbox).resolve()):
            raise pytest.UsageError(f"sandbox leak: calc imported from {calc.__file__}")
