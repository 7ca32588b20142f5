"""The seams of the engine core, in vLLM v1's shape: the scheduler's output goes into the runner, the
runner's output goes into the engine's update step. Nothing else crosses."""

from __future__ import annotations

from dataclasses import dataclass, field

from vt.engine.sample.params import ResolvedParams


@dataclass(slots=True)
class NewRequestData:
    """A request the runner has not seen (or has dropped: a preempted request comes back as new)."""

    req_id: str
    token_ids: list[int]  # every token to compute: the prompt, plus the generated ones on a recompute
    num_prompt_tokens: int  # of token_ids, the prompt's (penalties tell prompt from output)
    block_ids: list[list[int]]  # per KV group
    params: ResolvedParams
    seed: int  # the request's seed (drawn by the engine when the request named none)
    can_speculate: bool  # False for life once a request is first seen with committed tokens
    fork_of: str | None = None  # a sibling prefilled in this step: share its prompt blocks and logits row
    num_cached: int = 0  # leading tokens whose KV a cached prefix holds (block_ids starts with its blocks)

    @property
    def first_computed(self) -> int:
        """The first token this request's prefill computes: past its cached prefix, but never past its last token
        (whose logits it samples from; a prefix cached through that token holds its KV, which stays as it is)."""
        return 0 if self.fork_of else min(self.num_cached, len(self.token_ids) - 1)


@dataclass(slots=True)
class CachedRequestData:
    """A request the runner holds: what changed since its last step."""

    req_id: str
    new_token_ids: list[int]  # tokens the engine appended since the last step; the last one is computed now
    new_block_ids: list[list[int]]  # per KV group, appended to its tables
    num_computed_tokens: int  # tokens whose KV is in the cache before this step: the first position computed


@dataclass(slots=True)
class SchedulerOutput:
    new_reqs: list[NewRequestData] = field(default_factory=list)
    cached_reqs: list[CachedRequestData] = field(default_factory=list)
    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)  # by request id, speculative ones included
    spec_tokens: dict[str, int] = field(default_factory=dict)  # speculative positions reserved, by request id
    # by request id, for a prefill chunk (its length is num_scheduled_tokens): the position it starts at
    prefill_chunks: dict[str, int] = field(default_factory=dict)
    preempted_ids: list[str] = field(default_factory=list)
    finished_ids: set[str] = field(default_factory=set)  # left since the last step: the runner drops them
    step: int = 0  # the engine step it belongs to (tensor-parallel workers check they run every one, in order)

    @property
    def scheduled_ids(self) -> list[str]:
        return [r.req_id for r in self.new_reqs] + [r.req_id for r in self.cached_reqs]

    @property
    def is_empty(self) -> bool:
        """Nothing to compute and nothing for the runner to drop."""
        return not (self.num_scheduled_tokens or self.finished_ids or self.preempted_ids)


@dataclass(slots=True)
class RunnerOutput:
    sampled: dict[str, list[int]] = field(default_factory=dict)  # by request id; several after a verify
    errors: dict[str, str] = field(default_factory=dict)  # by request id: this request fails, the rest go on
    # by request id, one {token id: logprob} per sampled token: the top-n and the sampled one (when asked)
    logprobs: dict[str, list[dict[int, float]]] = field(default_factory=dict)
    # by request id, when asked: (position of the first token scored, per prompt token from there the top-n
    # and its own), chunk by chunk; a recompute after preemption scores the same positions again
    prompt_logprobs: dict[str, tuple[int, list[dict[int, float]]]] = field(default_factory=dict)
