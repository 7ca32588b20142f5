"""What the start-up capture tests share (tests/engine/test_startup_capture*.py, test_startup_first_launch.py):
the prompts and engine sizes that reach every bucket, and the count of graphs taken."""

from __future__ import annotations

from vt import LLM

# Prompts that reach every bucket: short and long (past 256 tokens, the widest table and the largest
# prefill bucket), a budget that chunks the longest, and up to four decoding rows at once. Each starts with its
# own token, so none is served from another's cached prefix (which would shrink its steps below the buckets).
PROMPTS = [[100 + i] + list(range(3, 2 + n)) for i, n in enumerate((5, 40, 300, 17, 130, 420))]
KW = dict(max_model_len=512, num_blocks=160, max_num_seqs=4, max_num_batched_tokens=512)


def captures(llm: LLM) -> int:
    drivers = [llm.engine.runner.decoder]
    draft = getattr(llm.engine.runner.proposer, "driver", None)
    drivers += [draft] if draft is not None else []
    return sum(d.num_captures + d.num_prefill_captures for d in drivers)
