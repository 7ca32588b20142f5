"""`vt bench serve --model` starts `vt serve` as a child process: every engine flag passed on, and a server that
cannot start is the benchmark's one typed line (apart from tests/server/test_bench.py, whose mutants then do not
start these servers)."""

from __future__ import annotations

from vt.cli import main


def test_bench_serve_passes_every_engine_flag_to_the_server_it_starts() -> None:
    from vt.cli import _engine_flags, _engine_kwargs, build_parser

    given = ["--kv-cache-gib", "0.5", "--no-enable-prefix-caching", "--async-scheduling", "--max-num-seqs", "7",
             "--enforce-eager", "--speculative-model", "[ngram]", "--num-speculative-tokens", "3", "--dtype", "float16",
             "--startup-capture", "off", "--seed", "9", "--max-num-batched-tokens", "300"]
    bench_args = build_parser().parse_args(["bench", "serve", "--model", "tiny-qwen3", *given])
    serve_args = build_parser().parse_args(["serve", "tiny-qwen3", *_engine_flags(bench_args)])
    defaults = _engine_kwargs(build_parser().parse_args(["serve", "tiny-qwen3"]))
    assert _engine_kwargs(serve_args) == _engine_kwargs(bench_args)
    changed = {k for k, v in _engine_kwargs(serve_args).items() if defaults.get(k) != v}
    assert len(changed) >= 10, f"non-vacuity: the flags given changed the engine's arguments ({changed})"


def test_a_server_that_cannot_start_is_one_typed_line_and_exit_2(capsys) -> None:
    argv = ["bench", "serve", "--model", "tiny-qwen3", "--backend", "cpu", "--max-num-seqs", "0"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    errors = [ln for ln in err if "error" in ln.lower()]
    assert errors == [errors[-1]] and errors[-1].startswith("vt: error: ServerStartError: the server exited with "
                                                            "code 2"), err
    assert "max-num-seqs" in errors[-1] or "max_num_seqs" in errors[-1], "the child's own reason is passed on"
