"""Tensor parallelism over four ranks on the CPU (apart from the TP = 2 file, whose mutants do not need it)."""

from __future__ import annotations

import pytest

from tests.engine.tp_rig import generate as _generate
from tests.helpers import guarding
from vt.errors import WorkerDied

pytest.importorskip("torch.distributed")


def test_tp4_replicates_the_kv_heads_and_generates_the_tokens_tp1_does() -> None:
    """tiny-qwen3 has 2 KV heads for 4 query heads: over 4 ranks each rank keeps the KV head its query head
    reads (ranks 0 and 1 head 0, ranks 2 and 3 head 1)."""
    one, _ = _generate("tiny-qwen3", 1)
    with guarding("TP = 4 ranks generate the tokens TP = 1 does", WorkerDied):  # a rank that dies generated none
        four, _ = _generate("tiny-qwen3", 4)
    assert four == one, "TP = 4 and TP = 1 generate the same greedy tokens"
