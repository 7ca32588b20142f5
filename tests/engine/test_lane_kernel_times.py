"""scripts/kernel-times sums ncu's durations by kernel; it and scripts/prefix-ttft refuse what they cannot read or
honour (no ncu CSV, a unit it does not know, no duration, no file; --nvtx off CUDA, --anatomy with too short a
prompt or beside --host-profile, a negative --host-profile) with exit 2 and one line, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NCU_CSV = """==PROF== Connected to process 7 (python3)
"ID","Process ID","Kernel Name","Block Size","Grid Size","gpu__time_duration.sum"
"","","","","","nsecond"
"0","7","void vt::paged_rows_attention<bf16, bf16, 128>(const float *, int)","(128, 1, 1)","(8, 8, 16)","13,500"
"1","7","void vt::paged_decode_reduce<bf16, 128>(const float *, int)","(128, 1, 1)","(16, 16, 1)","3,000"
"2","7","void vt::paged_rows_attention<bf16, bf16, 128>(const float *, int)","(128, 1, 1)","(8, 8, 16)","12,500"
==PROF== Disconnected from process 7
"""


def test_kernel_times_sums_ncus_durations_by_kernel(tmp_path: Path) -> None:
    """scripts/kernel-times: each kernel's launches and microseconds (ns in ncu's raw page, thousands separated),
    divided by --per, largest first; the name without its argument list (template arguments kept)."""
    (tmp_path / "hit.csv").write_text(NCU_CSV)
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "kernel-times"), str(tmp_path / "hit.csv"), "--per",
                        "2"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| `")]
    assert rows == ["| `vt::paged_rows_attention<bf16, bf16, 128>` | 1 | 13.0 | 89.7% |",
                    "| `vt::paged_decode_reduce<bf16, 128>` | 0.5 | 1.5 | 10.3% |"], r.stdout
    assert "| total | 1.5 | 14.5 | |" in r.stdout


def test_kernel_times_and_prefix_ttft_refuse_what_they_cannot_read(tmp_path: Path) -> None:
    (tmp_path / "log.txt").write_text("==PROF== no kernels were profiled\n")
    (tmp_path / "ps.csv").write_text(NCU_CSV.replace('"nsecond"', '"psecond"'))
    no_duration = '"0","7","void k()","(1, 1, 1)","(1, 1, 1)","n/a"'
    (tmp_path / "na.csv").write_text("\n".join([*NCU_CSV.splitlines()[:3], no_duration]) + "\n")
    for args, names in ((["kernel-times", str(tmp_path / "log.txt")], "no ncu CSV header"),
                        (["kernel-times", str(tmp_path / "ps.csv")], "unit is 'psecond'"),
                        (["kernel-times", str(tmp_path / "na.csv")], "no kernel with a duration (1 rows without one)"),
                        (["kernel-times", str(tmp_path / "absent.csv")], "No such file"),
                        (["prefix-ttft", "--model", "tiny-qwen3", "--backend", "cpu", "--nvtx"],
                         "needs --backend cuda"),
                        (["prefix-ttft", "--model", "tiny-qwen3", "--backend", "cpu", "--anatomy", "--prompt-len",
                          "256"], "needs --prompt-len above 256"),
                        (["prefix-ttft", "--model", "tiny-qwen3", "--backend", "cpu", "--anatomy", "--host-profile",
                          "3"], "take it apart from --anatomy"),
                        (["prefix-ttft", "--model", "tiny-qwen3", "--backend", "cpu", "--host-profile", "-1"],
                         "--host-profile >= 0")):
        r = subprocess.run([sys.executable, str(ROOT / "scripts" / args[0]), *args[1:]], capture_output=True,
                           text=True, timeout=60, cwd=ROOT)
        lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith(("usage:", " "))]
        assert (r.returncode, len(lines), "Traceback" in r.stderr) == (2, 1, False), r.stderr[-2000:]
        assert names in lines[0], r.stderr
