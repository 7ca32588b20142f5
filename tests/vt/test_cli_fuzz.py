"""Any argv and any flag value: `vt` exits 0 or 2, never with a traceback (hypothesis draws them). Apart
from test_cli.py: no mutant is gated here, so none pays for these draws."""

from __future__ import annotations

import os
import subprocess
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.vt.test_cli import SMALL, run_cli

OPTIONS = {
    "--concurrency": st.sampled_from(["1", "2,1", "0", "-1", "x", "1,,2", ""]),
    "--num-prompts": st.sampled_from(["1", "2", "0", "-5", "z"]),
    "--input-len": st.sampled_from(["1", "8", "0", "-1", "1e3"]),
    "--output-len": st.sampled_from(["1", "4", "0", "nan"]),
    "--max-model-len": st.sampled_from(["16", "64", "1", "0", "-64", "99999999"]),
    "--num-blocks": st.sampled_from(["8", "16", "0", "-1"]),
    "--seed": st.sampled_from(["0", "7", "-1", "1.5"]),
    "--temperature": st.sampled_from(["0", "0.7", "-1", "500", "inf"]),
    "--max-tokens": st.sampled_from(["1", "4", "0", "-3"]),
    "--backend": st.sampled_from(["cpu", "gpu", ""]),
    "--dtype": st.sampled_from(["auto", "bfloat16", "int8"]),
    "--speculative-model": st.sampled_from(["[ngram]", "tiny-qwen3-draft", "nope"]),
    "--num-speculative-tokens": st.sampled_from(["0", "2", "-2"]),
    "--max-num-seqs": st.sampled_from(["1", "4", "0", "5000"]),
}
COMMON = ["--max-model-len", "--num-blocks", "--seed", "--backend", "--dtype", "--speculative-model",
          "--num-speculative-tokens", "--max-num-seqs"]
ONLY = {"ladder": ["--concurrency", "--num-prompts", "--input-len", "--output-len"],
        "generate": ["--temperature", "--max-tokens"]}


@settings(max_examples=40, deadline=None, derandomize=True,  # one fixed draw: a mutant's verdict never flips
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_argv_exits_0_or_2_with_no_traceback(data: st.DataObject, capsys) -> None:
    cmd = data.draw(st.sampled_from(["ladder", "generate"]))
    names = data.draw(st.lists(st.sampled_from(COMMON + ONLY[cmd]), unique=True, max_size=5))
    argv = [cmd, "--model", "tiny-qwen3"] + (["--prompt", "hi"] if cmd == "generate" else ["--num-prompts", "2",
                                                                                            "--input-len", "4"])
    for name in names:
        argv += [name, data.draw(OPTIONS[name])]
    rc, err = run_cli(argv, capsys)
    assert rc in (0, 2), (argv, rc, err)
    assert "Traceback" not in err, (argv, err)


@settings(max_examples=6, deadline=None)
@given(flag=st.sampled_from(["VT_CUDAGRAPH", "VT_POOL_BYPASS", "VT_POOL_EXACT", "VT_POOL_BORROW", "VT_POOL_STATS",
                             "VT_SANITIZE"]),
       value=st.sampled_from(["1", "0", "TRUE", "Off", "yes ", "2", "", "nope", "-1"]))
def test_any_flag_value_exits_0_or_2_with_no_traceback(flag: str, value: str) -> None:
    cmd = [sys.executable, "-m", "vt.cli", "generate", "--model", "tiny-qwen3", "--prompt", "hi", "--max-tokens",
           "2", *SMALL]
    proc = subprocess.run(cmd, env={**os.environ, flag: value}, capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 2) and "Traceback" not in proc.stderr, (flag, value, proc.stderr[-1500:])
