"""The GEMM tuner's plan cache (backends/gemm_plans.py): picks reused only among the candidates they were timed
among, merged across writers, a damaged file said, the file named by everything that could change a ranking."""

from __future__ import annotations

from mutations.model import Mutation

UNIT = "tests/backends/test_gemm_plans.py"
CACHE = "backends/gemm_plans.py"
ENTRIES: list[Mutation] = [
    Mutation(
        id="plan-cache-takes-a-pick-among-other-candidates",
        description="a stored pick is taken wherever its candidate is offered, though the shape's candidates changed: "
                    "a ranking timed among other algorithms is trusted",
        file=CACHE,
        old='        if entry is None or entry["candidates"] != candidates:\n',
        new='        if entry is None or entry["pick"] not in candidates:\n',
        gates=(f"{UNIT}::test_a_shape_whose_candidates_changed_is_timed_again",),
        expect="the stored ranking was not taken",
    ),
    Mutation(
        id="plan-cache-save-drops-other-writers-picks",
        description="a process writes only its own picks over the file: a tensor-parallel rank's picks are lost",
        file=CACHE,
        old="            merged = {**self._read(quiet=True), **self.new}",
        new="            merged = dict(self.new)",
        gates=(f"{UNIT}::test_two_processes_writing_one_file_keep_both_picks",),
    ),
    Mutation(
        id="plan-cache-tag-ignores-the-sources",
        description="the plan file's name leaves the kernels' sources out: a changed skinny kernel keeps the picks "
                    "its predecessor earned",
        file=CACHE,
        old="        h.update(src.read_bytes())\n",
        new="        pass\n",
        gates=(f"{UNIT}::test_the_machine_tag_changes_with_any_part_or_source_and_only_then",),
        expect="a kernel's source changed",
    ),
    Mutation(
        id="plan-cache-ignores-a-damaged-file-silently",
        description="a plan file that cannot be parsed is ignored without a word: the user's start-up times every "
                    "shape again and nothing says why",
        file=CACHE,
        old='                log.warning("GEMM plan cache %s unreadable (%s): every shape is timed again", self.path, e)\n',
        new="                pass\n",
        gates=(f"{UNIT}::test_an_unreadable_file_is_said_once_timed_again_and_replaced",),
    ),
    Mutation(
        id="cuda-plan-cache-hit-still-times",
        description="a shape whose pick the cache holds is timed again anyway: start-up pays the tuning and a "
                    "restart may run another plan",
        file="backends/cublaslt.py",
        old="        if cached is not None:  # an earlier process's pick among these very candidates: run once, untimed\n",
        new="        if False:\n",
        gates=(f"{UNIT}::test_cuda_a_second_backend_takes_the_first_ones_picks_untimed",),
        needs_gpu=True,
    ),
]
