"""A damaged checkpoint is one typed error naming what is wrong, found before any weight is read; never
a raw KeyError, a garbage model or a hang. (The damaged rope configs of checkpoints transformers saves are in
test_checkpoint_rope.py: they import transformers, which no mutant of this file needs.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backends.cpu import CpuBackend
from models.loader import load_checkpoint, resolve_model
from models.registry import load_model
from tests.helpers import guarding, through_the_engine
from vt.errors import CheckpointError, ConfigError

LAYER0 = "model.layers.0.self_attn.q_proj.weight"


def _copy(tmp_path: Path, name: str = "ckpt") -> Path:
    dest = tmp_path / name
    shutil.copytree(resolve_model("tiny-qwen3"), dest)
    return dest


def _rewrite(d: Path, edit) -> None:
    from safetensors.numpy import load_file, save_file

    w = load_file(str(d / "model.safetensors"))
    edit(w)
    save_file(w, str(d / "model.safetensors"))


def _edit_config(d: Path, edit) -> None:
    cfg = json.loads((d / "config.json").read_text())
    edit(cfg)
    (d / "config.json").write_text(json.dumps(cfg))


def _error(d: Path) -> CheckpointError:
    with pytest.raises(Exception) as ei:
        load_checkpoint(d)
    assert isinstance(ei.value, CheckpointError), f"{type(ei.value).__name__}: {ei.value}"
    return ei.value


def test_the_manifest_names_missing_unexpected_and_misshaped_tensors(tmp_path: Path) -> None:
    d = _copy(tmp_path)

    def damage(w: dict) -> None:
        w["model.layers.1.self_attn.q_proj.wieght"] = w.pop("model.layers.1.self_attn.q_proj.weight")
        del w["model.layers.2.mlp.up_proj.weight"]
        w[LAYER0] = w[LAYER0][:, :32].copy()

    _rewrite(d, damage)
    msg = str(_error(d))
    assert "2 missing: model.layers.1.self_attn.q_proj.weight, model.layers.2.mlp.up_proj.weight" in msg, msg
    assert "1 unexpected: model.layers.1.self_attn.q_proj.wieght" in msg, msg
    assert f"1 mis-shaped: {LAYER0} (64, 32) (expected (64, 64))" in msg, msg


def test_more_layers_in_the_config_than_in_the_weights(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    _edit_config(d, lambda c: c.update(num_hidden_layers=6))
    msg = str(_error(d))
    assert "6 layers" in msg and "missing: model.layers.4." in msg and " ..." in msg, msg


def test_an_unsupported_dtype_is_refused_by_name(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    _rewrite(d, lambda w: w.update({LAYER0: w[LAYER0].astype(np.int32)}))
    assert f"tensor '{LAYER0}' is I32: only F32, F16, BF16" in str(_error(d))


def test_a_truncated_file_is_named(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])
    assert "outside the file (truncated?)" in str(_error(d))


@pytest.mark.parametrize("kind", ["linear", "dynamic", "longrope"])
def test_rope_types_vt_does_not_implement_are_refused_by_name(tmp_path: Path, kind: str) -> None:
    d = _copy(tmp_path)
    _edit_config(d, lambda c: c.update(rope_scaling={"rope_type": kind, "factor": 2.0}))
    assert f"rope type {kind!r} is not supported" in str(_error(d))


@pytest.mark.parametrize("act", ["gelu_pytorch_tanh", "relu", "gelu"])
def test_an_activation_other_than_silu_is_refused_by_name(tmp_path: Path, act: str) -> None:
    """vt's MLP computes SiLU: a checkpoint of another activation would load and answer wrongly (vLLM refuses it)."""
    d = _copy(tmp_path)
    _edit_config(d, lambda c: c.update(hidden_act=act))
    err = str(_error(d))
    assert f"hidden_act {act!r} is not supported" in err and "malformed" not in err, err
    for ok in ("silu", "swish", None):  # None: the key left out, transformers' silu
        _edit_config(d, lambda c, ok=ok: c.update(hidden_act=ok) if ok else c.pop("hidden_act", None))
        with guarding(f"hidden_act {ok!r} loads", CheckpointError):
            load_checkpoint(d)


def test_an_unsupported_architecture_is_refused_by_name_not_as_a_malformed_file(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    _edit_config(d, lambda c: c.update(architectures=["MistralForCausalLM"]))
    err = str(_error(d))
    assert "'MistralForCausalLM' is not supported" in err and "malformed" not in err, err


def test_sliding_windows_are_refused_clearly(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    _edit_config(d, lambda c: c.update(use_sliding_window=True, sliding_window=4096))
    assert "sliding-window attention" in str(_error(d))


@pytest.mark.parametrize("gen, match", [({"top_p": 1.5}, "top_p=1.5"), ({"temperature": "hot"}, "temperature"),
                                        ({"max_new_tokens": 0}, "max_tokens=0"), ({"top_k": -3}, "top_k=-3"),
                                        ({"repetition_penalty": -3}, "repetition_penalty=-3"),
                                        ({"min_p": 2}, "min_p=2")],
                         ids=["top_p", "temperature", "max_new_tokens", "top_k", "repetition_penalty", "min_p"])
def test_generation_config_is_validated_like_sampling_params(tmp_path: Path, gen: dict, match: str) -> None:
    from vt import LLM

    d = _copy(tmp_path)
    (d / "generation_config.json").write_text(json.dumps(gen))
    with pytest.raises(CheckpointError, match=match):
        LLM(model=str(d), max_model_len=64, num_blocks=8)


def test_generation_config_max_new_tokens_is_the_default_max_tokens(tmp_path: Path) -> None:
    from vt import LLM, SamplingParams

    d = _copy(tmp_path)
    (d / "generation_config.json").write_text(json.dumps({"max_new_tokens": 7, "temperature": None}))
    llm = LLM(model=str(d), max_model_len=64, num_blocks=8)
    unset = SamplingParams(temperature=0, max_tokens=None, ignore_eos=True)  # the API server's "not given"
    assert [len(t) for t in through_the_engine(llm, ["Hello"], unset)] == [7]
    defaults = llm.get_default_sampling_params()  # the offline LLM's, vLLM's: used when none are given
    defaults.ignore_eos = True
    out = llm.generate(["Hello"], defaults)[0]
    assert len(out.token_ids) == 7 and out.finish_reason == "length"
    assert len(llm.generate(["Hello"], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))[0].token_ids) == 3


def test_generation_config_repetition_penalty_is_the_default_penalty(tmp_path: Path) -> None:
    """vLLM takes repetition_penalty from generation_config.json as a default, beside temperature, top_k, top_p,
    min_p and max_new_tokens (ModelConfig.get_diff_sampling_param): it was ignored. Explicit still wins."""
    from vt import LLM, SamplingParams

    d = _copy(tmp_path)
    (d / "generation_config.json").write_text(json.dumps({"repetition_penalty": 3.0}))
    inheriting, plain = (LLM(model=m, max_model_len=64, num_blocks=8) for m in (str(d), "tiny-qwen3"))

    def greedy(llm: LLM, **kw: float) -> list[int]:  # as the API server runs it: a field left None is the checkpoint's
        sp = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True, **kw)
        return through_the_engine(llm, ["Hello"], sp)[0]

    unpenalized = greedy(plain)
    assert greedy(plain, repetition_penalty=3.0) != unpenalized, "non-vacuity: the penalty changes this output"
    assert greedy(inheriting) == greedy(plain, repetition_penalty=3.0), "the checkpoint's penalty is the default"
    assert greedy(inheriting, repetition_penalty=1.0) == unpenalized, "an explicit value beats the checkpoint's"
    assert inheriting.get_default_sampling_params().repetition_penalty == 3.0, "the offline LLM's defaults have it"


def test_a_default_penalty_under_speculative_decoding_is_said_and_left_out(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Speculative decoding takes no penalties, and a request that sets one is refused. A checkpoint's default
    (Qwen2.5's generation_config.json: repetition_penalty 1.05) would have refused every request that set none:
    it is said once at load and left out, so such requests are served as on a checkpoint without it."""
    import logging

    from vt import LLM, SamplingParams
    from vt.errors import RequestError

    d = _copy(tmp_path)
    (d / "generation_config.json").write_text(json.dumps({"repetition_penalty": 1.05}))
    spec = dict(max_model_len=64, num_blocks=16, speculative_model="[ngram]", num_speculative_tokens=3)
    sp = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    with caplog.at_level(logging.WARNING, logger="vt"):
        inheriting = LLM(model=str(d), **spec)
    said = [r.getMessage() for r in caplog.records if "repetition_penalty=1.05 is not applied" in r.getMessage()]
    refused = ""
    try:
        served = through_the_engine(inheriting, ["Hello"], sp)[0]  # as the server runs it: unset is the checkpoint's
    except RequestError as e:
        refused = str(e)
    assert not refused, f"a request that set no penalty refused: {refused}"
    assert served == through_the_engine(LLM(model="tiny-qwen3", **spec), ["Hello"], sp)[0]
    assert len(said) == 1, caplog.text
    with pytest.raises(RequestError, match="repetition_penalty"):  # non-vacuity: one set by the request still is
        inheriting.generate(["Hello"], SamplingParams(max_tokens=2, repetition_penalty=1.05))


# ---- any damage: a typed error, nothing else ------------------------------------------------------

TENSOR_DAMAGE = ["drop", "rename", "reshape", "retype", "truncate"]
CONFIG_DAMAGE = ["delete", "string", "negative", "null", "list"]
CONFIG_KEYS = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
               "head_dim", "intermediate_size", "rope_theta", "rms_norm_eps", "tie_word_embeddings", "architectures",
               "max_position_embeddings", "eos_token_id"]


# report_multiple_bugs=False: raw errors of several kinds (each the cause of the same assertion) are one broken
# guarantee, reported as that assertion, not as an ExceptionGroup of "distinct" failures
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          report_multiple_bugs=False)
@given(data=st.data())
def test_a_damaged_checkpoint_raises_only_typed_errors(tmp_path: Path, data: st.DataObject) -> None:
    import tempfile

    d = Path(tempfile.mkdtemp(dir=tmp_path)) / "ckpt"
    shutil.copytree(resolve_model("tiny-qwen3"), d)
    if data.draw(st.booleans()):
        kind = data.draw(st.sampled_from(TENSOR_DAMAGE))
        if kind == "truncate":
            blob = (d / "model.safetensors").read_bytes()
            (d / "model.safetensors").write_bytes(blob[: data.draw(st.integers(0, len(blob) - 1))])
        else:
            name = data.draw(st.sampled_from(sorted(load_checkpoint(resolve_model("tiny-qwen3")).weights)))
            _rewrite(d, lambda w: _damage_tensor(w, name, kind))
    else:
        key, kind = data.draw(st.sampled_from(CONFIG_KEYS)), data.draw(st.sampled_from(CONFIG_DAMAGE))
        bad = {"string": "x", "negative": -1, "null": None, "list": [1, 2]}
        _edit_config(d, lambda c: c.pop(key, None) if kind == "delete" else c.update({key: bad[kind]}))
    with guarding("a damaged checkpoint raises a CheckpointError or a ConfigError, nothing else", Exception):
        try:
            model = load_model(load_checkpoint(d), CpuBackend())
        except (CheckpointError, ConfigError):
            return
    assert model.cfg.num_hidden_layers > 0  # loaded: a harmless damage (a default filled the gap)


def _damage_tensor(w: dict, name: str, kind: str) -> None:
    if kind == "drop":
        del w[name]
    elif kind == "rename":
        w[name + ".x"] = w.pop(name)
    elif kind == "reshape":
        w[name] = w[name].reshape(-1)[:-1].copy()
    else:
        w[name] = w[name].astype(np.int32)


def test_a_head_dim_the_cuda_kernels_cannot_serve_is_refused_before_any_weight() -> None:
    """The CUDA decode kernel sums a key's dims over a power-of-two count of lanes: at head_dim 80 or 96 it would
    mix keys' lanes and attend garbage. The CUDA backend refuses such a model by name when it loads; the CPU
    backend's twins run any head dim."""
    import dataclasses

    from backends.cuda import CudaBackend

    ckpt = load_checkpoint(resolve_model("tiny-qwen3"))
    for hd in (80, 96):  # the check is the class's: it reads the config alone, no GPU needed
        with pytest.raises(CheckpointError, match=f"head_dim {hd} is not served by the CUDA backend"):
            CudaBackend.check_model(dataclasses.replace(ckpt.config, head_dim=hd))
    for hd in (16, 32, 64, 128, 256):  # non-vacuity, and the promise, written here rather than read from the code:
        with guarding(f"the CUDA backend serves head_dim {hd}", CheckpointError):  # Qwen2.5's 64, Qwen3's 128 ...
            CudaBackend.check_model(dataclasses.replace(ckpt.config, head_dim=hd))

    class Refusing(CpuBackend):
        @classmethod
        def check_model(cls, config) -> None:
            raise CheckpointError(f"refused head_dim {config.head_dim}")

    with pytest.raises(CheckpointError, match="refused head_dim 16"):  # the loader asks before it builds anything
        load_model(ckpt, Refusing())
    assert load_model(ckpt, CpuBackend()).cfg.head_dim == 16  # the CPU backend refuses nothing


@pytest.mark.parametrize("field,value", [("hidden_size", 1030), ("hidden_size", 16388), ("num_experts", 513),
                                         ("num_experts_per_tok", 33)])
def test_a_shape_the_cuda_norm_or_routing_kernels_cannot_run_is_refused_by_its_field(field: str, value: int) -> None:
    """The RMSNorm kernel reads a row as float4s (at most 16,384 wide), the routing kernel keeps at most 512 experts
    and a top-32 per token: a checkpoint one past them is refused by name when it loads, not by a kernel's
    ValueError at its first step. The largest shapes each kernel serves pass."""
    import dataclasses

    from backends.cuda import CudaBackend

    moe = load_checkpoint(resolve_model("tiny-qwen3-moe")).config
    with pytest.raises(CheckpointError, match=f"config.json: {field} {value} is not served by the CUDA backend"):
        CudaBackend.check_model(dataclasses.replace(moe, **{"num_experts": 64, field: value}))  # top-k <= experts
    CudaBackend.check_model(dataclasses.replace(moe, hidden_size=16384, num_experts=512, num_experts_per_tok=32))
    dense = load_checkpoint(resolve_model("tiny-qwen3")).config
    assert not dense.is_moe
    CudaBackend.check_model(dataclasses.replace(dense, num_experts_per_tok=33))  # no routing kernel in a dense model


NOT_UTF8 = b"\xff\xfe\x00 not text"
DAMAGED_FILES = {  # file: (its damaged content, what the one line must say)
    "config-a-list": ("config.json", b"[1]", "not a JSON object"),
    "config-not-utf8": ("config.json", NOT_UTF8, "not valid JSON"),
    "generation-not-utf8": ("generation_config.json", NOT_UTF8, "not valid JSON"),
    "tokenizer-config-a-list": ("tokenizer_config.json", b"[1, 2]", "not a JSON object"),
    "tokenizer-config-not-utf8": ("tokenizer_config.json", NOT_UTF8, "not valid JSON"),
    "eos-a-string": ("generation_config.json", b'{"eos_token_id": [7, "x"]}', "eos_token_id [7, 'x']"),
    "eos-an-object": ("generation_config.json", b'{"eos_token_id": {"a": 1}}', "eos_token_id {'a': 1}"),
}


@pytest.mark.parametrize("case", sorted(DAMAGED_FILES))
def test_a_damaged_json_file_beside_the_weights_is_one_typed_line(tmp_path: Path, case: str) -> None:
    """config.json, generation_config.json and tokenizer_config.json that are not JSON objects, not UTF-8, or name
    an eos id that is no token id: a CheckpointError naming the file, never an AttributeError, UnicodeDecodeError
    or TypeError from deep in the engine (each was, before)."""
    name, content, says = DAMAGED_FILES[case]
    d = _copy(tmp_path)
    assert load_checkpoint(d).config.vocab_size > 0, "non-vacuity: the undamaged copy loads"
    (d / name).write_bytes(content)
    err = str(_error(d))
    assert name in err and says in err, err


def test_a_chat_template_file_that_is_not_utf8_is_one_typed_error_naming_it(tmp_path: Path) -> None:
    """chat_template.jinja of bytes that are not UTF-8 raised a raw UnicodeDecodeError from the loader."""
    d = _copy(tmp_path)
    (d / "chat_template.jinja").write_text("{{ messages[0]['content'] }} \u00e9", encoding="utf-8")
    assert load_checkpoint(d).chat_template == "{{ messages[0]['content'] }} \u00e9", "non-vacuity: UTF-8 is read"
    (d / "chat_template.jinja").write_bytes(NOT_UTF8)
    err = str(_error(d))
    assert "chat_template.jinja" in err and "not UTF-8" in err, err


EOS_OUTSIDE = {  # case: (file, its eos_token_id, the same file's eos_token_id that loads)
    "generation-past-the-vocab": ("generation_config.json", [0, 2, 600], [0, 2, 511]),
    "config-negative": ("config.json", -1, 511),
    "config-the-vocab-size": ("config.json", 512, 2),
}


@pytest.mark.parametrize("case", sorted(EOS_OUTSIDE))
def test_an_eos_id_outside_the_vocabulary_is_refused_at_load_by_file_and_field(tmp_path: Path, case: str) -> None:
    """An EOS id past the vocabulary loaded, then a request with min_tokens (which bans EOS ids) raised an IndexError
    in the sampler that killed the engine (vt serve too); -1 silently banned token 511 by negative indexing. Now
    the loader refuses it, naming the file and the field."""
    name, bad, good = EOS_OUTSIDE[case]
    d = _copy(tmp_path)
    vocab = load_checkpoint(d).config.vocab_size
    assert vocab == 512, "the ids below are the tiny model's edges"

    def write(eos: object) -> None:
        data = json.loads((d / name).read_text())
        data["eos_token_id"] = eos
        (d / name).write_text(json.dumps(data))

    write(good)
    in_range = set(good if isinstance(good, list) else [good])
    assert in_range <= load_checkpoint(d).eos_ids, "non-vacuity: in-range ids load"
    write(bad)
    err = str(_error(d))
    assert name in err and f"eos_token_id {bad!r}" in err and "[0, 512)" in err, err


@pytest.mark.parametrize("field,value,says", [("architectures", "Qwen3ForCausalLM", "not a list of class names"),
                                              ("rope_scaling", "yarn", "rope_scaling must be an object")])
def test_a_config_field_of_the_wrong_shape_is_named(tmp_path: Path, field: str, value: str, says: str) -> None:
    """A bare string where config.json holds a list or an object was read letter by letter ('Q' as the
    architecture; dict() over 'yarn'): now named."""
    d = _copy(tmp_path)
    _edit_config(d, lambda c: c.__setitem__(field, value))
    assert says in str(_error(d))


def test_the_cli_answers_a_damaged_checkpoint_with_one_line_and_exit_2(tmp_path: Path) -> None:
    import subprocess
    import sys

    d = _copy(tmp_path)
    (d / "tokenizer_config.json").write_bytes(b"[1, 2]")
    r = subprocess.run([sys.executable, "-m", "vt.cli", "generate", "--model", str(d), "--backend", "cpu", "--prompt",
                        "hi", "--max-tokens", "2"], capture_output=True, text=True, timeout=120)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "CheckpointError" in lines[0], (r.returncode, r.stderr[-800:])
    assert "Traceback" not in r.stderr
