"""A draft model's share of start-up sizing: the default max_model_len is the shorter of the target's and the
draft's positions, the KV plan counts the draft's arrays beside the target's, a pool too small for one block per
group is one typed line, and the plan is printed in every mode with sizes that read as what was allocated."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from models.loader import load_checkpoint, resolve_model
from tests.engine.test_spec_decode import DRAFT, K, engine, greedy
from tests.helpers import guarding
from vt.engine.memory import kv_bytes_per_block, weight_bytes
from vt.engine.sample.params import SamplingParams
from vt.errors import ConfigError, VtError

TARGET = "tiny-qwen3"
SHORT = 64  # the short draft's positions: far below the target's, so the draft's limit is the binding one


def short_draft(tmp_path: Path) -> str:
    d = tmp_path / "short-draft"
    shutil.copytree(resolve_model(DRAFT), d)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(cfg | {"max_position_embeddings": SHORT}))
    return str(d)


def kv_bytes(kv) -> int:
    """What a KV cache really holds: the nbytes of every layer's K and V array."""
    return sum(getattr(t, "data", t).nbytes for t in list(kv.k) + list(kv.v))


def allocated(e) -> tuple[int, int]:
    """(target, draft) KV bytes of an engine's real arrays."""
    return kv_bytes(e.runner.kv), kv_bytes(e.runner.proposer.kv) if e.runner.proposer is not None else 0


def test_a_draft_with_no_max_model_len_takes_the_shorter_of_the_two_lengths(tmp_path: Path, caplog) -> None:
    caplog.set_level("INFO", logger="vt")
    target_len = load_checkpoint(resolve_model(TARGET)).config.max_position_embeddings
    with guarding("a draft as long as the target starts at the checkpoint's length", VtError):
        for given in (0, target_len):  # left to the checkpoint, and given as exactly the draft's limit
            e = engine(max_model_len=given, num_blocks=2 * -(-target_len // 16), max_num_seqs=1)
            assert e.cfg.max_model_len == target_len, f"max_model_len={given}: the checkpoint's length"
    short = short_draft(tmp_path)
    with guarding("a shorter draft with no max_model_len starts at the draft's length", VtError):
        e = engine(draft=short, max_model_len=0)
    assert e.cfg.max_model_len == SHORT, "the shorter of the target's and the draft's positions"
    assert any("draft" in r.message and str(SHORT) in r.message for r in caplog.records), "the cap is said"
    with guarding("max_model_len up to the draft's positions is accepted", VtError):
        engine(draft=short, max_model_len=SHORT)
    with pytest.raises(ConfigError, match=f"max_model_len={SHORT + 1}: .*draft model's .*short-draft"):
        engine(draft=short, max_model_len=SHORT + 1)


def test_speculation_to_the_end_of_the_context_stays_within_the_drafts_positions(tmp_path: Path) -> None:
    """Generating to max_model_len (the draft's positions): speculation runs near the end, and no step schedules a
    proposed token at a position past the draft's last (a token's position is the count of tokens before it)."""
    with guarding("a short draft with no max_model_len starts", VtError):
        e = engine(draft=short_draft(tmp_path), max_model_len=0)
    reqs = []  # prompts of several lengths: some request reaches the last k positions with a full proposal due
    for words in range(1, 2 * K + 1):
        prompt = e.tokenize(" ".join(["keep"] * words))
        reqs.append(e.add_request(prompt, greedy(SHORT - len(prompt))))
    ends: list[int] = []  # per request a step speculated for: one past the last position it scheduled

    def schedule(orig=e.scheduler.schedule):
        out = orig()
        ends.extend(e.requests[rid].num_tokens + spec for rid, spec in out.spec_tokens.items())
        return out

    e.scheduler.schedule = schedule
    with guarding("speculation up to max_model_len", Exception):
        while e.requests:
            e.step()
    assert all(r.num_tokens == SHORT for r in reqs), "generated to max_model_len"
    assert ends and max(ends) <= SHORT, f"speculated positions up to {max(ends, default=0) - 1}, past {SHORT - 1}"
    assert max(ends) > SHORT - K, "non-vacuity: speculation ran within k tokens of the end"


def test_the_kv_plan_counts_the_drafts_arrays_and_prints_what_was_allocated(caplog) -> None:
    caplog.set_level("INFO", logger="vt")
    budget = 0.01
    e = engine(max_model_len=256, num_blocks=0, kv_cache_gib=budget)
    target, draft = allocated(e)
    assert draft > 0, "non-vacuity: the draft's group allocated its arrays"
    assert target + draft <= budget * 2**30, f"{target} + {draft} bytes allocated for kv_cache_gib={budget}"
    printed = [int(m) for r in caplog.records for m in re.findall(r"KV cache: .*?(\d+) bytes", r.message)]
    assert printed == [target + draft], f"the plan printed {printed} bytes; {target + draft} were allocated"


def test_a_given_num_blocks_is_checked_with_the_drafts_arrays(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host is stood in for with exactly the weights and the target's pool for 32 blocks: the target alone
    fits, the target and its draft are refused before anything is allocated."""
    from vt.engine import memory

    blocks = 32
    target_only = kv_bytes(engine(draft=None, max_model_len=256, num_blocks=blocks).runner.kv)
    weights = weight_bytes(load_checkpoint(resolve_model(TARGET)).weights.infos, 4)
    monkeypatch.setattr(memory, "available_bytes", lambda backend: (weights + target_only, "this host"))
    with guarding("the target's pool alone fits at the boundary", VtError):
        engine(draft=None, max_model_len=256, num_blocks=blocks)
    with pytest.raises(ConfigError, match=f"num_blocks={blocks}: the KV cache needs"):
        engine(max_model_len=256, num_blocks=blocks)


def cli(capsys, *flags: str) -> tuple[int, str]:
    from vt.cli import main

    try:
        rc = main(["generate", "--model", TARGET, "--backend", "cpu", "--prompt", "Hi", "--max-tokens", "2",
                   "--temperature", "0", "--speculative-model", DRAFT, "--num-speculative-tokens", "2", *flags])
    except BaseException as e:  # noqa: BLE001 - the guarantee is one typed line, never an escape
        raise AssertionError(f"{flags}: the CLI ended on {type(e).__name__}: {e}, not one typed line") from e
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("flags", [(), ("--max-model-len", "16")], ids=["length-from-the-pool", "length-given"])
def test_a_pool_without_one_block_per_group_is_one_typed_line(capsys, flags: tuple[str, ...]) -> None:
    rc, err = cli(capsys, "--num-blocks", "1", *flags)
    errors = [line for line in err.splitlines() if "error:" in line]
    assert rc == 2 and len(errors) == 1 and "CapacityError" in errors[0], f"one typed line, exit 2: {rc} {err!r}"
    assert "at least 2" in errors[0], f"names the blocks needed, one a group: {errors[0]}"
    assert not re.search(r"max_model_len to [01]\b", errors[0]), f"never advises a length below 2: {errors[0]}"
    rc, err = cli(capsys, "--num-blocks", "2", *flags)
    assert rc == 0, f"non-vacuity: a block a group starts: {err}"


def test_the_plan_is_printed_for_a_given_num_blocks_with_a_small_size_readable(caplog) -> None:
    caplog.set_level("INFO", logger="vt")
    e = engine(max_model_len=32, num_blocks=4)
    total = sum(allocated(e))
    lines = [r.message for r in caplog.records if r.message.startswith("KV cache: 4 blocks")]
    assert len(lines) == 1, f"the plan is printed for a given num_blocks: {[r.message for r in caplog.records]}"
    m = re.search(r"\(([\d.]+) (KiB|MiB|GiB)", lines[0])
    assert m, f"a size with its unit: {lines[0]}"
    value, unit = float(m[1]), {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[m[2]]
    assert len(m[1].replace(".", "").lstrip("0")) >= 3, f"three significant digits at least: {m[0]}"
    assert abs(value * unit - total) <= 0.01 * total, f"{m[0]} reads as the {total} bytes allocated"


def _cuda_with_draft(**kw):
    """A tiny CUDA engine with its draft (float32 weights and KV), or the ConfigError line that refused it. Running
    out of memory while it starts is the sizing's broken guarantee (it allotted more than the GPU holds): an
    assertion here, not the test's crash."""
    import cupy

    from vt import LLM

    try:
        with guarding(f"an engine sized by {kw} fits the GPU", cupy.cuda.memory.OutOfMemoryError,
                      cupy.cuda.runtime.CUDARuntimeError):
            return LLM(TARGET, backend="cuda", dtype="float32", speculative_model=DRAFT, num_speculative_tokens=K,
                       **kw), None
    except ConfigError as e:
        return None, str(e)


def _release() -> None:
    """What earlier engines of this process left in CuPy's pool goes back before the next reads what is free."""
    import gc

    import cupy

    gc.collect()
    cupy.get_default_memory_pool().free_all_blocks()


@pytest.mark.gpu
def test_on_the_gpu_the_utilization_sizes_the_drafts_kv_with_the_targets() -> None:
    """Sized at two utilizations: the target's and the draft's arrays together grow by the utilizations' difference
    of the card (the draft holds as many blocks: left out of a block's bytes, they would grow half as much again
    here), and the largest step runs after sizing at the higher one."""
    import cupy

    _release()
    free, total = cupy.cuda.runtime.memGetInfo()
    high_util = min(0.5, 0.55 * free / total)
    low_util = 0.6 * high_util
    if high_util < 0.2:
        pytest.skip(f"{free / 2**30:.1f} GiB free of {total / 2**30:.1f}: no room for two engines' shares")
    low, refused = _cuda_with_draft(gpu_memory_utilization=low_util, max_model_len=4096)
    assert low is not None, f"the lower utilization did not start: {refused}"
    low_target, low_draft = allocated(low.engine)
    assert low_draft > 0, "non-vacuity: the draft's group allocated its arrays"
    del low
    _release()
    high, refused = _cuda_with_draft(gpu_memory_utilization=high_util, max_model_len=4096)
    assert high is not None, f"the higher utilization did not start: {refused}"
    grown = sum(allocated(high.engine)) - low_target - low_draft
    want = (high_util - low_util) * total
    assert abs(grown - want) < 0.02 * total, f"the KV arrays grew {grown} bytes for {want} of utilization"
    outs = high.generate([[5] * 4000] + [[7] * 30] * 15, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    assert all(len(o.outputs[0].token_ids) == 4 for o in outs), "the largest step ran after sizing"


@pytest.mark.gpu
def test_on_the_gpu_a_given_num_blocks_counts_the_drafts_arrays() -> None:
    """Blocks whose target arrays fill 0.8 of the free memory fit alone; with the draft's arrays (half as much again)
    they are refused before anything is allocated, never an out-of-memory part way through the start."""
    import cupy

    _release()
    free = cupy.cuda.runtime.memGetInfo()[0]
    per_target = kv_bytes_per_block(load_checkpoint(resolve_model(TARGET)).config, 16, 4)
    blocks = int(0.8 * free) // per_target
    engine_, refused = _cuda_with_draft(num_blocks=blocks, max_model_len=1024)
    assert engine_ is None and refused is not None and f"num_blocks={blocks}" in refused, (
        f"{blocks} blocks with a draft were not refused up front: {refused}")
    _release()
    from vt import LLM

    with guarding("the target's arrays alone fit", VtError):
        alone = LLM(TARGET, backend="cuda", dtype="float32", num_blocks=blocks, max_model_len=1024)
    assert sum(allocated(alone.engine)) >= 0.8 * free - per_target, "non-vacuity: the target's pool was allocated"
