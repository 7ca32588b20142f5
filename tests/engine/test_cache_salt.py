"""vLLM's cache_salt: a prompt shares cached prefix blocks only with prompts of the same salt (or, unsalted, with
unsalted ones), so one tenant's prompts cannot be timed against another's. The salt roots the chain of block keys;
what is generated never depends on it. Shown on the manager, on the offline API in this process and through the
engine's own process, where the salt crosses the wire."""

from __future__ import annotations

import pytest

from tests.helpers import guarding
from vt import LLM, SamplingParams
from vt.engine.core.kv_manager import KVCacheManager
from vt.errors import RequestError

PROMPT = list(range(20, 68))  # three whole blocks of 16
GREEDY = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)


def test_a_salted_chain_is_served_only_under_its_own_salt() -> None:
    kv = KVCacheManager(num_blocks=16, block_size=4, max_blocks_per_seq=8, enable_caching=True)
    tokens = list(range(1, 13))  # three full blocks
    a, b = KVCacheManager.salt_root("a"), KVCacheManager.salt_root("b")
    kv.allocate("x", [len(tokens)])
    kv.cache_full_blocks("x", tokens, len(tokens), root=a)
    assert kv.lookup(tokens, root=a) == kv.block_ids("x")[:3], "non-vacuity: its own salt is served every block"
    assert kv.lookup(tokens, root=b) == [], "another salt is served nothing"
    assert kv.lookup(tokens) == [], "no salt is served nothing of a salted chain"
    kv.allocate("y", [len(tokens)])
    kv.cache_full_blocks("y", tokens, len(tokens))
    assert kv.lookup(tokens) == kv.block_ids("y")[:3], "the unsalted chain is its own, beside the salted one"
    assert kv.lookup(tokens, root=a) == kv.block_ids("x")[:3], "and the salted one is still served under its salt"


def cached_tokens(llm: LLM, salt: str | None) -> int | None:
    prompt = {"prompt_token_ids": PROMPT} if salt is None else {"prompt_token_ids": PROMPT, "cache_salt": salt}
    return llm.generate(prompt, GREEDY, use_tqdm=False)[0].num_cached_tokens


@pytest.mark.parametrize("engine_process", [False, True], ids=["in-process", "engine-process"])
def test_the_offline_api_serves_a_prefix_only_under_the_salt_it_was_cached_with(engine_process: bool) -> None:
    llm = LLM("tiny-qwen3", backend="cpu", max_model_len=256, num_blocks=64, engine_process=engine_process)
    try:
        with guarding("LLM.generate takes a prompt's cache_salt", RequestError):
            served = [cached_tokens(llm, salt) for salt in ("tenant-a", "tenant-b", None, "tenant-a", "tenant-b")]
        assert served[:3] == [0, 0, 0], f"each salt (and none) computes the prompt itself: {served}"
        assert served[3:] == [len(PROMPT) - 1] * 2, f"sent again under its salt, the prompt is served: {served}"
        assert cached_tokens(llm, None) == len(PROMPT) - 1, "non-vacuity: unsalted prompts share among themselves"
        outs = [llm.generate({"prompt_token_ids": PROMPT, **kw}, GREEDY, use_tqdm=False)[0].outputs[0].token_ids
                for kw in ({}, {"cache_salt": "tenant-a"}, {"cache_salt": "tenant-c"})]
        assert outs[0] == outs[1] == outs[2], "the salt changes which KV is reused, never the tokens"
    finally:
        if engine_process:
            llm.engine.close()


@pytest.mark.parametrize("salt", ["", 7, ["a"]])
def test_a_salt_that_is_not_a_non_empty_string_is_refused_by_name(salt: object) -> None:
    llm = LLM("tiny-qwen3", backend="cpu", max_model_len=256, num_blocks=64)
    with pytest.raises(RequestError, match=r"cache_salt=.*must be a non-empty string"):
        llm.generate([{"prompt": "Hello", "cache_salt": "fine"}, {"prompt": "Hello", "cache_salt": salt}], GREEDY)
    assert not llm.engine.has_unfinished(), "nothing was queued, the good prompt included"
    with pytest.raises(RequestError, match="must be a non-empty string"):
        llm.engine.add_request("Hello", GREEDY, cache_salt=salt)  # type: ignore[arg-type]
    assert not llm.engine.has_unfinished()


def test_a_block_its_decode_fills_is_keyed_under_its_salt() -> None:
    """A salted prompt shorter than a block: its first full block fills while it decodes (keyed then, step by step,
    not at admission). A later prompt holding that block is served it under the salt alone."""
    llm = LLM("tiny-qwen3", backend="cpu", max_model_len=256, num_blocks=64)
    short = list(range(30, 40))  # 10 tokens: less than a block of 16
    sp = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    first = llm.generate({"prompt_token_ids": short, "cache_salt": "tenant-a"}, sp, use_tqdm=False)[0]
    held = short + list(first.outputs[0].token_ids)[:7]  # 17 tokens: the first block whole, then one more

    def served(salt: str | None) -> int | None:
        prompt = {"prompt_token_ids": held, **({} if salt is None else {"cache_salt": salt})}
        return llm.generate(prompt, GREEDY, use_tqdm=False)[0].num_cached_tokens

    assert [served(None), served("tenant-b")] == [0, 0], "another salt, or none, is served nothing of it"
    assert served("tenant-a") == 16, "non-vacuity: under its salt the decode-filled block is served"
