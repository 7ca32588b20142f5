"""Models behind the Model protocol (base.py: ForwardBatch, the paged KV cache, prefill over `forward`): one
decoder family for Qwen3 dense and MoE, Qwen2 and Llama (decoder.py), its xp kernels (kernels.py; the fused
ones are the kernel library's, backends/kernels/), rotary tables (rope.py), config parsing (config.py), the
HF loader and safetensors reader (loader.py, safetensors_io.py), tensor-parallel shards (shard.py), the
built-in tiny checkpoints (tiny.py) and the registry by HF architecture name (registry.py). The graph driver
that runs every model lives in the engine (vt/engine/worker/graph_driver.py)."""
