"""Seam G6 through the whole engine: the tokens of a ladder with graphs on equal those with graphs off, and
`vt generate` under VT_CUDAGRAPH=0 (another process) says what graphs say. Apart from test_decode_seams.py:
these run engines end to end, and the driver's mutants need not."""

from __future__ import annotations

import subprocess
import sys

import pytest

from seams.lanes import GRAPHS_REASON, guarantee

MODELS = ["tiny-qwen3", "tiny-qwen3-moe"]
GRAPH_MODELS = [guarantee(m, id=m, reason=GRAPHS_REASON) for m in MODELS]


@pytest.mark.parametrize("model", GRAPH_MODELS)
def test_G6_engine_tokens_identical_with_graphs_on_and_off(model: str) -> None:
    from vt.engine.config import EngineConfig
    from vt.engine.front.ladder import run_ladder
    from vt.engine.front.llm_engine import LLMEngine

    def tokens(eager: bool) -> list:
        e = LLMEngine(EngineConfig(model=model, max_model_len=256, num_blocks=128, max_num_seqs=8,
                                   enforce_eager=eager))
        rungs = run_ladder(e, [1, 3, 8], input_len=20, output_len=24, num_prompts=8)
        return [r.tokens for r in rungs], e.runner.decoder.num_replays

    on, replays = tokens(False)
    off, no_replays = tokens(True)
    assert on == off
    assert replays > 0 and no_replays == 0, "non-vacuity: graphs really replayed on one side only"


@pytest.mark.parametrize("lane", [guarantee("pool", id="pool-lane", reason=GRAPHS_REASON)])
def test_G6_vt_generate_identical_under_VT_CUDAGRAPH_0(lane: str) -> None:
    """Graphs on (this process, replays counted) and VT_CUDAGRAPH=0 (another process: the flag is read once
    per process) give the same text. On the bypass lane both sides would be eager: skipped there."""
    from vt import LLM, SamplingParams

    cmd = [sys.executable, "-m", "vt.cli", "generate", "--model", "tiny-qwen3", "--prompt", "Hello world",
           "--max-tokens", "12", "--temperature", "0", "--max-model-len", "128", "--num-blocks", "16"]
    env = {**__import__("os").environ, "VT_CUDAGRAPH": "0"}
    off = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    llm = LLM("tiny-qwen3", max_model_len=128, num_blocks=16)
    on = llm.generate(["Hello world"], SamplingParams(temperature=0, max_tokens=12))[0]
    assert llm.engine.runner.decoder.num_replays > 0, "non-vacuity: this side replayed captured graphs"
    assert off == on.text + "\n"
