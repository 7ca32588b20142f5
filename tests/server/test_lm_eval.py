"""EleutherAI's lm-evaluation-harness (from PyPI) against `vt serve`, as its users run it: the `local-completions`
model (token-id prompts, echo with logprobs for loglikelihoods, stop strings for generation) on two tasks of local
data (tests/server/lm_eval_tasks: a multiple-choice and a generate-until one), beside lm-eval's own `hf` model on
the same checkpoint. Guarantees: each choice's loglikelihood agrees within 1e-3, the accuracy is the same, the
greedy generations are the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from models.tiny import ensure
from vt.server.serve import running_server

TASKS = Path(__file__).parent / "lm_eval_tasks"
MODEL = "tiny-qwen3"


def evaluate(model: str, model_args: dict) -> dict:
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    out = simple_evaluate(model=model, model_args=model_args, tasks=["vt_choice", "vt_until"], batch_size=1,
                          task_manager=TaskManager(include_path=str(TASKS), include_defaults=False),
                          log_samples=True, bootstrap_iters=0)
    assert out is not None
    return out


def per_sample(results: dict, task: str) -> list:
    return [s["filtered_resps"] for s in sorted(results["samples"][task], key=lambda s: s["doc_id"])]


def run_both() -> tuple[dict, dict]:
    """lm-eval through vt serve, then lm-eval's hf model (one test runs both: xdist would evaluate a shared
    fixture once per worker)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_DATASETS_OFFLINE", "1")  # local data only: nothing to download
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.chdir(TASKS)  # the tasks name their data files relative to here
    path = str(ensure(MODEL))
    try:
        with running_server(MODEL, max_model_len=512, num_blocks=256, max_num_seqs=4) as (_, url):
            vt = evaluate("local-completions", {"base_url": url + "/v1/completions", "model": MODEL, "tokenizer": path,
                                                "tokenizer_backend": "huggingface", "tokenized_requests": True,
                                                "num_concurrent": 1, "max_retries": 1})
        hf = evaluate("hf", {"pretrained": path, "dtype": "float32", "device": "cpu"})
    finally:
        mp.undo()
    return vt, hf


def test_lm_eval_through_vt_serve_equals_its_hf_model() -> None:
    vt, hf = run_both()
    # each choice's loglikelihood, and lm-eval's is_greedy reading of the top logprobs
    got, want = per_sample(vt, "vt_choice"), per_sample(hf, "vt_choice")
    assert len(got) == len(want) == 6
    for doc, (g, w) in enumerate(zip(got, want)):
        lls_g, lls_w = [float(x[0]) for x in g], [float(x[0]) for x in w]
        assert all(abs(a - b) <= 1e-3 for a, b in zip(lls_g, lls_w)), f"doc {doc}: vt {lls_g}, hf {lls_w}"
        assert [bool(x[1]) for x in g] == [bool(x[1]) for x in w], f"doc {doc}: is_greedy differs"
    assert all(float(x[0]) < -0.1 for g in got for x in g), "non-vacuous: real loglikelihoods, not zeros"
    assert vt["results"]["vt_choice"]["acc,none"] == hf["results"]["vt_choice"]["acc,none"], "the same accuracy"
    # greedy generation up to a stop string: the same text, up to a trailing incomplete UTF-8 character, which
    # transformers' decode of the whole output shows as U+FFFD and vt's incremental detokenizer (as vLLM's) drops
    got, want = per_sample(vt, "vt_until"), per_sample(hf, "vt_until")
    assert got == [[w.rstrip("\ufffd") for w in ws] for ws in want] and len(got) == 4
    assert any(g[0] for g in got), "non-vacuous: something was generated"
    assert vt["results"]["vt_until"]["exact_match,none"] == hf["results"]["vt_until"]["exact_match,none"]
