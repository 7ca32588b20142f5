"""scripts/env-ab (the lane's A/B over vt's flags in one call) refuses bad input as vt's CLI does: exit 2 and one
line naming the problem (a malformed or repeated --set, a flag vt/env.py does not read or a value it refuses, no
command or one it cannot find, no rounds, an --out it cannot write), never a traceback, before it runs anything.
Its runs: test_lane_env_ab.py and test_lane_env_ab_timeout.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV_AB_REFUSALS = {  # name: (arguments, what the one line must name)
    "not-a-flag": (["--set", "PDL=1,0", "--", "true"], "--set 'PDL=1,0': expected VT_NAME=value"),
    "empty-value": (["--set", "VT_PDL=1,", "--", "true"], "--set 'VT_PDL=1,': expected VT_NAME=value"),
    "twice": (["--set", "VT_PDL=1", "--set", "VT_PDL=0", "--", "true"], "VT_PDL is set twice"),
    "a-typo": (["--set", "VT_DECODE_MIN_PARTITONS=64", "--", "true"], "is not a flag vt/env.py reads"),
    "no-set": (["--", "true"], "--set: at least one flag"),
    "no-command": (["--set", "VT_PDL=1,0"], "no command"),
    "no-rounds": (["--set", "VT_PDL=1,0", "--rounds", "0", "--", "true"], "--rounds must be at least 1"),
    "no-such-command": (["--set", "VT_PDL=1", "--", "no-such-command-vt"], "'no-such-command-vt': no such command"),
    "out-not-writable": (["--set", "VT_PDL=1", "--out", "/proc/vt-ab", "--", "true"], "--out '/proc/vt-ab':"),
    "a-value-vt-refuses": (["--set", "VT_ROPE_MAX_ROWS=8,3", "--", "true"],
                           "--set 'VT_ROPE_MAX_ROWS=8,3': VT_ROPE_MAX_ROWS='3': expected one of"),
}


@pytest.mark.parametrize("case", sorted(ENV_AB_REFUSALS))
def test_env_ab_refuses_bad_input_with_one_line(case: str) -> None:
    args, names = ENV_AB_REFUSALS[case]
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "env-ab"), *args], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith("usage:") and not x.startswith("  ")]
    assert (r.returncode, "Traceback" in r.stderr) == (2, False), r.stderr[-2000:]
    assert len(lines) == 1 and names in lines[0], r.stderr
