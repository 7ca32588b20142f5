"""Backends, found through vt.registry (name -> import path, imported lazily): the NumPy backend with its
capture simulation (cpu.py), its model of CuPy's allocations (cupy_model.py) and stream-order simulator
(streams.py); the CuPy backend (cuda.py) with its capture-safe cuBLAS (cublas.py, gemm.py) and graph census
(cugraph.py); and the kernel library both launch (kernels/)."""
