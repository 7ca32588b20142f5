"""Every typed error vt raises, in one module.

Errors that mirror CUDA carry CUDA's error name and text exactly (operators grep logs for them):
`str(CaptureUnsupported())` is
"cudaErrorStreamCaptureUnsupported: operation not permitted when stream is capturing".
"""

from __future__ import annotations


class VtError(Exception):
    """Base of every error vt raises on purpose."""


# --- errors that mirror CUDA (name and text as cudaGetErrorName / cudaGetErrorString give them) ---


class CudaError(VtError):
    cuda_name = "cudaErrorUnknown"
    cuda_text = "unknown error"

    def __init__(self, detail: str = "") -> None:
        self.detail = detail
        msg = f"{self.cuda_name}: {self.cuda_text}"
        super().__init__(msg + (f" ({detail})" if detail else ""))


class CaptureUnsupported(CudaError):
    cuda_name = "cudaErrorStreamCaptureUnsupported"
    cuda_text = "operation not permitted when stream is capturing"


class CaptureInvalidated(CudaError):
    cuda_name = "cudaErrorStreamCaptureInvalidated"
    cuda_text = "operation failed due to a previous error during capture"


class CaptureIsolation(CudaError):
    cuda_name = "cudaErrorStreamCaptureIsolation"
    cuda_text = "dependency created on uncaptured work in another stream"


class CaptureUnjoined(CudaError):
    cuda_name = "cudaErrorStreamCaptureUnjoined"
    cuda_text = "capturing stream has unjoined work"


class IllegalState(CudaError):
    cuda_name = "cudaErrorIllegalState"
    cuda_text = "the operation cannot be performed in the present state"


class IllegalMemoryAccess(CudaError):
    cuda_name = "cudaErrorIllegalAddress"
    cuda_text = "an illegal memory access was encountered"


class WorkerDied(VtError, RuntimeError):
    """A tensor-parallel worker process, or the engine core's process, is gone: the engine cannot step without
    it."""


class StreamRace(VtError, RuntimeError):
    """Two streams touched the same bytes, at least one writing, with no wait between them: on a GPU the
    answer depends on timing. Only the CPU's stream-order simulator can see it (backends/streams.py)."""


class CaptureOnLegacyStream(VtError, RuntimeError):
    """CuPy's refusal, reproduced: the legacy default stream cannot capture."""

    def __init__(self) -> None:
        super().__init__("cannot capture on the default (legacy) stream")


class H2DDuringCapture(VtError, RuntimeError):
    """CuPy's refusal, reproduced: a synchronous host->device copy on a capturing stream."""

    def __init__(self) -> None:
        super().__init__("the current stream is capturing, so H2D transfers are disallowed")


# --- vt's own errors ---


class BadBufferError(VtError, ValueError):
    """Freeing twice, freeing another backend's buffer, a size that is negative or absurd."""


class GraphDestroyed(VtError, RuntimeError):
    """Replaying (or re-destroying) a graph that was destroyed."""


class GraphInputMismatch(VtError, ValueError):
    """Replaying a graph over inputs of another shape or dtype than it was captured with."""


class PoolError(VtError, RuntimeError):
    """Misuse of a DevicePool: foreign block, double put, second pool for one backend."""


class NestedCaptureScope(VtError, RuntimeError):
    """A second GraphCaptureScope opened on a thread that already has one open."""


class ConfigError(VtError, ValueError):
    """A configuration value outside its allowed range; names the field and the range."""


class CapacityError(VtError, ValueError):
    """A configuration in which one max_model_len request cannot fit in the KV blocks."""


class RequestError(VtError, ValueError):
    """A request the engine cannot serve (bad input, or it can never fit)."""


class CheckpointError(VtError, ValueError):
    """A malformed or unknown checkpoint."""


class EngineInvariantError(VtError, RuntimeError):
    """An engine invariant broke; names the request and the numbers that disagree."""


class DraftPositionMismatch(EngineInvariantError):
    """Draft context length != the row's committed position (never silenced)."""


class ServerStartError(VtError, RuntimeError):
    """A server started as a child process (`vt bench serve --model`) exited before it listened; carries its
    exit code and its last words."""

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class EngineDeadError(RuntimeError):
    """The engine loop (or its process) stopped on a fatal error: every request in flight failed with it."""
