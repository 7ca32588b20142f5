"""Sampling (vLLM v1's sample/): SamplingParams and their resolution (params.py), the batched device sampler
with its NumPy reference (sampler.py; the CUDA kernel is backends/kernels/sampler.cu), and speculative
verification as one pure rejection rule (rejection.py)."""
