"""Tensor parallelism's processes. Rank 0 is the engine: it hosts the group's store, schedules, sends each
step's scheduler output down every worker's stdin pipe, and runs its own shard. Ranks 1..N-1 are worker
processes (spawned, one per device) that run every scheduler output they read on theirs; the model's
collectives keep the ranks' forwards together, and every rank samples the same ids from the same gathered
logits.

No wait on a peer is unbounded. A worker idles in a read of its pipe, which ends at the next step or at
end-of-file when rank 0 closes it (or dies). Rank 0 waits for the workers' start-up by polling the store
and their exit codes, with a deadline; a pipe write to a dead worker fails at once; a gloo collective and
a store read time out. A worker that dies is found by its exit code before each step and while the engine
idles (AsyncLLM checks each second), inside a step by the gloo collective that fails when its peer's
sockets close, and on CUDA by the host's event waits, which poll the workers instead of blocking (an NCCL
collective waits for a dead peer forever). Rank 0 then raises WorkerDied naming the rank, its exit code
and its last words. Workers run in their own session (a Ctrl-C to the server is rank 0's to handle) and
die with rank 0 (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import base64
import contextlib
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any

from vt.engine.config import EngineConfig
from vt.env import as_environ, flags
from vt.errors import ConfigError, EngineInvariantError, WorkerDied

TIMEOUT_S = 60.0  # how long a collective or a store read may wait for a peer
STARTUP_S = 600.0  # how long rank 0 waits for the workers to load their shards (a real checkpoint is slow)
READY_KEY = "vt/workers-ready"  # each worker adds 1 once its shard and runner are built
LAST_WORDS = "vt tensor-parallel rank"  # how a failing worker's last line begins


class Workers:
    """Rank 0's handle on ranks 1..N-1: `python -m vt.engine.worker.tp` processes (no re-import of the caller's
    __main__, as multiprocessing's spawn would need), each logging to its own file in a temporary folder."""

    def __init__(self, cfg: EngineConfig, store: Any) -> None:
        self.logdir = tempfile.mkdtemp(prefix="vt-tp-")
        arg = base64.b64encode(pickle.dumps(cfg)).decode()
        self.store = store
        self.procs: list[subprocess.Popen] = []
        env = {**os.environ, **as_environ(flags())}  # rank 0's flags, as it read them: every rank runs alike
        for rank in range(1, cfg.tensor_parallel_size):
            with open(self.log(rank), "w") as log:
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "vt.engine.worker.tp", arg, str(rank), str(store.port)],
                    stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                    preexec_fn=_die_with_parent))

    @property
    def pipes(self) -> list[Any]:
        """Each worker's stdin: the scheduler outputs go down it."""
        return [p.stdin for p in self.procs]

    def log(self, rank: int) -> str:
        return os.path.join(self.logdir, f"rank{rank}.log")

    def wait_ready(self, deadline_s: float = STARTUP_S) -> None:
        """Every worker built its shard and runner: polled, so a worker that dies or never gets there ends the
        wait (WorkerDied, or a timeout naming the ranks) instead of hanging it."""
        deadline = time.monotonic() + deadline_s
        while self.store.add(READY_KEY, 0) < len(self.procs):
            self.check_alive()
            if time.monotonic() > deadline:
                raise WorkerDied(f"tensor-parallel workers did not finish loading within {deadline_s:.0f} s "
                                 f"(their logs: {self.logdir})")
            time.sleep(0.01)

    def broadcast(self, so: Any) -> None:
        """The step's scheduler output down every worker's pipe, in step order."""
        self.check_alive()
        payload = pickle.dumps(so, protocol=pickle.HIGHEST_PROTOCOL)
        for pipe in self.pipes:
            try:
                pipe.write(payload)
                pipe.flush()
            except OSError as e:  # a broken pipe: the worker is gone
                raise self.explain(e) from e

    def check_alive(self) -> None:
        for rank, p in enumerate(self.procs, start=1):
            if p.poll() is not None:
                raise WorkerDied(self._obituary(rank, p))

    def explain(self, error: BaseException, grace_s: float = 10.0) -> BaseException:
        """The error a failed step raises: WorkerDied if a worker is gone or has said its last words (a peer's
        death usually surfaces first as a socket error inside a collective), else the error itself."""
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            for rank, p in enumerate(self.procs, start=1):
                if p.poll() is not None or self._last_words(rank) is not None:
                    return WorkerDied(self._obituary(rank, p))
            time.sleep(0.05)
        return error

    def _last_words(self, rank: int) -> str | None:
        """The line a failing worker prints before it exits, if it has."""
        with open(self.log(rank), errors="replace") as f:
            said = [line.strip() for line in f if line.startswith(LAST_WORDS)]
        return said[-1] if said else None

    def _obituary(self, rank: int, p: subprocess.Popen) -> str:
        with open(self.log(rank), errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
        words = self._last_words(rank) or (lines[-1] if lines else "nothing")
        state = f"died with exit code {p.returncode}" if p.poll() is not None else "failed"
        return f"tensor-parallel rank {rank} (pid {p.pid}) {state}; its last words: {words} (its log: {self.log(rank)})"

    def shutdown(self) -> None:
        """End-of-file on every pipe is a worker's signal to leave; one that does not within 5 s is killed."""
        from vt.parallel import leave_group

        for pipe in self.pipes:
            with contextlib.suppress(OSError):
                pipe.close()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        with contextlib.suppress(Exception):
            leave_group(peer_died=any(p.returncode != 0 for p in self.procs))
        if all(p.returncode == 0 for p in self.procs):  # a failure's logs stay for its post-mortem
            shutil.rmtree(self.logdir, ignore_errors=True)

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()


def check_devices(backend: str, size: int) -> None:
    """One device per rank: refused by name before any process starts when the machine has fewer."""
    if backend != "cuda":
        return
    try:
        import cupy

        have = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - no CuPy, or no driver: the CUDA backend's own refusal
        raise ConfigError(f"backend='cuda' needs CuPy with a CUDA GPU (pip install 'vt[cuda]'): {e}") from None
    if have < size:
        raise ConfigError(f"tensor_parallel_size={size}: this machine has {have} CUDA device(s), one per rank needed")


def _die_with_parent() -> None:
    """In the worker, before it runs: the kernel kills it when rank 0 dies (Linux), so no rank is orphaned
    holding a device."""
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def build_rank(cfg: EngineConfig, rank: int, port: int) -> tuple[Any, Any, Any, Any]:
    """(checkpoint, backend, group, model shard) of one rank; every rank joins the group before loading."""
    from models.loader import load_checkpoint, resolve_model
    from models.registry import load_model
    from vt.engine.config import resolve_dtype
    from vt.parallel import init_group, join_store
    from vt.registry import make_backend

    if cfg.backend == "cuda":
        import cupy

        cupy.cuda.Device(rank).use()
    ckpt = load_checkpoint(resolve_model(cfg.model))
    backend = make_backend(cfg.backend)
    size = cfg.tensor_parallel_size
    group = init_group(backend, rank, size, join_store(port, size, TIMEOUT_S), TIMEOUT_S)
    model = load_model(ckpt, backend, resolve_dtype(cfg.dtype, ckpt.config.dtype, cfg.backend), group)
    return ckpt, backend, group, model


def worker_main(cfg: EngineConfig, rank: int, port: int) -> None:
    """A worker's life: build the shard, say it is ready, then run every scheduler output read from stdin,
    in order, until end-of-file (rank 0 closed the pipe, or died). An error is its last line, and its exit
    code 1."""
    import torch.distributed as dist

    from vt.engine.worker.runner import ModelRunner

    try:
        ckpt, _, group, model = build_rank(cfg, rank, port)
        runner = ModelRunner(model, cfg, None, None, eos_ids=tuple(sorted(ckpt.eos_ids)))
        group.store.add(READY_KEY, 1)
        steps = sys.stdin.buffer
        expected = 1
        while True:
            try:
                so = pickle.load(steps)
            except EOFError:
                dist.destroy_process_group()
                return
            if so.step != expected:
                raise EngineInvariantError(f"rank {rank} received the scheduler output of step {so.step}, "
                                           f"expected step {expected}: rank 0 broadcast a stale one")
            runner.execute(so)
            expected += 1
    except BaseException as e:  # noqa: BLE001 - a worker's death is reported by rank 0, with these words
        traceback.print_exc()
        print(f"{LAST_WORDS} {rank}: {type(e).__name__}: {e}", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    worker_main(pickle.loads(base64.b64decode(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3]))
