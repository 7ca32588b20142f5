"""The tensor-core skinny GEMM stays out of every plan unless VT_SKINNY_MMA asks for it. Apart from
test_skinny_mma.py: where gate files run whole (the mutation runner's --whole-files), the mutant gated here would
otherwise run that file's every shape and configuration."""

from __future__ import annotations

import numpy as np

from backends.kernels import skinny_mma as sm
from tests.helpers import flag_set


def test_the_kernel_is_timed_only_when_asked() -> None:
    """VT_SKINNY_MMA=1 puts the kernel among a 2..16-row plan's candidates; unset, a plan never times it (the tuner
    compares times only: a kernel the H200 has not checked stays out of every plan)."""
    assert not sm.taken(16, 4096, 1024, np.uint16), "off unless asked"
    with flag_set("VT_SKINNY_MMA", "1"):
        assert sm.taken(16, 4096, 1024, np.uint16), "non-vacuity: asked, a shape it serves"
        assert not sm.taken(1, 4096, 1024, np.uint16), "asked, one row stays the CUDA-core kernel's"
