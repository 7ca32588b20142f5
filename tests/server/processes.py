"""`vt serve` as a child process on a port the OS picks (--port 0): its first line names the URL."""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

SERVING = re.compile(r"^vt: serving .* on (http://\S+) ")


def start_serve(args: list[str], merge_stderr: bool = False, within_s: float = 120.0,
                new_session: bool = False) -> tuple[subprocess.Popen, str]:
    """(process, base URL) once /health answers 200. The line naming the URL is read from stderr (or from
    stdout when merge_stderr); the rest of that stream is left for the test. new_session: the server leads a
    process group of its own (with its engine core), for a test that signals the group as `timeout` does."""
    proc = subprocess.Popen([sys.executable, "-m", "vt.cli", "serve", *args, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"},
                            start_new_session=new_session)
    stream = proc.stdout if merge_stderr else proc.stderr
    assert stream is not None
    seen = []
    for line in stream:  # ends at EOF if the process dies first
        seen.append(line)
        if m := SERVING.match(line):
            url = m.group(1)
            break
    else:
        proc.wait(10)
        raise AssertionError(f"vt serve exited {proc.returncode} before serving:\n{''.join(seen)[-3000:]}")
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"vt serve at {url} did not answer /health within {within_s:.0f} s (exit {proc.poll()})")


def processes() -> dict[int, tuple[int, str]]:
    """Every process on this machine: pid -> (parent pid, command line), from /proc."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        out[int(d.name)] = (ppid, cmd)
    return out


def workers_of(pid: int) -> list[int]:
    """Descendant processes of pid running a tensor-parallel rank (the engine core's children, when the engine
    runs in a process of its own)."""
    procs = processes()
    family, grew = {pid}, True
    while grew:
        more = {p for p, (pp, _) in procs.items() if pp in family} - family
        family |= more
        grew = bool(more)
    return [p for p in family if p != pid and "vt.engine.worker.tp" in procs[p][1]]


def exit_code_within(proc: subprocess.Popen, seconds: float) -> int | None:
    """proc's exit code once it exits, or None if it still runs after seconds."""
    deadline = time.monotonic() + seconds
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc.poll()


def stacks_if_running(proc: subprocess.Popen, within_s: float = 5.0) -> str:
    """A server that should have exited but runs: SIGABRT to it and its Python descendants (the engine core), each
    of which dumps every thread's stack to the stderr they share (PYTHONFAULTHANDLER, set by start_serve) and dies;
    that stderr's tail, for the failure message. Empty if proc has exited."""
    if proc.poll() is not None or proc.stderr is None:
        return ""
    procs = processes()
    family = [proc.pid] + [p for p, (pp, cmd) in procs.items() if pp == proc.pid and "python" in cmd]
    for pid in family:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGABRT)
    fd, said, deadline = proc.stderr.fileno(), b"", time.monotonic() + within_s
    while time.monotonic() < deadline and select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        said += chunk
    return said.decode(errors="replace")[-6000:]


def serve_tp2() -> tuple[subprocess.Popen, str]:
    return start_serve(["tiny-qwen3", "--tensor-parallel-size", "2", "--max-model-len", "2048", "--num-blocks", "256"])


@contextlib.contextmanager
def detailed_server(model: str, how: str) -> Iterator[str]:
    """A server of `model` on the CPU (256 tokens, 64 blocks) whose usage carries prompt_tokens_details: `vt serve
    --enable-prompt-tokens-details` (its engine in a process of its own) for how == "vt-serve", else one in this
    process. Yields its base URL."""
    from vt.server.serve import running_server, server_process

    if how == "vt-serve":
        with server_process(model, ["--enable-prompt-tokens-details", "--max-model-len", "256", "--num-blocks", "64",
                                    "--backend", "cpu"]) as url:
            yield url
    else:
        with running_server(model, max_model_len=256, num_blocks=64, prompt_tokens_details=True) as (_, url):
            yield url
