"""scripts/issue-slots' SASS reading: a loop is a backward branch's body, counted by opcode; a forward branch is
no loop. Its figures back kernel commits' instruction counts, so the reading is tested here, on text."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import load_script

ROOT = Path(__file__).resolve().parents[2]
SASS = """
        /*0000*/                   IMAD.MOV.U32 R1, RZ, RZ, c[0x0][0x28] ;
        /*0010*/              @P0 BRA 0x40 ;
        /*0020*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0030*/                   LDSM.16.M88.4 R8, [R2] ;
        /*0040*/                   HMMA.16816.F32.BF16 R4, R8, R14, R4 ;
        /*0050*/                   FMUL R5, R5, R6 ;
        /*0060*/              @!P1 BRA 0x20 ;
        /*0070*/                   EXIT ;
"""



def test_a_backward_branch_is_a_loop_counted_by_opcode() -> None:
    found = load_script("issue-slots").loops(SASS)
    assert [(lo, hi) for lo, hi, _ in found] == [(0x20, 0x60)], "one loop: the forward branch at 0x10 is none"
    ops = found[0][2]
    assert (ops["HMMA"], ops["LDSM"], ops["FMUL"], ops["BRA"]) == (2, 1, 1, 1)
    assert sum(ops.values()) == 5 and "EXIT" not in ops, "non-vacuity: only the body's five instructions"


def test_without_nvcc_it_says_so_in_one_line_and_exits_2() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "issue-slots"), "paged_decode"], capture_output=True,
                       text=True, env={"PATH": "/nonexistent"})
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "nvcc not found" in r.stderr, r.stderr
