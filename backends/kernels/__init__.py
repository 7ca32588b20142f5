"""The kernel library: every CUDA kernel vt runs, one `.cu` file per family, each beside its NumPy twin.

    common.cuh          storage types (bf16 / fp16 as bits), exact conversions, vector loads, reductions
    build.py            compile options in one place, NVRTC through CuPy's RawModule, the CI nvcc check
    launch.py           a captured kernel's programmatic launch (cuLaunchKernelEx), for kernels that wait first
    fused.py            FusedKernel: one semantics, a NumPy twin and a CUDA body, picked by the backend
    convert.cu/.py      float32 <-> bf16 / fp16 storage conversions
    norm.cu/.py         embedding gather, residual add + RMSNorm (the GEMM operand narrowed as it is written)
    rotary.cu/.py       q/k RMSNorm + rotary + the KV-cache write, straight from the qkv projection
    activation.cu/.py   SiLU(gate) x up
    decode_attention.cu/.py   paged decode attention over the block table, split along the context
    prefill_attention.cu/.py  varlen causal prefill attention over the block table, on tensor cores
    moe.cu/.py          routed MoE: top-k routing, rows grouped by expert, grouped GEMMs, the weighted combine
    skinny_gemm.cu/.py  decode GEMMs (at most 8 rows): split-K, streaming the weights; timed against cuBLASLt
    sampler.cu/.py      the batched sampler (its twin is vt/engine/sample/sampler.py's reference)
    tokens.cu/.py       async scheduling's token moves: a step's inputs fed from the ids the step before sampled,
                        each row's sampled id kept at its request's slot
    library.py          the op table a backend launches the models' named operations from

A twin is the reference its kernel is tested against (the GPU lane, on random inputs at the edges) and what
the CPU backend runs; a fused kernel writes only the outputs its caller preallocated, so the twin is charged
nothing on the CPU, as the kernel allocates nothing on the GPU. Models reach these through the Backend's
named operations (vt/ops.py), never through CuPy.
"""
