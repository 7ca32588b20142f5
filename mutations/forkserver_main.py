"""The fork server's process: one interpreter that has imported pytest and the libraries vt's gates import (never vt,
its models, its tests or this runner: a mutant's gates import the sandbox's), then forks one pytest per mutant.

A mutant's pytest started from a fresh interpreter spent ~1 s of CPU before its first test, re-importing and
re-rewriting the same libraries (pytest rewrites the asserts of every pytest-plugin package, hypothesis and anyio
among them, and PYTHONDONTWRITEBYTECODE keeps it from caching them); 610 mutants paid that on two cores.

Run as a script (`python .../forkserver_main.py`), never as `mutations.forkserver_main`: the `mutations` package
imported here would be the checkout's, and a gate of the runner's own tests must import the sandbox's.

Protocol, one JSON line each way: a request {"cwd", "args", "env", "log", "status"} is answered with the pid of a
child that runs `pytest.main(args)` in cwd under env, in its own session (so the runner can kill the whole tree),
output to log. When the child ends, its exit code (negative: the signal that ended it) is written to the status
path, atomically: that file's existence is the runner's "it ended".
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import signal
import sys
import traceback
import types

# Python put this file's folder (mutations/) first: a gate must never import from the checkout
del sys.path[0]

PRELOAD = (
    "pytest", "_pytest.junitxml", "_pytest.python", "_pytest.fixtures", "_pytest.terminal", "_pytest.timing",
    "numpy", "ml_dtypes", "hypothesis", "hypothesis.strategies", "hypothesis.extra.numpy", "safetensors.numpy",
    "tokenizers", "jinja2", "jinja2.sandbox", "msgspec", "starlette.applications", "starlette.middleware.cors",
    "starlette.responses", "starlette.routing", "uvicorn", "httpx", "anyio", "prometheus_client", "rich.console",
    "openai", "jsonschema", "threadpoolctl", "concurrent.futures", "multiprocessing", "asyncio",
    "xml.etree.ElementTree",
)

_status_paths: dict[int, str] = {}


def _preload() -> None:
    for name in PRELOAD:
        with contextlib.suppress(ImportError):  # a library this install lacks: its gates import it (or skip) alone
            importlib.import_module(name)


def _write_status(path: str, code: int) -> None:
    tmp = f"{path}.part"
    with open(tmp, "w") as f:
        f.write(str(code))
    os.replace(tmp, path)


def _reap(signum: int, frame: object) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        path = _status_paths.pop(pid, None)
        if path is not None:
            _write_status(path, os.waitstatus_to_exitcode(status))


def _child(req: dict) -> None:
    """Become the mutant's pytest; never returns."""
    code = 70
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the gates' own subprocesses are theirs to wait on
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        os.setsid()
        os.chdir(req["cwd"])
        log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        sys.stdin = open(os.devnull)  # noqa: SIM115 - the pipe's buffered requests are the server's, not the gate's
        os.environ.clear()
        os.environ.update(req["env"])
        # as `python -m pytest` in cwd: the working folder first, then PYTHONPATH's entries (the sandbox)
        sys.path[:0] = [req["cwd"], *(p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p)]
        # A fresh __main__ with no file: multiprocessing's spawn re-imports the parent's main module by path, and
        # this file's would start a fork server in every spawned engine process.
        sys.modules["__main__"] = types.ModuleType("__main__")
        sys.argv = ["pytest", *req["args"]]
        import random

        random.seed()  # each fresh interpreter drew its own: the forks share the server's state until reseeded
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        import pytest

        code = int(pytest.main(req["args"]))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()  # what an interpreter's exit runs (multiprocessing ends its daemon children)
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def main() -> None:
    _preload()
    # What the preloads made is never garbage: out of the collector's sight, so that pytest's five gc.collect()
    # calls at each end (~0.15 s over this heap) walk only the gate's own objects, and the forks share its pages
    gc.collect()
    gc.freeze()
    signal.signal(signal.SIGCHLD, _reap)
    print("ready", flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        # SIGCHLD held while forking: a child that ends at once must be in the table before the reaper looks
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        pid = os.fork()
        if pid == 0:
            _child(req)
        _status_paths[pid] = req["status"]
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        print(pid, flush=True)


if __name__ == "__main__":
    main()
