"""`vt serve` on SIGTERM / SIGINT, as vLLM's --shutdown-timeout: new requests are refused with a 503; the requests
in flight fail at once by default, each stream with one error frame and then [DONE], or may finish within the
timeout given; a second signal fails them at once; and the server exits 0 with no engine process left behind, in
either engine mode."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.server.processes import exit_code_within, processes, stacks_if_running, start_serve
from vt.server.serve import running_server

MODEL = "tiny-qwen3"
LONG = 1000  # tokens a stream asks for: more than it generates before the signal's effect is due, few enough
# that a mutant which never fails it sees it end by itself within seconds, not at uvicorn's 30 s bound
MODES = pytest.mark.parametrize("engine_process", [True, False], ids=["engine-process", "engine-thread"])


def serve(engine_process: bool, *flags: str) -> tuple[subprocess.Popen, str, list[int]]:
    """The server, its URL and its child processes (the engine core, in process mode)."""
    os.environ["VT_ENGINE_PROCESS"] = "1" if engine_process else "0"
    try:
        proc, url = start_serve([MODEL, "--max-model-len", "4200", "--num-blocks", "512", *flags])
    finally:
        del os.environ["VT_ENGINE_PROCESS"]
    children = [p for p, (pp, _) in processes().items() if pp == proc.pid]
    return proc, url, children


def stream_then_signal(url: str, proc: subprocess.Popen, signals: list[int], max_tokens: int = LONG,
                       after: int = 3) -> tuple[list, float]:
    """A stream of max_tokens; once `after` frames came, each signal (0.3 s apart). (Its frames, the seconds from
    the first signal to the stream's end.)"""
    body = {"model": MODEL, "prompt": [5, 6, 7], "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    frames: list = []
    sent = 0.0
    try:
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=120) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    frames.append("[DONE]" if line == "data: [DONE]" else json.loads(line[6:]))
                if len(frames) == after and not sent:
                    sent = time.monotonic()
                    for i, sig in enumerate(signals):
                        time.sleep(0.3 if i else 0.0)
                        proc.send_signal(sig)
    except httpx.HTTPError as e:
        raise AssertionError(f"the stream was cut without its end ({type(e).__name__}: {e}); "
                             f"frames {frames[-2:]}") from e
    return frames, time.monotonic() - sent


def generated(frames: list) -> int:
    return sum(len(f["choices"][0]["text"]) > 0 for f in frames if isinstance(f, dict) and f.get("choices"))


def ended_cleanly(proc: subprocess.Popen, children: list[int]) -> None:
    code = exit_code_within(proc, 30)
    assert code == 0, f"vt serve did not exit 0 within 30 s (exit {code}):\n{stacks_if_running(proc)}"
    deadline = time.monotonic() + 10  # multiprocessing's resource tracker leaves once its pipe closes
    while (left := running(children)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"engine processes left running after the server exited: {left}"


def running(pids: list[int]) -> dict[int, str]:
    """Those of pids still running (not zombies: the server's children, reparented, wait to be reaped), with their
    command lines."""
    procs = processes()
    out = {}
    for p in pids:
        with contextlib.suppress(OSError, IndexError):
            if p in procs and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
                out[p] = procs[p][1][:120]
    return out


@contextlib.contextmanager
def killed_at_the_end(proc: subprocess.Popen):
    try:
        yield
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@MODES
def test_by_default_a_signal_fails_the_stream_in_flight_at_once_then_the_server_exits(engine_process: bool) -> None:
    proc, url, children = serve(engine_process)
    with killed_at_the_end(proc):
        frames, took = stream_then_signal(url, proc, [signal.SIGTERM])
        assert frames[-1] == "[DONE]", "the stream ended properly"
        errors = [f["error"]["message"] for f in frames[:-1] if isinstance(f, dict) and "error" in f]
        assert errors and "shutting down (SIGTERM)" in errors[0], f"one error frame names the shutdown: {frames[-2:]}"
        assert generated(frames) < LONG // 2, "non-vacuity: the stream was failed, not run to its end"
        ended_cleanly(proc, children)
        if engine_process:
            assert children, "non-vacuity: the engine ran in a process of its own"


def test_a_drain_lets_the_stream_in_flight_finish() -> None:
    proc, url, children = serve(True, "--shutdown-timeout", "120")
    with killed_at_the_end(proc):
        frames, _ = stream_then_signal(url, proc, [signal.SIGTERM], max_tokens=300)
        assert frames[-1] == "[DONE]" and not any(isinstance(f, dict) and "error" in f for f in frames), frames[-2:]
        assert frames[-2]["choices"][0]["finish_reason"] == "length", "the stream ran to its end after the signal"
        ended_cleanly(proc, children)


def test_a_drain_past_its_timeout_fails_the_stream_with_an_error_frame() -> None:
    proc, url, children = serve(True, "--shutdown-timeout", "1")
    with killed_at_the_end(proc):
        frames, took = stream_then_signal(url, proc, [signal.SIGTERM])
        errors = [f["error"]["message"] for f in frames[:-1] if isinstance(f, dict) and "error" in f]
        assert frames[-1] == "[DONE]" and errors and "--shutdown-timeout 1 s passed" in errors[0], frames[-2:]
        assert took >= 1.0, f"non-vacuity: the stream ran on for the timeout ({took:.2f} s)"
        ended_cleanly(proc, children)


@MODES
def test_a_second_signal_ends_a_drain_at_once_with_no_engine_left(engine_process: bool) -> None:
    """Ctrl-C twice: once hung forever in the engine-process mode (uvicorn's force exit skipped the engine's stop,
    and the interpreter's exit waited on the engine process)."""
    proc, url, children = serve(engine_process, "--shutdown-timeout", "600")
    with killed_at_the_end(proc):
        frames, took = stream_then_signal(url, proc, [signal.SIGINT, signal.SIGINT])
        errors = [f["error"]["message"] for f in frames[:-1] if isinstance(f, dict) and "error" in f]
        assert frames[-1] == "[DONE]" and errors and "shutting down (SIGINT)" in errors[0], (
            f"the second signal failed the stream at once: {frames[-2:]}")
        assert generated(frames) < LONG // 2, "non-vacuity: the stream was failed, not run to its end"
        ended_cleanly(proc, children)


def test_while_draining_new_requests_and_health_are_503s_and_the_stream_in_flight_runs_on() -> None:
    with running_server(MODEL, max_model_len=512, num_blocks=64, max_num_seqs=4) as (server, url):
        body = {"model": MODEL, "prompt": [5, 6, 7], "max_tokens": 200, "stream": True, "ignore_eos": True}
        frames: list[str] = []
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
            lines = r.iter_lines()
            frames.append(next(lines))
            asked = threading.Event()
            server.loop.call_soon_threadsafe(lambda: (server.begin_shutdown("the server is shutting down (test)",
                                                                           600, now=False), asked.set()))
            assert asked.wait(10), "non-vacuity: the drain began"
            late = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 2},
                              timeout=30)
            health = httpx.get(url + "/health", timeout=30)
            frames += [line for line in lines if line]
        assert late.status_code == 503 and "shutting down (test)" in late.json()["error"]["message"], late.text
        assert health.status_code == 503, "a load balancer's probe sees the drain"
        assert frames[-1] == "data: [DONE]" and '"finish_reason":"length"' in frames[-2], frames[-2:]


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_a_bad_shutdown_timeout_is_one_typed_line(value: str) -> None:
    p = subprocess.run([sys.executable, "-m", "vt.cli", "serve", MODEL, "--shutdown-timeout", value, "--port", "0"],
                       capture_output=True, text=True, timeout=120)
    errors = [line for line in p.stderr.splitlines() if line.startswith("vt: error:")]
    assert p.returncode == 2 and len(errors) == 1 and "--shutdown-timeout" in errors[0], p.stderr[-800:]
