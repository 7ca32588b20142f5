"""GPU benchmarks skip cleanly without a GPU, as the gpu tests do (one hook, shared)."""

from tests.conftest import pytest_collection_modifyitems  # noqa: F401
