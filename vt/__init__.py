"""vt: an LLM inference engine whose CUDA-graph and memory discipline is proven on the CPU first."""

from __future__ import annotations

from typing import Any

__all__ = ["LLM", "Logprob", "SamplingParams", "StructuredOutputsParams"]


def __getattr__(name: str) -> Any:
    # Lazy: `import vt` must not pull the engine, models or backends in (DESIGN.md, Layout).
    if name == "LLM":
        from vt.engine.front.llm import LLM

        return LLM
    if name == "Logprob":
        from vt.engine.core.request import Logprob

        return Logprob
    if name == "SamplingParams":
        from vt.engine.sample.params import SamplingParams

        return SamplingParams
    if name == "StructuredOutputsParams":
        from vt.engine.sample.structured import StructuredOutputsParams

        return StructuredOutputsParams
    raise AttributeError(name)
