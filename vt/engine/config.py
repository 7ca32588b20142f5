"""Engine configuration, validated at construction with errors that name the field and the range."""

from __future__ import annotations

import logging
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vt.engine.sample.params import GENERATION_KEYS, SEED_RANGE, is_seed, validate_generation_config
from vt.errors import CapacityError, ConfigError
from vt.registry import BACKENDS, detect_backend

NGRAM = "[ngram]"
NGRAM_LOOKUP_MAX = 3  # ngram_prompt_lookup_max's default
GPU_MEMORY_UTILIZATION = 0.9  # gpu_memory_utilization's default on CUDA (vLLM's)
DTYPES = ("auto", "bfloat16", "float16", "float32")
DTYPE_ALIASES = {"half": "float16", "float": "float32"}  # vLLM's other spellings (its ModelDType), taken as these
# Fields where None, vLLM's EngineArgs' "not given", is the field's own default (0: decided once sized; seed 0,
# as vLLM v1 takes seed=None)
NONE_IS_DEFAULT = ("max_model_len", "num_blocks", "max_num_batched_tokens", "max_num_seqs", "block_size", "seed")
INT_FIELDS = (*NONE_IS_DEFAULT, "num_speculative_tokens", "ngram_prompt_lookup_max", "seed", "tensor_parallel_size")


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _need(cond: bool, field: str, value: object, allowed: str) -> None:
    if not cond:
        raise ConfigError(f"{field}={value!r}: must be {allowed}")


@dataclass(slots=True)
class EngineConfig:
    model: str
    backend: str = "auto"  # cpu, cuda, or auto: CUDA where CuPy sees a GPU, else the CPU
    max_model_len: int = 0  # 0 (or None): the checkpoint's, capped by what the KV cache holds
    num_blocks: int = 0  # KV blocks in the pool; 0 (or None): sized from memory (vt/engine/memory.py)
    # CUDA: the share of the GPU the engine may hold, the KV cache gets the rest; None: 0.9 (the CPU refuses one)
    gpu_memory_utilization: float | None = None
    kv_cache_gib: float | None = None  # the KV cache's size in GiB (overrides the utilization); CPU default: 4 or less
    block_size: int = 16
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 0  # tokens a step computes (decodes first, then prefill chunks); 0: 8192 or more
    enforce_eager: bool = False  # no decode graphs (as VT_CUDAGRAPH=0)
    # Every graph captured at start-up (decode keys, prefill buckets), never on a request's time. None: on
    # CUDA, where a capture costs a request tens of ms; the CPU backend's graphs are a simulation, captured
    # on first use unless asked (a test suite builds hundreds of engines).
    startup_capture: bool | None = None
    speculative_model: str | None = None  # a draft checkpoint, or NGRAM for prompt lookup (no second model)
    num_speculative_tokens: int = 0
    ngram_prompt_lookup_max: int | None = None  # the longest context suffix [ngram] matches; None: NGRAM_LOOKUP_MAX
    seed: int = 0
    dtype: str = "auto"  # auto: the checkpoint's dtype on CUDA, float32 compute on the CPU (see resolve_dtype)
    tensor_parallel_size: int = 1  # ranks, one process and one device each (vt/engine/worker/tp.py)
    # vLLM's --async-scheduling: a decode step is scheduled and launched while the one before runs, its input
    # tokens read on the device; the update step (stops, detokenization) overlaps it. None: on for CUDA without
    # speculation or tensor parallelism (the H200: GPU idle between decode steps 29.6% -> 0.1% at c=32); the
    # CPU's steps are the host's own work, with nothing to overlap
    async_scheduling: bool | None = None
    enable_prefix_caching: bool = True  # full prompt blocks shared across requests (vt/engine/core/kv_manager.py)
    chat_template: str | None = None  # a Jinja template (its file's path or its text) in place of the checkpoint's
    trust_remote_code: bool = False  # vLLM's: vt runs no checkpoint code either way (see _check_trust_remote_code)
    # vLLM's: where a request's unset sampling fields come from: auto (the checkpoint's generation_config.json),
    # vllm (nowhere: the neutral values), or a folder holding a generation_config.json; the override's fields
    # are laid over that source's
    generation_config: str = "auto"
    override_generation_config: dict[str, Any] | None = None

    def _check_generation_config(self) -> None:
        src = self.generation_config
        _need(isinstance(src, str) and bool(src.strip()), "generation_config", src,
              "auto, vllm, or a folder holding a generation_config.json")
        if src not in ("auto", "vllm") and not (Path(src).expanduser() / "generation_config.json").is_file():
            raise ConfigError(f"generation_config={src!r}: not auto or vllm, and no generation_config.json in a "
                              f"folder of that name")
        over = self.override_generation_config
        if over is None:
            return
        if not isinstance(over, dict):
            raise ConfigError(f"override_generation_config={over!r}: expected an object of sampling defaults "
                              f"({', '.join(GENERATION_KEYS)})")
        unknown = sorted(k for k in over if k not in GENERATION_KEYS)
        if unknown:
            raise ConfigError(f"override_generation_config.{unknown[0]}: not a sampling default vt reads (it reads "
                              f"{', '.join(GENERATION_KEYS)})")
        try:
            validate_generation_config(over)
        except (ConfigError, TypeError) as e:
            raise ConfigError(f"override_generation_config: {e}") from None

    def __post_init__(self) -> None:
        for name in INT_FIELDS:  # None is vLLM's "the default", a bool is no int, a NumPy integer is one
            v = getattr(self, name)
            if v is None and name in NONE_IS_DEFAULT:
                setattr(self, name, EngineConfig.__dataclass_fields__[name].default)
            elif isinstance(v, bool):
                raise ConfigError(f"{name}={v!r}: must be an int, not a bool")
            elif isinstance(v, numbers.Integral):
                setattr(self, name, int(v))
        _need(isinstance(self.model, str) and bool(self.model), "model", self.model, "a model name or path")
        _need(isinstance(self.backend, str) and self.backend in ("auto", *BACKENDS), "backend", self.backend,
              f"auto or one of {', '.join(BACKENDS)}")
        for name, what in (("speculative_model", "a draft checkpoint (a name or a directory) or [ngram]"),
                           ("chat_template", "a Jinja template (its file's path or its text)")):
            v = getattr(self, name)
            _need(v is None or isinstance(v, str) and bool(v.strip()), name, v, f"{what}, or None")
        chosen = self.backend != "auto"
        if not chosen:
            self.backend = detect_backend()
        _need(is_seed(self.seed), "seed", self.seed, SEED_RANGE)
        if type(self.dtype).__module__ == "torch" and str(self.dtype).startswith("torch."):
            self.dtype = str(self.dtype).removeprefix("torch.")  # vLLM's LLM(dtype=torch.float16), torch not imported
        if isinstance(self.dtype, str):
            self.dtype = DTYPE_ALIASES.get(self.dtype, self.dtype)
        _need(self.dtype in DTYPES, "dtype", self.dtype, f"one of {', '.join((*DTYPES, *DTYPE_ALIASES))}")
        self._check_trust_remote_code()
        self._check_generation_config()
        _need(self.startup_capture is None or isinstance(self.startup_capture, bool), "startup_capture",
              self.startup_capture, "True, False or None (on for CUDA)")
        _need(_is_int(self.max_model_len) and self.max_model_len != 1 and self.max_model_len >= 0, "max_model_len",
              self.max_model_len, "an int >= 2, or 0 / None (the checkpoint's)")
        _need(_is_int(self.block_size) and self.block_size in (8, 16, 32), "block_size", self.block_size,
              "8, 16 or 32")
        _need(_is_int(self.num_blocks) and self.num_blocks >= 0, "num_blocks", self.num_blocks,
              "an int >= 1, or 0 / None (sized from memory)")
        self._check_gpu_memory_utilization(chosen)
        g = self.kv_cache_gib
        _need(g is None or not isinstance(g, bool) and isinstance(g, (int, float)) and 0.0 < g < 2**20, "kv_cache_gib",
              g, "a positive number of GiB, or None")
        _need(isinstance(self.enable_prefix_caching, bool), "enable_prefix_caching", self.enable_prefix_caching,
              "True or False")
        # ints checked as ints first: a string compared with one raised a bare TypeError (session 33's probe)
        _need(_is_int(self.max_num_seqs) and 1 <= self.max_num_seqs <= 1024, "max_num_seqs", self.max_num_seqs,
              "an int in [1, 1024]")
        _need(_is_int(self.num_speculative_tokens) and self.num_speculative_tokens >= 0, "num_speculative_tokens",
              self.num_speculative_tokens, "an int >= 0")
        self._check_speculation_options()
        _need(_is_int(self.max_num_batched_tokens) and self.max_num_batched_tokens >= 0, "max_num_batched_tokens",
              self.max_num_batched_tokens, "an int >= 1, or 0 / None (8192, or max_model_len if larger)")
        _need(isinstance(self.enforce_eager, bool), "enforce_eager", self.enforce_eager, "True or False")
        _need(isinstance(self.tensor_parallel_size, int) and 1 <= self.tensor_parallel_size <= 8,
              "tensor_parallel_size", self.tensor_parallel_size, "an int in [1, 8]")
        _need(self.tensor_parallel_size == 1 or self.speculative_model is None, "tensor_parallel_size",
              self.tensor_parallel_size, "1 with speculative decoding (not supported across ranks yet)")
        _need(self.async_scheduling is None or isinstance(self.async_scheduling, bool), "async_scheduling",
              self.async_scheduling,
              "True, False or None (on for CUDA without speculation or tensor parallelism)")
        if self.async_scheduling is None:
            self.async_scheduling = (self.backend == "cuda" and self.speculative_model is None
                                     and self.tensor_parallel_size == 1)
        _need(not self.async_scheduling or (self.speculative_model is None and self.tensor_parallel_size == 1),
              "async_scheduling", self.async_scheduling,
              "False with speculative decoding or tensor parallelism (not supported together yet)")
        if self.speculative_model is not None:
            _need(self.num_speculative_tokens >= 1, "num_speculative_tokens", self.num_speculative_tokens,
                  ">= 1 when speculative_model is set")
        if self.max_num_batched_tokens:  # given: checked now, before any checkpoint is read
            self._check_token_budget()
        if self.max_model_len and self.num_blocks:
            self.settle(self.max_model_len, self.num_blocks)

    def _check_trust_remote_code(self) -> None:
        """Taken, not refused: vt runs only the architectures of its own models/, never code a checkpoint ships,
        so True can widen nothing, and a script written for vLLM (which needs it for such checkpoints) still runs.
        Said once, not dropped in silence; a checkpoint of an architecture vt lacks is refused as ever."""
        _need(isinstance(self.trust_remote_code, bool), "trust_remote_code", self.trust_remote_code, "True or False")
        if self.trust_remote_code:
            logging.getLogger("vt").warning("trust_remote_code=True: vt never runs code from a checkpoint; it runs "
                                            "only the architectures it implements, so the option changes nothing")

    def _check_gpu_memory_utilization(self, backend_chosen: bool) -> None:
        """A number in (0, 1] on CUDA (None: 0.9, vLLM's default). The CPU shares no GPU: its KV cache's size is
        kv_cache_gib, so a utilization given there would change nothing, in silence (0.01 and 1.0 sized alike). The
        CPU asked for by name refuses one; `auto` that found no GPU says it is unused (a script written for a GPU
        still runs on a machine without one)."""
        u = self.gpu_memory_utilization
        _need(u is None or not isinstance(u, bool) and isinstance(u, (int, float)) and 0.0 < u <= 1.0,
              "gpu_memory_utilization", u, "a number in (0, 1]")
        if u is not None and self.backend == "cpu":
            why = (f"gpu_memory_utilization={u!r}: the CPU backend has no GPU to share; its KV cache's size is "
                   "kv_cache_gib (by default 4 GiB, or a quarter of the available memory if less)")
            if backend_chosen:
                raise ConfigError(why)
            logging.getLogger("vt").warning("backend auto found no GPU: %s; unused", why)
            # dropped once said: the engine core's copy of this config (dataclasses.replace) is checked again,
            # its backend then named
            self.gpu_memory_utilization = None
        if u is None and self.backend != "cpu":
            self.gpu_memory_utilization = GPU_MEMORY_UTILIZATION

    def _check_speculation_options(self) -> None:
        """The options of a speculation that is not asked for mean nothing: said, not dropped (the CLI's
        --num-speculative-tokens and the API's keywords meet this one rule)."""
        n, lookup = self.num_speculative_tokens, self.ngram_prompt_lookup_max
        if n and self.speculative_model is None:
            raise ConfigError(f"num_speculative_tokens={n!r}: needs speculative_model (a draft checkpoint, or {NGRAM})")
        if lookup is not None and self.speculative_model != NGRAM:
            raise ConfigError(f"ngram_prompt_lookup_max={lookup!r}: needs speculative_model={NGRAM!r}")
        _need(lookup is None or _is_int(lookup) and lookup >= 1, "ngram_prompt_lookup_max", lookup, "an int >= 1")

    def settle(self, max_model_len: int, num_blocks: int) -> None:
        """The checks and defaults that need max_model_len and num_blocks: at construction when both are given,
        else once the engine has read the checkpoint and sized the KV cache."""
        self.max_model_len, self.num_blocks = max_model_len, num_blocks
        if self.max_num_batched_tokens == 0:
            self.max_num_batched_tokens = max(8192, self.max_model_len)
        self._check_token_budget()
        self.check_capacity()

    def _check_token_budget(self) -> None:
        decode_tokens = self.max_num_seqs * (1 + self.num_speculative_tokens)
        _need(self.max_num_batched_tokens >= decode_tokens, "max_num_batched_tokens", self.max_num_batched_tokens,
              f">= max_num_seqs x (1 + num_speculative_tokens) = {decode_tokens}: every running request's decode "
              f"tokens fit in one step")
        _need(self.max_num_batched_tokens >= (self.max_model_len if self.speculative_model else 1),
              "max_num_batched_tokens", self.max_num_batched_tokens,
              f">= max_model_len ({self.max_model_len}) with a speculative model (the draft prefills whole prompts)"
              if self.speculative_model else ">= 1")

    @property
    def max_blocks_per_seq(self) -> int:
        assert self.max_model_len, "settle() first"
        return -(-self.max_model_len // self.block_size)

    @property
    def has_draft_model(self) -> bool:
        return self.speculative_model is not None and self.speculative_model != NGRAM

    @property
    def num_kv_groups(self) -> int:
        """KV groups in the one block pool: the target's, and the draft model's when there is one."""
        return 2 if self.has_draft_model else 1

    def check_capacity(self) -> None:
        """Refuse a configuration in which one max_model_len request cannot fit in the KV blocks, counting
        every group it holds blocks in (a draft model's KV draws on the same pool)."""
        assert self.num_blocks, "settle() first"
        groups = self.num_kv_groups
        needed = self.max_blocks_per_seq * groups
        if needed > self.num_blocks:
            largest = self.num_blocks // groups * self.block_size
            per_group = f" ({self.max_blocks_per_seq} for the target and as many for the draft)" if groups > 1 else ""
            # a length under 2 holds no prompt token and one generated: never advised
            fits, lower = ((f"; the largest max_model_len that fits is {largest}", f" or lower max_model_len to "
                            f"{largest} or less") if largest >= 2 else ("; no max_model_len fits", ""))
            raise CapacityError(
                f"one max_model_len={self.max_model_len} request needs {needed} KV blocks of {self.block_size} "
                f"tokens{per_group}, but only {self.num_blocks} are available{fits}. Raise num_blocks to at least "
                f"{needed}{lower}.")


def resolve_dtype(requested: str, checkpoint_dtype: str, backend: str) -> str:
    """The dtype weights and the KV cache are held in (models/decoder.py). auto is the checkpoint's dtype
    on CUDA. On the CPU auto is float32: NumPy has no bf16 GEMM, so a bf16 model there widens every
    weight per GEMM and runs several times slower, and the CPU is the float32 oracle; bf16 and fp16
    widen to float32 exactly, so the checkpoint's values are kept. An explicit bfloat16 / float16 on the
    CPU runs the CUDA path's numerics (rounded GEMM operands and KV cache), to check them without a GPU."""
    ckpt = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32"}.get(checkpoint_dtype,
                                                                                                 checkpoint_dtype)
    if requested != "auto":
        return requested
    return ckpt if backend != "cpu" and ckpt in DTYPES else "float32"
