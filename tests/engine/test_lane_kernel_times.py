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


NCU_BYTES_CSV = """"ID","Process ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum"
"","","","usecond","Mbyte"
"0","7","void vt::skinny_gemm<bf16, 1, 8, 4>(const float *, int)","5.00","8.40"
"1","7","void vt::paged_decode_attention_rope<bf16, bf16, 128, 2>(const float *, int)","4.00","0.40"
"2","7","void vt::skinny_gemm<bf16, 1, 8, 4>(const float *, int)","7.00","8.40"
"""


def test_kernel_times_adds_each_kernels_dram_reads_and_their_rate_where_the_csv_has_them(tmp_path: Path) -> None:
    """With dram__bytes_read.sum beside the duration: each kernel's megabytes read (divided by --per) and its rate,
    MB over its own microseconds (TB/s); the total's over the whole. Without that column the table is as before."""
    (tmp_path / "step.csv").write_text(NCU_BYTES_CSV)
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "kernel-times"), str(tmp_path / "step.csv"),
                        "--per", "2"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith(("| `", "| total", "| kernel"))]
    assert rows == ["| kernel | launches / 2 | us / 2 | share | MB read / 2 | TB/s |",
                    "| `vt::skinny_gemm<bf16, 1, 8, 4>` | 1 | 6.0 | 75.0% | 8.40 | 1.40 |",
                    "| `vt::paged_decode_attention_rope<bf16, bf16, 128, 2>` | 0.5 | 2.0 | 25.0% | 0.20 | 0.10 |",
                    "| total | 1.5 | 8.0 | | 8.60 | 1.07 |"], r.stdout
    (tmp_path / "plain.csv").write_text(NCU_CSV)
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "kernel-times"), str(tmp_path / "plain.csv")],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0 and "| kernel | launches / 1 | us / 1 | share |\n" in r.stdout, "non-vacuity: as before"


def test_kernel_times_and_prefix_ttft_refuse_what_they_cannot_read(tmp_path: Path) -> None:
    (tmp_path / "log.txt").write_text("==PROF== no kernels were profiled\n")
    (tmp_path / "ps.csv").write_text(NCU_CSV.replace('"nsecond"', '"psecond"'))
    no_duration = '"0","7","void k()","(1, 1, 1)","(1, 1, 1)","n/a"'
    (tmp_path / "na.csv").write_text("\n".join([*NCU_CSV.splitlines()[:3], no_duration]) + "\n")
    (tmp_path / "kb.csv").write_text(NCU_BYTES_CSV.replace('"Mbyte"', '"bit"'))
    (tmp_path / "nb.csv").write_text(NCU_BYTES_CSV.replace('"0.40"', '"n/a"'))
    for args, names in ((["kernel-times", str(tmp_path / "log.txt")], "no ncu CSV header"),
                        (["kernel-times", str(tmp_path / "ps.csv")], "unit is 'psecond'"),
                        (["kernel-times", str(tmp_path / "na.csv")], "no kernel with a duration (1 rows without one)"),
                        (["kernel-times", str(tmp_path / "absent.csv")], "No such file"),
                        (["kernel-times", str(tmp_path / "kb.csv")], "the DRAM reads' unit is 'bit'"),
                        (["kernel-times", str(tmp_path / "nb.csv")], "has a duration but no DRAM reads"),
                        (["prefix-ttft", "--model", "tiny-qwen3", "--backend", "cpu", "--nvtx"],
                         "needs --backend cuda"),
                        (["prefix-ttft", "--model", "tiny-qwen3", "--backend", "cpu", "--anatomy", "--prompt-len",
                          "256"], "needs --prompt-len above 256"),
                        (["prefix-ttft", "--model", "tiny-qwen3", "--backend", "cpu", "--anatomy", "--host-profile",
                          "3"], "take it apart from --anatomy"),
                        (["prefix-ttft", "--model", "tiny-qwen3", "--backend", "cpu", "--host-profile", "-1"],
                         "--host-profile >= 0"),
                        (["prefix-ttft", "--model", "tiny-qwen3", "--backend", "cpu", "--hit-tail", "1024"],
                         "--hit-tail must be from 0 to below --prompt-len (1024), not 1024")):
        r = subprocess.run([sys.executable, str(ROOT / "scripts" / args[0]), *args[1:]], capture_output=True,
                           text=True, timeout=60, cwd=ROOT)
        lines = [x for x in r.stderr.splitlines() if x.strip() and not x.startswith(("usage:", " "))]
        assert (r.returncode, len(lines), "Traceback" in r.stderr) == (2, 1, False), r.stderr[-2000:]
        assert names in lines[0], r.stderr
