"""A dead engine core process fails the requests in flight with one error frame and `vt serve` exits 1; an engine
that cannot start is one typed line and exit 2 (apart from tests/server/test_engine_process.py, whose mutants then
run only the fast tests of outputs)."""

from __future__ import annotations

import json
import os
import signal
import time

import httpx
import pytest

from tests.server.processes import processes, start_serve


def _engine_core_of(pid: int) -> int:
    """The spawned engine core process under `vt serve`."""
    cores = [p for p, (ppid, cmd) in processes().items() if ppid == pid and "spawn_main" in cmd]
    assert cores, f"no engine core process under {pid}"
    return cores[0]


def test_a_killed_engine_process_fails_the_stream_and_vt_serve_exits_1() -> None:
    proc, url = start_serve(["tiny-qwen3", "--backend", "cpu", "--max-model-len", "2048", "--num-blocks", "160"])
    try:
        core = _engine_core_of(proc.pid)
        body = {"model": "tiny-qwen3", "prompt": [5, 6, 7], "max_tokens": 1800, "stream": True, "ignore_eos": True}
        frames = []
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=10) as r:  # a frame every few ms
            lines = r.iter_lines()
            for line in lines:
                if line.startswith("data: {"):
                    break
            os.kill(core, signal.SIGKILL)
            try:
                frames = [line[6:] for line in lines if line.startswith("data: ")]
            except httpx.ReadTimeout:
                pytest.fail("the stream went silent after its engine process died: never an error frame")
        assert frames[-1] == "[DONE]", "the stream ends cleanly"
        errors = [json.loads(f)["error"]["message"] for f in frames[:-1] if f.startswith('{"error"')]
        assert len(errors) == 1 and "process exited" in errors[0], f"one error frame saying why: {errors}"
        deadline = time.monotonic() + 15
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.returncode == 1, f"vt serve exits 1 once its engine died, not {proc.returncode} (None: running)"
        err = proc.stderr.read() if proc.stderr else ""
        assert "the engine died" in err, err[-1500:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_engine_that_cannot_start_is_one_typed_line_and_exit_2() -> None:
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "vt.cli", "serve", "tiny-qwen3", "--backend", "cpu", "--port", "0",
                        "--max-model-len", "99999999"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONUNBUFFERED": "1"})
    errors = [ln for ln in p.stderr.splitlines() if "error" in ln.lower() or "Traceback" in ln]
    assert p.returncode == 2 and errors == [errors[0]], p.stderr[-1500:]
    assert errors[0].startswith("vt: error: ConfigError: max_model_len=99999999"), errors
