"""`vt bench serve`: vLLM's result table, --save-result JSON and PNG, and a client TTFT that agrees with the
engine's first-token time (the stream delivers the first token while the request is still running)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from vt.cli import main
from vt.server import bench
from vt.server.serve import running_server


def test_bench_serve_starts_its_own_server_and_reports_every_level(tmp_path, capsys) -> None:
    out = tmp_path / "result.json"
    argv = ["bench", "serve", "--model", "tiny-qwen3", "--input-len", "16", "--output-len", "8", "--num-prompts", "12",
            "--max-concurrency", "1,4", "--max-model-len", "128", "--num-blocks", "64", "--save-result", str(out)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    text = captured.out
    for line in ("Serving Benchmark Result", "Successful requests:", "Mean TTFT (ms):", "P99 TPOT (ms):",
                 "Median ITL (ms):", "Output token throughput (tok/s):"):
        assert line in text
    assert " Every level " in text, "every level in one combined table at the end"
    every = text[text.index(" Every level "):].splitlines()
    assert [row.split()[0] for row in every[2:4]] == ["1", "4"], f"one combined table, a row per level: {every}"
    assert "vt bench: c=4: 12/12 requests done" in captured.err, "progress lines while a level runs"

    def strict(token: str) -> None:
        raise ValueError(f"not JSON: {token}")

    try:
        rows = json.loads(out.read_text(), parse_constant=strict)  # Infinity / NaN are not JSON
    except ValueError as e:
        pytest.fail(f"--save-result wrote something that is not JSON: {e}")
    assert [r["max_concurrency"] for r in rows] == [1, 4] and rows[0]["request_rate"] == "inf"
    assert all(r["completed"] == 12 and r["failed"] == 0 and r["total_output_tokens"] == 96 for r in rows)
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_clients_ttft_agrees_with_the_engines_first_token_time() -> None:
    with running_server("tiny-qwen3", max_model_len=256, num_blocks=64) as (server, url):
        engine_ttft: list[float] = []
        engine_e2e: list[float] = []
        prev = server.llm.on_finished

        def record(r) -> None:
            engine_ttft.append(r.first_token_time - r.arrival)
            engine_e2e.append(r.finish_time - r.arrival)
            prev(r)

        server.llm.on_finished = record
        prompts = [list(range(10 + i, 40 + i)) for i in range(6)]
        result = asyncio.run(bench.run_level(url, "tiny-qwen3", prompts, 32, 1, float("inf")))
    assert result.completed == 6 and len(engine_ttft) == 6
    client = result.median_ttft_ms / 1e3
    assert client >= np.median(engine_ttft), "the client cannot see a token before the engine made it"
    assert client < np.median(engine_e2e), "the first token reached the client while its request still ran"


def test_bench_serve_against_a_running_server_at_a_finite_rate(capsys) -> None:
    with running_server("tiny-qwen3", max_model_len=128, num_blocks=64) as (_, url):
        argv = ["bench", "serve", "--base-url", url, "--input-len", "8", "--output-len", "4", "--num-prompts", "10",
                "--max-concurrency", "4", "--request-rate", "40"]
        assert main(argv) == 0
    text = capsys.readouterr().out
    assert "Successful requests:                    10" in text
    assert "Failed requests:                        0" in text


def test_a_level_keeps_exactly_its_concurrency_in_flight(monkeypatch) -> None:
    """Each of c workers holds one request at a time: never more than c in flight, and c at once when prompts
    outnumber it (each worker has a client and a connection of its own)."""
    real, now, peak = bench._one, [0], [0]

    async def counted(*args, **kwargs):
        now[0] += 1
        peak[0] = max(peak[0], now[0])
        try:
            return await real(*args, **kwargs)
        finally:
            now[0] -= 1

    monkeypatch.setattr(bench, "_one", counted)
    with running_server("tiny-qwen3", max_model_len=128, num_blocks=64) as (_, url):
        prompts = [list(range(5 + i, 20 + i)) for i in range(14)]
        result = asyncio.run(bench.run_level(url, "tiny-qwen3", prompts, 6, 5, float("inf")))
    assert result.completed == 14 and result.failed == 0 and result.total_output_tokens == 14 * 6
    assert peak[0] == 5, f"at most, and at some point exactly, 5 requests in flight: {peak[0]}"


def test_the_client_drops_an_idle_connection_before_vts_server_would() -> None:
    """A request sent on a keep-alive connection as the server closes it fails before any response: the
    benchmark's client lets an idle connection go well before `vt serve`'s uvicorn closes one."""
    from vt.server.serve import uvicorn_server

    server_keep_alive = uvicorn_server(None, "127.0.0.1", 0).config.timeout_keep_alive
    assert server_keep_alive >= 1, f"non-vacuity: the server keeps idle connections ({server_keep_alive} s)"
    assert bench.KEEPALIVE_S <= server_keep_alive - 1, (
        f"client expiry {bench.KEEPALIVE_S} s against the server's {server_keep_alive} s: no margin for the race")
