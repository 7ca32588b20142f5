"""A step that fails while tensor-parallel workers run raises what the workers' explain() makes of the error (a
peer's death surfaces first as a socket error inside a collective; explain names the dead rank). Deterministic,
beside the killed-worker test, where the watchdog may see the death before any collective fails."""

from __future__ import annotations

from vt.engine.core.outputs import SchedulerOutput
from vt.engine.front.llm_engine import LLMEngine
from vt.errors import WorkerDied


class DeadPeer:
    """Workers whose collective fails on a socket, and whose explain names rank 1 as dead."""

    def broadcast(self, so: SchedulerOutput) -> None:
        raise ConnectionResetError("gloo: Connection reset by peer")

    def explain(self, error: BaseException) -> BaseException:
        return WorkerDied(f"rank 1 exited with exit code -9 (after {type(error).__name__})")


def test_a_failed_step_raises_the_workers_explanation_not_the_socket_error() -> None:
    engine = LLMEngine.__new__(LLMEngine)  # only what _execute reads: the workers
    engine.workers = DeadPeer()
    caught: BaseException | None = None
    try:
        engine._execute(SchedulerOutput())
    except BaseException as e:  # noqa: BLE001 - the test inspects it
        caught = e
    assert isinstance(caught, WorkerDied) and "rank 1" in str(caught), f"explained by name, not {caught!r}"
    assert isinstance(caught.__cause__, ConnectionResetError), "non-vacuity: the socket error is its cause"
