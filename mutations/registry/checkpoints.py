"""Real checkpoints (issue 12): the manifest check, transformers 4 and 5 config aliases, llama3 and YaRN RoPE,
Qwen2's q/k/v biases, bf16 and float16 storage and GEMMs, generation_config.json.
"""

from __future__ import annotations

from mutations.model import Mutation
from mutations.registry.gates import ARCH, ARCH_ERR, ARCH_NAMES, DTYPES, bf16_vs_hf

LOW_PRECISION = "tests/models/test_low_precision.py"  # apart from test_architectures.py's transformers
SCALED_ROPE = ("qwen3-yarn", "llama3")  # the checkpoints whose rope differs from transformers' default

ENTRIES: list[Mutation] = [
    Mutation(
        id="manifest-check-removed",
        description="the loader reads weights without comparing the checkpoint's tensors with what the config implies",
        file="models/loader.py", old="    check_manifest(config, infos)  # before any weight is read\n", new="",
        gates=(f"{ARCH_ERR}::test_the_manifest_names_missing_unexpected_and_misshaped_tensors",
               f"{ARCH_ERR}::test_more_layers_in_the_config_than_in_the_weights",
               f"{ARCH_ERR}::test_an_unsupported_dtype_is_refused_by_name",
               f"{ARCH_ERR}::test_a_damaged_checkpoint_raises_only_typed_errors"),
    ),
    Mutation(
        id="bf16-read-as-float16",
        description="BF16 tensors are read with float16's bit layout instead of widened from bfloat16",
        file="models/safetensors_io.py", old='"BF16": np.dtype(ml_dtypes.bfloat16)', new='"BF16": np.dtype(np.float16)',
        gates=(*(f"{ARCH}::test_a_bf16_checkpoint_widens_exactly[{a}]" for a in ("qwen3-yarn", "llama3")),
               f"{ARCH}::test_dtype_bfloat16_rounds_float32_weights_as_torch_does", *bf16_vs_hf(*ARCH_NAMES)),
    ),
    Mutation(
        id="config-alias-num-local-experts",
        description="transformers 5's num_local_experts is not read: a Qwen3-MoE config reads as dense",
        file="models/config.py", old='int(d.get("num_experts", d.get("num_local_experts", 0)) or 0)',
        new='int(d.get("num_experts", 0) or 0)',
        gates=(f"{ARCH}::test_both_config_layouts_read_the_same[qwen3-moe-float32]",
               f"{ARCH}::test_greedy_tokens_and_logits_match_transformers[qwen3-moe]", *bf16_vs_hf("qwen3-moe")),
    ),
    Mutation(
        id="config-alias-rope-parameters",
        description="transformers 5's rope_parameters is not read: theta and the rope type fall back to defaults",
        file="models/config.py", old='    params = d.get("rope_parameters")\n', new='    params = None\n',
        # qwen2's and qwen3-moe's checkpoints rotate by transformers' default theta with the default rope, which the
        # fallback reads the same: only yarn's and llama3's rope parameters can tell the two apart
        gates=(*(f"{ARCH}::test_both_config_layouts_read_the_same[{a}-float32]" for a in SCALED_ROPE),
               f"{ARCH}::test_both_config_layouts_read_the_same[llama3-bfloat16]",
               *(f"{ARCH}::test_greedy_tokens_and_logits_match_transformers[{a}]" for a in SCALED_ROPE),
               *(f"{ARCH}::test_a_bf16_checkpoint_widens_exactly[{a}]" for a in SCALED_ROPE),
               *bf16_vs_hf("qwen3-yarn")),
    ),
    Mutation(
        id="config-alias-torch-dtype",
        description="transformers 4's torch_dtype is not read: a bf16 checkpoint declares float32",
        file="models/config.py", old='str(d.get("dtype") or d.get("torch_dtype") or "float32")',
        new='str(d.get("dtype") or "float32")',
        gates=(f"{ARCH}::test_both_config_layouts_read_the_same[llama3-bfloat16]",),
    ),
    Mutation(
        id="rope-llama3-ignored",
        description="llama3 rope scaling is read but not applied: plain RoPE frequencies",
        file="models/rope.py", old='    if c.rope_type == "llama3":\n', new='    if False:\n',
        gates=(f"{ARCH}::test_greedy_tokens_and_logits_match_transformers[llama3]",
               f"{ARCH}::test_a_bf16_checkpoint_widens_exactly[llama3]"),
    ),
    Mutation(
        id="rope-yarn-ignored",
        description="YaRN rope scaling is read but not applied: plain RoPE frequencies, no attention factor",
        file="models/rope.py", old='    if c.rope_type == "yarn":\n', new='    if False:\n',
        gates=(f"{ARCH}::test_greedy_tokens_and_logits_match_transformers[qwen3-yarn]",
               f"{ARCH}::test_a_bf16_checkpoint_widens_exactly[qwen3-yarn]", *bf16_vs_hf("qwen3-yarn")),
    ),
    Mutation(
        id="qwen2-qkv-bias-skipped",
        description="Qwen2's q/k/v biases are loaded but the fused q/k norm + rotary + KV write never adds them",
        file="backends/kernels/rotary.py", old="    x = qkv if bias is None else qkv + bias\n", new="    x = qkv\n",
        gates=(f"{ARCH}::test_greedy_tokens_and_logits_match_transformers[qwen2]", *bf16_vs_hf("qwen2")),
    ),
    Mutation(
        id="bf16-narrow-truncates",
        description="float32 -> bf16 truncates instead of rounding to nearest even (the KV cache and every GEMM operand)",
        file="vt/dtypes.py", old="    rne = (u + ((u >> 16) & 1) + 0x7FFF) >> 16\n", new="    rne = u >> 16\n",
        gates=(f"{DTYPES}::test_narrow_rounds_every_float32_class_as_ml_dtypes_does",
               f"{DTYPES}::test_widen_is_exact_and_to_storage_agrees_with_narrow",
               *(f"{DTYPES}::test_a_low_precision_gemm_rounds_its_left_operand_and_accumulates_in_float32[{d}]"
                 for d in ("bfloat16",))),
    ),
    Mutation(
        id="cuda-bf16-narrow-truncates",
        description="the CUDA float32 -> bf16 rounding (every kernel that narrows) truncates instead of rounding to nearest even",
        file="backends/kernels/common.cuh", old=": (unsigned short)((u + ((u >> 16) & 1u) + 0x7FFFu) >> 16);",
        new=": (unsigned short)(u >> 16);", needs_gpu=True,
        gates=(f"{DTYPES}::test_the_cuda_conversion_kernels_equal_the_numpy_ones",),
    ),
    Mutation(
        id="gemm-left-operand-not-rounded",
        description="a bf16 GEMM takes its float32 activations unrounded (cuBLAS GemmEx would read them as bf16 bits)",
        file="backends/gemm.py", old="        a = narrow(xp, a, b.dtype)\n", new="        pass\n",
        gates=tuple(f"{DTYPES}::test_a_low_precision_gemm_rounds_its_left_operand_and_accumulates_in_float32[{d}]"
                    for d in ("bfloat16", "float16")),
    ),
    Mutation(
        id="kv-cache-ignores-model-dtype",
        description="the KV cache is float32 whatever the model dtype: a bf16 model's cache takes twice the memory",
        file="models/base.py", old="    dtype = model.kv_dtype\n", new="    dtype = np.dtype(F32)\n",
        gates=tuple(f"{LOW_PRECISION}::test_a_low_precision_model_holds_half_the_bytes[{d}]"
                    for d in ("bfloat16", "float16")),
    ),
    Mutation(
        id="low-precision-weights-kept-float32",
        description="dtype=bfloat16 keeps every weight in float32 (no rounding, twice the bytes)",
        file="models/decoder.py", old="            return widen_host(to_storage(np.asarray(hf[name], dtype=F32), self.dtype))\n",
        new="            return np.asarray(hf[name], dtype=F32)\n",
        gates=(f"{ARCH}::test_dtype_bfloat16_rounds_float32_weights_as_torch_does",),
    ),
    Mutation(
        id="generation-config-unvalidated",
        description="generation_config.json's sampling defaults are taken without validation",
        file="vt/engine/front/llm_engine.py", old="        defaults = validate_generation_config(source)\n",
        new="        defaults = dict(source)\n",
        gates=tuple(f"{ARCH_ERR}::test_generation_config_is_validated_like_sampling_params[{g}]"
                    for g in ("top_p", "temperature", "max_new_tokens", "top_k")),
    ),
    Mutation(
        id="generation-config-max-new-tokens-ignored",
        description="a checkpoint's max_new_tokens is not the default max_tokens",
        file="vt/engine/sample/params.py", old='        max_tokens = self.max_tokens or gen.get("max_new_tokens") or DEFAULT_MAX_TOKENS',
        new="        max_tokens = self.max_tokens or DEFAULT_MAX_TOKENS",
        gates=(f"{ARCH_ERR}::test_generation_config_max_new_tokens_is_the_default_max_tokens",),
    ),
    Mutation(
        id="generation-config-repetition-penalty-unvalidated",
        description="generation_config.json's repetition_penalty is not among the validated keys: -3 loads",
        file="vt/engine/sample/params.py",
        old='GENERATION_KEYS = ("repetition_penalty", "temperature",', new='GENERATION_KEYS = ("temperature",',
        gates=(f"{ARCH_ERR}::test_generation_config_is_validated_like_sampling_params[repetition_penalty]",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="generation-config-repetition-penalty-ignored",
        description="a checkpoint's repetition_penalty is not the default penalty (vLLM applies it)",
        file="vt/engine/sample/params.py", old='float(picked["repetition_penalty"])',
        new="float(self.repetition_penalty or 1.0)",
        gates=(f"{ARCH_ERR}::test_generation_config_repetition_penalty_is_the_default_penalty",),
    ),
    Mutation(
        id="cuda-backend-serves-any-head-dim",
        description="the CUDA backend loads a model of any head dim: at 80 or 96 the decode kernel's xor shuffles "
                    "mix keys' lanes and attend garbage, silently",
        file="backends/cuda.py",
        old="        if config.head_dim not in HEAD_DIMS:  # the attention kernels' layouts (backends/kernels/fused.py)\n",
        new="        if False:  # the attention kernels' layouts (backends/kernels/fused.py)\n",
        gates=(f"{ARCH_ERR}::test_a_head_dim_the_cuda_kernels_cannot_serve_is_refused_before_any_weight",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="loader-skips-the-backends-model-check",
        description="load_model builds the model without asking the backend whether its kernels can run it",
        file="models/registry.py",
        old="    backend.check_model(ckpt.config)  # a shape the backend's kernels cannot run: refused before any upload\n",
        new="",
        gates=(f"{ARCH_ERR}::test_a_head_dim_the_cuda_kernels_cannot_serve_is_refused_before_any_weight",),
        expect="DID NOT RAISE",
    ),
]
SHAPE_REFUSED = f"{ARCH_ERR}::test_a_shape_the_cuda_norm_or_routing_kernels_cannot_run_is_refused_by_its_field"
ENTRIES += [
    Mutation(
        id="cuda-backend-takes-any-hidden-size",
        description="the CUDA backend loads a model whose hidden size its RMSNorm kernel cannot read as float4s",
        file="backends/cuda.py",
        old="        if config.hidden_size % 4 or config.hidden_size > max_hidden:",
        new="        if False:",
        gates=(f"{SHAPE_REFUSED}[hidden_size-1030]", f"{SHAPE_REFUSED}[hidden_size-16388]"),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="cuda-backend-takes-any-expert-count",
        description="the CUDA backend loads a MoE model with more experts, or a larger top-k, than its routing "
                    "kernel keeps",
        file="backends/cuda.py",
        old="        if config.is_moe and config.num_experts > MAX_EXPERTS:",
        new="        if False:",
        gates=(f"{SHAPE_REFUSED}[num_experts-513]",),
        expect="DID NOT RAISE",
    ),
]
ENTRIES += [
    Mutation(
        id="cuda-head-dims-lose-64",
        description="the CUDA backend stops serving head dim 64 (Qwen2.5-0.5B's, Llama 3.2 1B's): such a model is "
                    "refused at load",
        file="backends/kernels/fused.py",
        old="HEAD_DIMS = (16, 32, 64, 128, 256)",
        new="HEAD_DIMS = (16, 32, 128, 256)",
        gates=(f"{ARCH_ERR}::test_a_head_dim_the_cuda_kernels_cannot_serve_is_refused_before_any_weight",),
    ),
]
# Damaged JSON beside the weights (found by probing the CLI, session 23): one CheckpointError line each.
DAMAGED = f"{ARCH_ERR}::test_a_damaged_json_file_beside_the_weights_is_one_typed_line"
ENTRIES += [
    Mutation(
        id="checkpoint-json-takes-any-value",
        description="a config, generation or tokenizer config that is a JSON list is taken as the object it is not",
        file="models/loader.py",
        old="    if not isinstance(data, dict):\n        raise CheckpointError(",
        new="    if False:\n        raise CheckpointError(",
        gates=(f"{DAMAGED}[config-a-list]", f"{DAMAGED}[tokenizer-config-a-list]",
               f"{ARCH_ERR}::test_the_cli_answers_a_damaged_checkpoint_with_one_line_and_exit_2"),
    ),
    Mutation(
        id="checkpoint-json-catches-only-json-errors",
        description="a JSON file of bytes that are not UTF-8 escapes as a UnicodeDecodeError",
        file="models/loader.py",
        old="    except ValueError as e:  # bad JSON, bytes that are not UTF-8, an integer of 4,300+ digits",
        new="    except json.JSONDecodeError as e:",
        gates=tuple(f"{DAMAGED}[{c}]" for c in ("config-not-utf8", "generation-not-utf8", "tokenizer-config-not-utf8")),
    ),
    Mutation(
        id="chat-template-file-read-raw",
        description="chat_template.jinja is read without catching bytes that are not UTF-8: a raw UnicodeDecodeError",
        file="models/loader.py", old="        except UnicodeDecodeError as e:\n            raise CheckpointError(f\"{jinja}: not UTF-8",
        new="        except OSError as e:\n            raise CheckpointError(f\"{jinja}: not UTF-8",
        gates=(f"{ARCH_ERR}::test_a_chat_template_file_that_is_not_utf8_is_one_typed_error_naming_it",),
        expect="UnicodeDecodeError",
    ),
    Mutation(
        id="generation-eos-takes-anything",
        description="generation_config.json's eos_token_id may hold strings or objects, which fail deep in the engine",
        file="models/config.py",
        old="    if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab_size for i in ids):",
        new="    if False:",
        gates=(f"{DAMAGED}[eos-a-string]", f"{DAMAGED}[eos-an-object]"),
    ),
    Mutation(
        id="eos-ids-unchecked-against-the-vocab",
        description="an eos_token_id outside the vocabulary loads: 600 (vocab 512) fails the sampler that bans EOS "
                    "until min_tokens (an IndexError that kills the engine), -1 bans the last token",
        file="models/config.py", old=" and 0 <= i < vocab_size for i in ids):", new=" for i in ids):",
        gates=tuple(f"{ARCH_ERR}::test_an_eos_id_outside_the_vocabulary_is_refused_at_load_by_file_and_field[{c}]"
                    for c in ("config-negative", "config-the-vocab-size", "generation-past-the-vocab")),
    ),
    Mutation(
        id="config-reads-a-bare-architecture-string",
        description="architectures given as a string is read letter by letter: the architecture 'Q'",
        file="models/config.py",
        old="        if not isinstance(archs, list) or not isinstance(archs[0], str):",
        new="        if False:",
        gates=(f"{ARCH_ERR}::test_a_config_field_of_the_wrong_shape_is_named[architectures-Qwen3ForCausalLM-not a list"
               f" of class names]",),
    ),
    Mutation(
        id="speculation-inherits-a-penalty-it-refuses",
        description="under speculative decoding the checkpoint's default repetition_penalty is kept: every request "
                    "that sets no penalty is refused for one it never asked for",
        file="vt/engine/front/llm_engine.py",
        old='    if cfg.speculative_model is not None and defaults.get("repetition_penalty", 1.0) != 1.0:\n',
        new="    if False:\n",
        gates=("tests/models/test_checkpoint_errors.py::"
               "test_a_default_penalty_under_speculative_decoding_is_said_and_left_out",),
    ),
    Mutation(
        id="rope-theta-default-is-1e6",
        description="a config.json without rope_theta (Llama 2's) rotates by 1e6, not transformers' 10,000",
        file="models/config.py", old="DEFAULT_ROPE_THETA = 10_000.0\n", new="DEFAULT_ROPE_THETA = 1_000_000.0\n",
        gates=tuple(f"{ARCH}::test_a_config_without_rope_theta_takes_transformers_default[{a}]"
                    for a in ("qwen2", "llama3", "qwen3-moe")),
    ),
    Mutation(
        id="hidden-act-never-read",
        description="config.json's hidden_act is never read: a GELU or ReLU checkpoint loads and runs SiLU",
        file="models/config.py", old="    if act not in ACTIVATIONS:", new="    if False:",
        gates=tuple(f"{ARCH_ERR}::test_an_activation_other_than_silu_is_refused_by_name[{a}]"
                    for a in ("gelu_pytorch_tanh", "relu", "gelu")),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="unsupported-architecture-reported-as-malformed",
        description="an architecture vt does not serve is reported as a malformed config.json",
        file="models/config.py", old="        except CheckpointError:\n            raise  # refused by name already: not "
                                     "a malformed file\n", new="",
        gates=(f"{ARCH_ERR}::test_an_unsupported_architecture_is_refused_by_name_not_as_a_malformed_file",),
    ),
]
