"""The offline API as a vLLM user calls it: prompt shapes, sampling_params=, RequestOutput with outputs[0], stop
conditions, get_tokenizer(). chat() and the logprobs, checked against transformers, are in
test_offline_api_oracle.py (transformers' imports are seconds that this file's mutants need not pay)."""

from __future__ import annotations

import pytest

from vt import LLM, SamplingParams
from vt.errors import RequestError

SP = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM("tiny-qwen3", max_model_len=128, num_blocks=32)


def test_every_prompt_shape_vllm_accepts_generates_the_same(llm: LLM) -> None:
    ids = llm.get_tokenizer().encode("Hello world")
    want = llm.generate("Hello world", SP)[0]
    assert want.outputs[0].token_ids and want.outputs[0].text == want.text, "non-vacuity: it generated"
    shapes = [["Hello world"], {"prompt": "Hello world"}, [{"prompt": "Hello world"}], ids, [ids],
              {"prompt_token_ids": ids}, [{"prompt_token_ids": ids}]]
    for shape in shapes:
        got = llm.generate(shape, sampling_params=SP)
        assert len(got) == 1 and got[0].outputs[0].token_ids == want.outputs[0].token_ids, shape
    assert got[0].prompt_token_ids == ids and got[0].finished and got[0].outputs[0].index == 0


@pytest.mark.parametrize("bad, names", [
    ({"text": "Hi"}, "a dict with keys ['text']"),
    ({"prompt": "Hi", "prompt_token_ids": [5]}, "exactly one of"),
    (3, "a int"),
    ([], "(empty)"),
    ([[1, "a"]], "list of ints"),
    (["fine", {"prompt": 7}], "expected a string"),
], ids=["unknown-key", "both-keys", "int", "empty", "mixed-ids", "non-string-prompt"])
def test_a_prompt_of_another_shape_is_a_typed_error_and_queues_nothing(llm: LLM, bad, names: str) -> None:
    with pytest.raises(RequestError, match=__import__("re").escape(names)):
        llm.generate(bad, SP)
    assert not llm.engine.has_unfinished(), "nothing was queued"


def test_a_stop_string_names_itself_as_the_stop_reason(llm: LLM) -> None:
    text = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))[0].text
    stop = text[2:4]
    assert stop.strip(), "non-vacuity: a real piece of the text"
    out = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=12, ignore_eos=True,
                                                          stop=[stop]))[0].outputs[0]
    assert out.finish_reason == "stop" and out.stop_reason == stop and stop not in out.text


def test_a_stop_token_id_finishes_with_its_id_as_the_stop_reason(llm: LLM) -> None:
    free = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))[0]
    stop = free.token_ids[3]
    assert stop not in free.token_ids[:3], "non-vacuity: it first appears at index 3"
    out = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=12, ignore_eos=True,
                                                          stop_token_ids=[stop]))[0].outputs[0]
    assert out.finish_reason == "stop" and out.stop_reason == stop and out.token_ids == free.token_ids[:4]
    with pytest.raises(RequestError, match="outside the vocabulary"):
        llm.generate("x", SamplingParams(stop_token_ids=[10**6]))


@pytest.mark.parametrize("engine_process", [False, True], ids=["in-process", "engine-process"])
def test_the_stop_tokens_text_is_left_out_unless_include_stop_str_in_output(llm: LLM, tmp_path, engine_process: bool
                                                                            ) -> None:
    """vLLM's rule (vllm/v1/engine/detokenizer.py, update(stop_terminated)): an output that a stop token id or EOS
    ended keeps that token's id, not its text, unless include_stop_str_in_output. Here EOS is a plain token, whose
    text skip_special_tokens keeps, as a checkpoint may declare it."""
    import json
    import shutil

    from models.loader import resolve_model

    prompt, tok = "The cat sat", llm.engine.tokenizer
    free = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))[0].token_ids
    at = next(i for i, t in enumerate(free) if i >= 2 and t not in free[:i] and tok.decode([t]).strip()
              and "\ufffd" not in tok.decode(free[: i + 1]))  # a token with whole characters of text
    stop = free[at]
    assert not {0, 2} & set(free[: at + 1]), "non-vacuity: the checkpoint's own EOS ids end nothing before it"
    ckpt = tmp_path / "ckpt"  # EOS is that token: generation_config.json's eos_token_id
    shutil.copytree(resolve_model("tiny-qwen3"), ckpt)
    gen = json.loads((ckpt / "generation_config.json").read_text())
    (ckpt / "generation_config.json").write_text(json.dumps({**gen, "eos_token_id": [stop]}))
    eng = LLM(str(ckpt), backend="cpu", max_model_len=128, num_blocks=32, engine_process=engine_process)
    try:
        for ends, kw in (("stop id", dict(ignore_eos=True, stop_token_ids=[stop])), ("eos", {})):
            for keep in (False, True):
                out = eng.generate(prompt, SamplingParams(temperature=0, max_tokens=12, include_stop_str_in_output=keep,
                                                          **kw))[0].outputs[0]
                assert out.finish_reason == "stop" and out.token_ids == free[: at + 1], (ends, keep, out)
                want = tok.decode(free[: at + (1 if keep else 0)], skip_special_tokens=True)
                assert out.text == want, (ends, keep, out.text, want)
    finally:
        if engine_process:
            eng.engine.close()
    assert tok.decode(free[: at + 1], skip_special_tokens=True) != tok.decode(free[:at], skip_special_tokens=True), \
        "non-vacuity: the stop token has text of its own"


def test_numpy_numbers_are_taken_as_pythons_own_in_sampling_params(llm: LLM) -> None:
    """SamplingParams(max_tokens=np.int64(5)) was refused ("max_tokens=5: must be an int >= 1"): a NumPy integer is
    an integer (numbers.Integral), a NumPy float a number; each is kept as Python's own (the engine process sends
    them as msgpack). A bool is still no int."""
    import numpy as np

    from vt.errors import ConfigError

    plain = dict(max_tokens=5, top_k=3, seed=7, n=2, min_tokens=1, logprobs=2, prompt_logprobs=1, temperature=0.5,
                 top_p=0.75, min_p=0.125, repetition_penalty=1.25, presence_penalty=0.5, frequency_penalty=0.25,
                 stop_token_ids=[7], logit_bias={5: 1.5}, allowed_token_ids=[5, 6, 7, 9, 11])
    ints = (np.int64, np.int32, np.uint64, np.int16, np.int8, np.int64, np.uint8)

    def as_numpy(v: object, i: int) -> object:
        if isinstance(v, dict):
            return {np.int64(t): np.float32(b) for t, b in v.items()}
        if isinstance(v, list):
            return [np.int32(t) for t in v]
        return np.float32(v) if isinstance(v, float) else ints[i % len(ints)](v)

    numpy = {k: as_numpy(v, i) for i, (k, v) in enumerate(plain.items())}
    try:
        sp, refusal = SamplingParams(**numpy), None
    except ConfigError as e:
        refusal = str(e)  # asserted outside the handler: the failure reads as this test's, not as the error's
    assert refusal is None, f"NumPy numbers refused: {refusal}"
    assert sp == SamplingParams(**plain), "the same values"
    loose = [k for k in plain if type(getattr(sp, k)) not in (int, float, list, dict)]
    ids = [*sp.stop_token_ids, *(sp.allowed_token_ids or []), *(sp.logit_bias or {})]
    assert not loose and {type(t) for t in ids} == {int}, (loose, ids)
    want, got = (llm.generate("Hello", p)[0] for p in (SamplingParams(**plain), sp))
    assert [c.token_ids for c in got.outputs] == [c.token_ids for c in want.outputs] and want.outputs[0].token_ids
    with pytest.raises(ConfigError, match="max_tokens=True"):
        SamplingParams(max_tokens=True)  # type: ignore[arg-type]


def test_include_stop_str_in_output_keeps_the_stop_string(llm: LLM) -> None:
    text = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))[0].text
    stop = text[2:4]
    kept = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, stop=[stop],
                                                           include_stop_str_in_output=True))[0]
    assert kept.text == text[: text.find(stop) + len(stop)] and kept.outputs[0].stop_reason == stop


def test_vt_generate_takes_the_sampling_options(capsys) -> None:
    from vt.cli import main

    argv = ["generate", "--model", "tiny-qwen3", "--prompt", "Once upon", "--max-tokens", "8", "--temperature",
            "0.8", "--top-k", "5", "--top-p", "0.9", "--min-p", "0.01", "--seed", "3", "--stop", "zzz",
            "--ignore-eos", "--max-model-len", "64", "--num-blocks", "8"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0 and capsys.readouterr().out == first, "seeded: the same text twice"


def test_min_tokens_holds_off_eos_and_stop_ids_then_lets_them_stop() -> None:
    llm = LLM("tiny-qwen3", max_model_len=128, num_blocks=32)
    base = SamplingParams(temperature=0, max_tokens=12)
    first = llm.generate(["Hello"], base)[0].token_ids[0]
    stop_at_once = llm.generate(["Hello"], SamplingParams(temperature=0, max_tokens=12, stop_token_ids=[first]))[0]
    assert stop_at_once.token_ids == [first] and stop_at_once.finish_reason == "stop", "non-vacuity: it stops at once"
    held = llm.generate(["Hello"], SamplingParams(temperature=0, max_tokens=12, stop_token_ids=[first],
                                                  min_tokens=4))[0]
    assert len(held.token_ids) >= 4 and first not in held.token_ids[:4], held.token_ids
    eos = sorted(llm.engine.eos_ids)
    no_eos = llm.generate(["Hello"] * 4, [SamplingParams(temperature=1.0, max_tokens=6, min_tokens=6, seed=s)
                                         for s in range(4)])
    assert all(len(o.token_ids) == 6 and not set(o.token_ids) & set(eos) for o in no_eos)


@pytest.mark.parametrize("temperature", [1e-39, 1e-44, 1e-6])
def test_a_temperature_below_vllms_epsilon_samples_greedily(temperature: float) -> None:
    """vLLM's rule: below 1e-5 a temperature is greedy (its filters off). Logits divided by 1e-39 overflow float32:
    without the rule their masses are NaN, and the draw raised inside the engine (every request in flight lost)."""
    llm = LLM("tiny-qwen3", max_model_len=128, num_blocks=32)  # its own: a mutant that kills it spares the others
    prompts = [{"prompt_token_ids": [5 + i, 17, 99, 3]} for i in range(4)]
    greedy = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))
    try:
        tiny = llm.generate(prompts, SamplingParams(temperature=temperature, top_k=5, seed=1, max_tokens=12,
                                                    ignore_eos=True))
    except Exception as e:  # noqa: BLE001 - the API accepted this temperature: nothing may die of it
        pytest.fail(f"temperature={temperature} took the engine down: {e!r}")
    want = [o.outputs[0].token_ids for o in greedy]
    assert [o.outputs[0].token_ids for o in tiny] == want
    assert len({tuple(t) for t in want}) > 1, "non-vacuity: the prompts decode differently"


def test_min_tokens_past_the_default_max_tokens_is_a_typed_error(llm: LLM) -> None:
    """max_tokens not given (None, the server's) is the checkpoint's max_new_tokens, else 16: a min_tokens past it was
    silently capped (16 tokens, finish reason length); now it is refused by name, as an explicit max_tokens below it
    is. SamplingParams' own default is vLLM's 16, refused as vLLM refuses it."""
    from vt.errors import ConfigError

    with pytest.raises(ConfigError, match="min_tokens=50: more than max_tokens=16, the default"):
        llm.engine.add_request("hi", SamplingParams(max_tokens=None, min_tokens=50))
    assert SamplingParams(max_tokens=None, min_tokens=50).resolve({"max_new_tokens": 64}).min_tokens == 50, \
        "non-vacuity: a checkpoint default large enough takes it"
    with pytest.raises(ConfigError, match=r"min_tokens=50: must be an int in \[0, max_tokens=16\]"):
        SamplingParams(min_tokens=50)
    out = llm.generate("hi", SamplingParams(min_tokens=16, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 16


def test_min_tokens_over_only_banned_allowed_tokens_is_refused_before_it_runs(llm: LLM) -> None:
    """allowed_token_ids that are all stop ids (or EOS) while min_tokens holds them off leave the first draw nothing
    to take: the request is refused by name before it is queued (it used to run and fail in the sampler, a 500 over
    HTTP). One allowed token outside the banned set runs."""
    from vt.errors import RequestError

    eos = sorted(llm.engine.eos_ids)[0]
    for stop, allowed in (([7], [7]), ([], [eos]), ([7, 9], [9, 7])):
        with pytest.raises(RequestError, match="holds off every one of allowed_token_ids"):
            llm.generate("hi", SamplingParams(min_tokens=2, max_tokens=4, allowed_token_ids=allowed,
                                              stop_token_ids=stop))
    out = llm.generate("hi", SamplingParams(min_tokens=2, max_tokens=4, allowed_token_ids=[7, 8],
                                            stop_token_ids=[7]))[0]
    assert out.outputs[0].token_ids[:2] == [8, 8], "non-vacuity: the unbanned token is drawn while min_tokens holds"
