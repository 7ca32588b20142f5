"""Launch the split sampler (B=1; temperature, greedy, or the params named) six times, eagerly, for ncu's kernel
times by name. Session 49, run 1."""

import sys

sys.path.insert(0, ".")

from benchmarks.test_sampler_bench import GPU_PARAMS, DeviceRows  # noqa: E402
from vt.engine.sample.sampler import sample_tokens  # noqa: E402
from vt.engine.worker.graph_driver import split_scratch  # noqa: E402

for params in sys.argv[1:] or ["temperature", "greedy"]:
    rows = DeviceRows("cuda", 1, GPU_PARAMS[params])
    scratch = split_scratch(rows.backend, 1)
    for _ in range(6):
        rows.backend.launch(sample_tokens, *rows.t, *scratch, general=False)
    print(params, rows.backend.copy_d2h(rows.t[8]))
