"""The `vt` command with bad input: one typed line and exit status 2, never a traceback or a hang; help
with defaults for every option; --version."""

from __future__ import annotations

import argparse
import socket

import pytest

from vt.cli import build_parser, main

SMALL = ["--max-model-len", "64", "--num-blocks", "16"]


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """(exit status, stderr); a raw exception escaping `main` is a failure of this gate, not a crash."""
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse: usage errors exit 2, --help/--version exit 0
        rc = int(e.code or 0)
    except Exception as e:  # noqa: BLE001 - what the gate exists to catch
        pytest.fail(f"vt {' '.join(argv)}: raw {type(e).__name__} escaped: {e}")
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("argv, names", [
    (["ladder", "--model", "tiny-qwen3", "--concurrency", "0"], "concurrency 0: every level must be >= 1"),
    (["ladder", "--model", "tiny-qwen3", "--concurrency", "1,-1"], "every level must be >= 1"),
    (["ladder", "--model", "tiny-qwen3", "--concurrency", "a,b"], "--concurrency 'a,b'"),
    (["ladder", "--model", "tiny-qwen3", "--num-prompts", "0"], "--num-prompts 0"),
    (["generate", "--model", "tiny-qwen3", "--prompt", "hi", "--seed", str(-(2**63) - 1)], "seed=-"),
    (["ladder", "--model", "tiny-qwen3", "--seed", str(2**63), "--num-prompts", "1"], f"seed={2**63}"),
    (["generate", "--model", "tiny-qwen3", "--prompt", "hi", "--max-tokens", "100000000000"], "--max-tokens"),
    (["generate", "--model", "tiny-qwen3", "--prompt", "bad \udcff bytes", *SMALL], "not valid UTF-8"),
    (["generate", "--model", "tiny-qwen3", "--prompt", "hello world " * 40, "--max-model-len", "32", "--num-blocks",
      "4"], "max_model_len=32"),
    (["generate", "--model", "no-such-model", "--prompt", "hi"], "CheckpointError"),
    (["generate", "--model", "tiny-qwen3", "--prompt", "hi", "--max-model-len", "-1"], "max_model_len=-1"),
    (["bench", "serve"], "--base-url of a running server, or --model"),
    (["bench", "serve", "--base-url", "http://127.0.0.1:1"], "no OpenAI-compatible server answered"),
    (["bench", "serve", "--model", "tiny-qwen3", "--max-concurrency", "x"], "--max-concurrency 'x'"),
    # (a small run: a mutant that lets level 0 through then serves it quickly, not the default 200 prompts)
    (["bench", "serve", "--model", "tiny-qwen3", "--max-concurrency", "4,0", "--num-prompts", "2", "--input-len", "8",
      "--output-len", "2", *SMALL], "--max-concurrency 4,0: every level"),
    (["bench", "serve", "--model", "tiny-qwen3", "--request-rate", "0"], "--request-rate 0.0"),
    (["bench", "serve", "--model", "tiny-qwen3", "--request-rate", "nan", "--num-prompts", "2", "--input-len", "8",
      "--output-len", "2", "--max-concurrency", "1", *SMALL], "--request-rate nan"),
    (["serve", "tiny-qwen3", "--port", "99999"], "--port 99999"),
    (["generate", "--model", "tiny-qwen3", "--prompt", "hi", "--n", "0", *SMALL], "n=0"),
    (["generate", "--model", "tiny-qwen3", "--prompt", "hi", "--max-num-batched-tokens", "-1"],
     "max_num_batched_tokens=-1"),
    (["generate", "--model", "tiny-qwen3", "--prompt", "hi", "-tp", "3", *SMALL], "num_attention_heads=4 is not "
                                                                                   "divisible"),
    (["generate", "--model", "tiny-qwen3", "--prompt", "hi", "-tp", "0", *SMALL], "tensor_parallel_size=0"),
    (["generate", "--model", "tiny-qwen3", "--prompt", "hi", "-tp", "2", "--speculative-model", "[ngram]",
      "--num-speculative-tokens", "2", *SMALL], "1 with speculative decoding"),
    # session 33's probe: each was taken in silence (the draft count without a draft) or found bad after the run
    (["generate", "--model", "tiny-qwen3", "--prompt", "hi", "--num-speculative-tokens", "3", *SMALL],
     "num_speculative_tokens=3: needs speculative_model"),
    (["generate", "--model", "tiny-qwen3", "--prompt", "hi", "--num-speculative-tokens", "-1", *SMALL],
     "num_speculative_tokens=-1"),
    (["bench", "serve", "--base-url", "http://127.0.0.1:1", "--save-result", "/nonexistent/dir/out.json"],
     "--save-result /nonexistent/dir/out.json"),
    # session 34: engine flags beside a running server's URL were ignored in silence (bench-unreachable-server above
    # is the same URL without them: that refusal is another)
    (["bench", "serve", "--base-url", "http://127.0.0.1:1", "--num-blocks", "64", "--dtype", "float16"],
     "--num-blocks, --dtype would be ignored"),
    (["bench", "serve", "--base-url", "http://127.0.0.1:1", "-tp=1", "--enable-prefix-caching"],  # their defaults
     "--enable-prefix-caching, --tensor-parallel-size would be ignored"),
    # a ladder or a benchmark whose prompt and output cannot fit max_model_len: each request was cut short and the
    # rung said ok (60 + 10 in 64), or every request failed at run time, exit 1 (64 + 1)
    (["ladder", "--model", "tiny-qwen3", "--input-len", "60", "--output-len", "10", "--num-prompts", "1", *SMALL],
     "--input-len 60 + --output-len 10 = 70 tokens: more than max_model_len 64"),
    (["ladder", "--model", "tiny-qwen3", "--input-len", "64", "--output-len", "1", "--num-prompts", "1", *SMALL],
     "--input-len 64 + --output-len 1 = 65 tokens: more than max_model_len 64"),
    (["bench", "serve", "--model", "tiny-qwen3", "--input-len", "60", "--output-len", "10", "--num-prompts", "1",
      "--max-concurrency", "1", *SMALL], "--input-len 60 + --output-len 10 = 70 tokens: more than max_model_len 64"),
    # the CPU backend sizes its KV cache in GiB: the utilization of a GPU changed nothing, in silence
    (["generate", "--model", "tiny-qwen3", "--backend", "cpu", "--prompt", "hi", "--gpu-memory-utilization", "0.01",
      *SMALL], "gpu_memory_utilization=0.01: "),
], ids=["concurrency-0", "concurrency-negative", "concurrency-words", "no-prompts", "seed-below-int64",
        "ladder-seed-past-int64", "huge-max-tokens", "non-utf8-prompt", "prompt-too-long", "unknown-model",
        "negative-max-model-len",
        "bench-without-target", "bench-unreachable-server", "bench-concurrency-words", "bench-concurrency-0",
        "bench-rate-0", "bench-rate-nan",
        "serve-port-out-of-range", "generate-n-0", "negative-token-budget", "tp-indivisible", "tp-0",
        "tp-with-speculation", "draft-count-without-draft", "negative-draft-count", "save-result-nowhere",
        "bench-url-with-engine-flags", "bench-url-with-engine-flags-at-their-defaults", "ladder-output-cut-short",
        "ladder-prompt-fills-the-context", "bench-output-cut-short", "gpu-utilization-on-the-cpu"])
def test_bad_input_is_one_typed_line_and_exit_2(argv: list[str], names: str, capsys) -> None:
    rc, err = run_cli(argv, capsys)
    assert rc == 2, (rc, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("vt: error: ")]
    assert len(errors) == 1 and names in errors[0], err
    startup = ("vt: load", "vt: KV cache: ", "vt: max_model_len ")  # the start-up log: loading, the KV plan
    assert all(ln.startswith(("vt: error: ", *startup)) for ln in lines), f"one typed line, no more: {err}"


@pytest.mark.parametrize("flag, value, names", [
    ("--temperature", "-1", "temperature=-1.0"), ("--top-p", "2", "top_p=2.0"), ("--n", "0", "n=0"),
    ("--max-tokens", "0", "max_tokens=0"), ("--seed", str(2**64 - 1), "seed="),
])
def test_a_bad_sampling_flag_is_refused_before_the_model_loads(flag: str, value: str, names: str, capsys) -> None:
    """A typo costs no load: on an 8B checkpoint the load and the KV cache's allocation take a minute."""
    argv = ["generate", "--model", "tiny-qwen3", "--backend", "cpu", "--prompt", "hi", *SMALL]
    rc, err = run_cli([*argv, "--max-tokens", "1"], capsys)
    assert rc == 0 and "vt: loading tiny-qwen3" in err, f"non-vacuity: a good command says it loads: {err}"
    rc, err = run_cli([*argv, flag, value], capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("vt: error: ") and names in lines[0], err
    assert "vt: load" not in err, f"{flag} {value}: the model loaded before the flag was checked"


def test_a_negative_seed_generates_the_same_text_twice(capsys) -> None:
    argv = ["generate", "--model", "tiny-qwen3", "--prompt", "hi", "--temperature", "1.0", "--max-tokens", "6",
            "--ignore-eos", *SMALL]
    outs = []
    for seed in ("-1", "-1", str(2**63 - 1)):
        assert main([*argv, "--seed", seed]) == 0, f"--seed {seed} is an int64: it runs"
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] and outs[0].strip(), "non-vacuity: text, the same for the same seed"
    assert outs[0] != outs[2], "-1 draws apart from 2**63-1 (where a fold into [0, 2**63) put it)"


def test_a_ladder_past_the_length_the_kv_cache_caps_is_refused_before_any_rung(capsys) -> None:
    """max_model_len 0 is the checkpoint's, capped by the KV cache (64 here): known once the engine is built, it is
    checked then, before any rung runs; the longest pair that fits runs every output whole."""
    from vt.engine.config import EngineConfig
    from vt.engine.front.ladder import run_ladder
    from vt.engine.front.llm_engine import LLMEngine

    rc, err = run_cli(["ladder", "--model", "tiny-qwen3", "--backend", "cpu", "--input-len", "60", "--output-len", "10",
                       "--num-prompts", "1", "--max-model-len", "0", "--num-blocks", "4"], capsys)
    said = "vt: error: ConfigError: --input-len 60 + --output-len 10 = 70 tokens: more than max_model_len 64"
    assert rc == 2 and said in err and "vt ladder: c=" not in err, err
    engine = LLMEngine(EngineConfig(model="tiny-qwen3", backend="cpu", max_model_len=64, num_blocks=16))
    rung = run_ladder(engine, [2], 54, 10, 2)[0]
    assert [len(t) for t in rung.tokens] == [10, 10], "non-vacuity: 54 + 10 in 64 runs every output whole"


@pytest.mark.parametrize("cmd", ["generate", "ladder"])
def test_chat_template_is_a_flag_of_vt_serve_alone_as_in_vllm(cmd: str, capsys) -> None:
    """vt generate and vt ladder render no chat: --chat-template was taken and never used. As vLLM's, it is a flag of
    the server (vLLM's FrontendArgs, not EngineArgs: its offline benchmarks refuse it), refused elsewhere."""
    argv = {"generate": ["generate", "--prompt", "hi"], "ladder": ["ladder", "--num-prompts", "1"]}[cmd]
    rc, err = run_cli([*argv, "--model", "tiny-qwen3", *SMALL, "--chat-template", "{{ bogus }}"], capsys)
    assert rc == 2 and "unrecognized arguments: --chat-template {{ bogus }}" in err, (rc, err)
    served = build_parser().parse_args(["serve", "tiny-qwen3", "--chat-template", "{{ bogus }}"])
    assert served.chat_template == "{{ bogus }}", "non-vacuity: vt serve takes it"


def test_serve_on_a_port_in_use_is_one_typed_line_and_exit_2(capsys) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        rc, err = run_cli(["serve", "tiny-qwen3", "--port", str(port)], capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1, (rc, err)
    assert lines[0].startswith(f"vt: error: ConfigError: could not listen on 127.0.0.1:{port}: "), err


def test_every_option_shows_its_default_and_there_is_a_version(capsys) -> None:
    parser = build_parser()
    sub = dict(next(a for a in parser._actions if a.dest == "cmd").choices)  # type: ignore[attr-defined]
    for name, p in list(sub.items()):  # a command with commands of its own (vt bench serve): check those
        nested = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if nested:
            del sub[name]
            sub |= {f"{name} {k}": v for k, v in nested[0].choices.items()}
    assert "bench serve" in sub and "serve" in sub, "non-vacuity: the nested commands are walked"
    for name, p in sub.items():
        assert all(a.help for a in p._actions if a.dest != "help"), f"vt {name}: an option without help"
        text = p.format_help()
        options = [a for a in p._actions if a.option_strings and a.dest != "help" and not a.required]
        assert options and text.count("(default:") >= len(options), f"vt {name} --help shows every default"
        for a in options:  # once: a help text that states its own default is shown it twice
            assert "(default:" not in (a.help or ""), f"vt {name} {a.option_strings[0]}: its default printed twice"
    top = parser.format_help()
    assert all(f"{c}" in (parser.description or "") for c in ("generate", "serve", "bench", "ladder", "conformance")), (
        f"vt --help's summary names every command: {parser.description!r}")
    assert "serve" in top and "bench" in top, "non-vacuity: the command list has them"
    rc, _ = run_cli(["--version"], capsys)
    assert rc == 0


def test_the_cuda_backend_without_cupy_is_one_typed_line(capsys) -> None:
    import importlib.util

    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("cupy is installed here: the CUDA backend would start")
    rc, err = run_cli(["generate", "--model", "tiny-qwen3", "--prompt", "hi", "--backend", "cuda", *SMALL], capsys)
    assert rc == 2 and "vt: error: ConfigError: backend='cuda' needs CuPy" in err, err
    rc, err = run_cli(["generate", "--model", "tiny-qwen3", "--prompt", "hi", "--backend", "cuda", "-tp", "2", *SMALL],
                      capsys)  # refused before any worker process starts
    assert rc == 2 and "vt: error: ConfigError: backend='cuda' needs CuPy" in err, err


def test_generate_takes_the_checkpoints_defaults_for_the_sampling_flags_left_unset(capsys) -> None:
    """vt generate's unset --temperature / --top-k / --top-p are the checkpoint's generation_config (tiny-qwen3's:
    0.6, 20, 0.95), as a request to vt serve: the text equals LLM.generate with those defaults and the same seed."""
    import dataclasses

    from vt import LLM

    flags = ["generate", "--model", "tiny-qwen3", "--prompt", "Once upon", "--max-tokens", "24", "--seed", "7"]
    assert main(flags) == 0
    said = capsys.readouterr().out.rstrip("\n")
    llm = LLM("tiny-qwen3")
    defaults = llm.get_default_sampling_params()
    assert defaults.temperature != 1.0 and defaults.top_k not in (0, -1), "non-vacuity: the checkpoint has defaults"
    seeded = dataclasses.replace(defaults, seed=7, max_tokens=24)
    want = llm.generate(["Once upon"], seeded)[0].outputs[0].text
    neutral = llm.generate(["Once upon"], dataclasses.replace(seeded, temperature=1.0, top_k=-1, top_p=1.0))
    assert neutral[0].outputs[0].text != want, "non-vacuity: the defaults change the text at this seed"
    assert said == want, f"vt generate said {said!r}; with the checkpoint's defaults: {want!r}"
