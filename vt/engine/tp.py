"""Tensor parallelism's processes. Rank 0 is the engine: it schedules, broadcasts each step's scheduler
output over the gloo control group, and runs its own shard. Ranks 1..N-1 are worker processes (spawned,
one per device) that run every scheduler output they receive on theirs; the model's collectives keep the
ranks' forwards together, and every rank samples the same ids from the same gathered logits.

A worker that dies is found within a bounded time: by its exit code before each broadcast and while the
engine idles (AsyncLLM checks each second), inside a step by the gloo collective that fails when its
peer's sockets close, and on CUDA by the host's event waits, which poll the workers instead of blocking
(an NCCL collective waits for a dead peer forever). Rank 0 then raises WorkerDied naming the rank, its exit
code and its last words. Workers run in their own session (a Ctrl-C to the server is rank 0's to handle)
and die with rank 0 (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import base64
import contextlib
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any

from vt.engine.config import EngineConfig
from vt.env import as_environ, flags
from vt.errors import ConfigError, EngineInvariantError, WorkerDied

TIMEOUT_S = 60.0  # how long a collective or the start-up may wait for a peer
LAST_WORDS = "vt tensor-parallel rank"  # how a failing worker's last line begins


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the group's store; the server's, in tests)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class Workers:
    """Rank 0's handle on ranks 1..N-1: `python -m vt.engine.tp` processes (no re-import of the caller's
    __main__, as multiprocessing's spawn would need), each logging to its own file in a temporary folder."""

    def __init__(self, cfg: EngineConfig, port: int) -> None:
        self.logdir = tempfile.mkdtemp(prefix="vt-tp-")
        arg = base64.b64encode(pickle.dumps(cfg)).decode()
        self.procs: list[subprocess.Popen] = []
        self.control: Any = None
        env = {**os.environ, **as_environ(flags())}  # rank 0's flags, as it read them: every rank runs alike
        for rank in range(1, cfg.tensor_parallel_size):
            with open(self.log(rank), "w") as log:
                self.procs.append(subprocess.Popen([sys.executable, "-m", "vt.engine.tp", arg, str(rank), str(port)],
                                                   stdout=log, stderr=subprocess.STDOUT, env=env,
                                                   start_new_session=True, preexec_fn=_die_with_parent))

    def log(self, rank: int) -> str:
        return os.path.join(self.logdir, f"rank{rank}.log")

    def barrier(self) -> None:
        """Every worker built its shard (a worker that failed has closed its sockets: the barrier fails)."""
        import torch.distributed as dist

        try:
            dist.barrier(group=self.control)
        except Exception as e:
            raise self.explain(e) from e

    def broadcast(self, so: Any) -> None:
        import torch.distributed as dist

        self.check_alive()
        payload = [so]
        dist.broadcast_object_list(payload, src=0, group=self.control)

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
        import torch.distributed as dist

        try:
            if all(p.poll() is None for p in self.procs):
                dist.broadcast_object_list([None], src=0, group=self.control)
        except Exception:  # noqa: BLE001 - best effort: the processes are terminated below
            pass
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
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
    from vt.parallel import init_group
    from vt.registry import make_backend

    if cfg.backend == "cuda":
        import cupy

        cupy.cuda.Device(rank).use()
    ckpt = load_checkpoint(resolve_model(cfg.model))
    backend = make_backend(cfg.backend)
    group = init_group(backend, rank, cfg.tensor_parallel_size, port, TIMEOUT_S)
    model = load_model(ckpt, backend, resolve_dtype(cfg.dtype, ckpt.config.dtype, cfg.backend), group)
    return ckpt, backend, group, model


def worker_main(cfg: EngineConfig, rank: int, port: int) -> None:
    """A worker's life: build the shard, meet the others at the barrier, then run every scheduler output
    rank 0 broadcasts, in order, until it sends None. An error is its last line, and its exit code 1."""
    import torch.distributed as dist

    from vt.engine.runner import ModelRunner

    try:
        ckpt, _, group, model = build_rank(cfg, rank, port)
        runner = ModelRunner(model, cfg, None, None, eos_ids=tuple(sorted(ckpt.eos_ids)))
        dist.barrier(group=group.control)
        expected = 1
        while True:
            payload: list[Any] = [None]
            dist.broadcast_object_list(payload, src=0, group=group.control)
            so = payload[0]
            if so is None:
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
