"""A damaged rope config in a checkpoint transformers saved is one typed error naming the key, found before any
weight is read; a YaRN config without its original context reads as transformers reads it. Apart from
test_checkpoint_errors.py: these build their checkpoints with transformers (seconds of imports), which none of
that file's mutants needs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from models.loader import load_checkpoint
from vt.errors import CheckpointError


def _edit_config(d: Path, edit) -> None:
    cfg = json.loads((d / "config.json").read_text())
    edit(cfg)
    (d / "config.json").write_text(json.dumps(cfg))


ROPE_DAMAGE = [("qwen3-yarn", "factor", "x"), ("qwen3-yarn", "beta_fast", -1), ("qwen3-yarn", "attention_factor", [1]),
               ("llama3", "low_freq_factor", None), ("llama3", "original_max_position_embeddings", "big"),
               ("llama3", "factor", 0)]


@pytest.fixture(scope="module")
def hf_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hf-rope")


@pytest.mark.parametrize("arch, key, value", ROPE_DAMAGE, ids=[f"{a}-{k}-{v}" for a, k, v in ROPE_DAMAGE])
def test_a_damaged_rope_scaling_is_refused_by_name_before_any_weight(hf_root: Path, tmp_path: Path, arch: str,
                                                                      key: str, value) -> None:
    from tests.models.hf_checkpoints import make

    d = tmp_path / "ckpt"
    shutil.copytree(make(arch, hf_root), d)
    rope = json.loads((d / "config.json").read_text())["rope_parameters"]
    assert key in rope or value is not None, "non-vacuity: the key is one the config really has"

    def edit(c: dict) -> None:
        if value is None:
            c["rope_parameters"].pop(key)
        else:
            c["rope_parameters"][key] = value

    _edit_config(d, edit)
    (d / "model.safetensors").write_bytes(b"")  # had a weight been read first, this would fail otherwise
    with pytest.raises(CheckpointError, match=key):
        load_checkpoint(d)


def test_yarn_without_its_original_context_reads_as_transformers_reads_it(hf_root: Path, tmp_path: Path) -> None:
    """transformers takes max_position_embeddings for a YaRN config without
    original_max_position_embeddings: so does vt, and the logits agree."""
    from tests.models.hf_checkpoints import make
    from tests.models.test_architectures import TOL, hf_greedy, vt_greedy

    d = tmp_path / "ckpt"
    shutil.copytree(make("qwen3-yarn", hf_root), d)
    _edit_config(d, lambda c: c["rope_parameters"].pop("original_max_position_embeddings"))
    want_tokens, want = hf_greedy(d, 4)
    got_tokens, got = vt_greedy(d, 4)
    assert got_tokens == want_tokens and np.abs(got - want).max() < TOL
