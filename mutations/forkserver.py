"""The runner's side of the fork server (forkserver_main.py): a warm interpreter that forks each mutant's pytest."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

MAIN = Path(__file__).with_name("forkserver_main.py")
POLL_S = 0.02


class ForkServerError(RuntimeError):
    """The fork server did not start or stopped answering."""


class ForkedPytest:
    """A pytest the server forked, as much of subprocess.Popen as the runner uses: pid (its session's too),
    kill(), wait(timeout) and returncode. It has ended when the server, which reaps it, has written its exit code."""

    def __init__(self, pid: int, status: Path, server: subprocess.Popen) -> None:
        self.pid = pid
        self._status = status
        self._server = server
        self.returncode = 0  # read from the status file once it ends

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._status.exists():
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(["pytest"], timeout or 0.0)
            if self._server.poll() is not None and not self._status.exists():  # no one left to reap it
                raise ForkServerError(f"the fork server ended (exit code {self._server.returncode}) before pytest")
            time.sleep(POLL_S)
        self.returncode = int(self._status.read_text())
        return self.returncode


class ForkServer:
    """Started once per run with the environment every gate shares (no VT_* flag: vt reads its flags at import, and
    the server never imports vt); each start() names the gate's own env, working folder and log."""

    def __init__(self, env: dict[str, str]) -> None:
        self._lock = threading.Lock()
        self._proc = subprocess.Popen([sys.executable, str(MAIN)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      env=env, text=True, start_new_session=True)
        self._answer("ready")

    def _answer(self, expect: str | None = None) -> str:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()
        if not line or (expect is not None and line != expect):
            raise ForkServerError(f"the fork server answered {line!r} (exit code {self._proc.poll()})")
        return line

    def start(self, args: list[str], cwd: Path, env: dict[str, str], log: Path) -> ForkedPytest:
        status = cwd / ".mutation-gates.status"
        status.unlink(missing_ok=True)
        req = {"cwd": str(cwd), "args": args, "env": env, "log": str(log), "status": str(status)}
        with self._lock:
            assert self._proc.stdin is not None
            try:
                self._proc.stdin.write(json.dumps(req) + "\n")
                self._proc.stdin.flush()
            except OSError as e:
                raise ForkServerError(f"the fork server is gone: {e}") from e
            return ForkedPytest(int(self._answer()), status, self._proc)

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()  # its loop ends at end of input
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
