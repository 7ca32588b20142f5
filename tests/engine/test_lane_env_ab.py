"""scripts/env-ab's runs: each setting in its own process with its flag set, the settings' order reversed every
other round, a setting whose process fails named while the others' figures come back, a file per run under
--out; a figure read by index from a `vt ladder --json` array of rows. Its refusals are in
test_lane_env_ab_refusals.py, and a run past its timeout in test_lane_env_ab_timeout.py (its seconds of waiting
kept off the mutants gated here)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_env_ab_runs_each_setting_in_its_own_process_and_alternates_them(tmp_path: Path) -> None:
    """Each process sees its setting (its figure is computed from the flag it got), the settings' order flips every
    other round, and a setting whose process fails is named while the others' figures still come back (rc 1)."""
    log = tmp_path / "order.log"
    child = ("import json, os, sys; v = os.environ.get('VT_DECODE_MIN_PARTITION', '0'); "
             "open(sys.argv[1], 'a').write(v + '\\n'); "
             "sys.exit('no such mode') if v == '64' else print(json.dumps({'n': {'twice': 2 * int(v)}}))")
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "env-ab"), "--set", "VT_DECODE_MIN_PARTITION=256,128,64",
                        "--rounds", "2",
                        "--figures", "n.twice", "--out", str(tmp_path / "ab"), "--", sys.executable, "-c", child,
                        str(log)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    rows = {ln.split("|")[1].strip(): ln.split("|")[3].strip() for ln in r.stdout.splitlines()
            if ln.startswith("| VT_DECODE_MIN_PARTITION=")}
    assert rows == {"VT_DECODE_MIN_PARTITION=256": "512; 512, 512", "VT_DECODE_MIN_PARTITION=128": "256; 256, 256",
                    "VT_DECODE_MIN_PARTITION=64": "-"}, r.stdout
    assert log.read_text().split() == ["256", "128", "64", "64", "128", "256"], "round 0 in order, round 1 reversed"
    assert r.returncode == 1 and "failed: round 0 VT_DECODE_MIN_PARTITION=64: rc 1, no such mode" in r.stdout, \
        r.stdout
    saved = sorted(p.name for p in (tmp_path / "ab").iterdir())
    assert len(saved) == 6, f"a file per run: {saved}"
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+", n) for n in saved), f"names the device runner returns: {saved}"


def test_env_ab_reads_a_ladders_array_of_rows_by_index(tmp_path: Path) -> None:
    """`vt ladder --json` prints its rows as one JSON array: 1.tpot_ms is the second concurrency's figure. An index
    past the array, or a key its row lacks, is a '-' cell, not a crash."""
    child = ("import json, os; v = int(os.environ['VT_DECODE_MIN_PARTITION']) // 64; "
             "print('vt: log line'); print(json.dumps([{'c': 1, 'tpot_ms': v}, {'c': 128, 'tpot_ms': 10 * v}]))")
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "env-ab"), "--set", "VT_DECODE_MIN_PARTITION=64,128",
                        "--rounds", "1",
                        "--figures", "1.tpot_ms,0.tpot_ms,2.tpot_ms,0.ttft_ms", "--", sys.executable, "-c", child],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    rows = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[3:7]] for ln in r.stdout.splitlines()
            if ln.startswith("| VT_DECODE_MIN_PARTITION=")}
    assert rows == {"VT_DECODE_MIN_PARTITION=64": ["10; 10", "1; 1", "-", "-"],
                    "VT_DECODE_MIN_PARTITION=128": ["20; 20", "2; 2", "-", "-"]}, r.stdout
    assert r.returncode == 0, r.stdout + r.stderr
