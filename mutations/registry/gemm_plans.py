"""The GEMM tuner's plan cache (backends/gemm_plans.py): picks reused only among the candidates they were timed
among, merged across writers under a lock, a damaged file said, retime honoured, the file named by what could change
a ranking and nothing else; on the GPU, a stored pick taken untimed and loaded before any capture."""

from __future__ import annotations

from mutations.model import Mutation

UNIT = "tests/backends/test_gemm_plans.py"
CACHE = "backends/gemm_plans.py"
TUNER = "backends/cublaslt.py"
GPU_GATE = f"{UNIT}::test_cuda_a_second_process_takes_the_first_ones_picks_untimed_and_captures_them"
ENTRIES: list[Mutation] = [
    Mutation(
        id="plan-cache-keys-a-shape-without-its-candidates",
        description="a shape's pick is stored under the shape alone: a ranking timed among other candidates is "
                    "trusted, and an A/B's two candidate sets overwrite each other",
        file=CACHE,
        old='    return f"{key}:{hashlib.sha256(chr(0).join(candidates).encode()).hexdigest()[:16]}"\n',
        new="    return key\n",
        gates=(f"{UNIT}::test_a_shape_whose_candidates_changed_is_timed_again",
               f"{UNIT}::test_one_shapes_picks_among_two_candidate_sets_are_both_kept"),
    ),
    Mutation(
        id="plan-cache-save-drops-other-writers-picks",
        description="a process writes only its own picks over the file: a tensor-parallel rank's picks are lost",
        file=CACHE,
        old="                merged = {**self._read(quiet=True), **self.new}",
        new="                merged = dict(self.new)",
        gates=(f"{UNIT}::test_two_processes_writing_one_file_keep_both_picks",),
    ),
    Mutation(
        id="plan-cache-save-ignores-the-lock",
        description="a save reads, merges and renames without the file's lock: two ranks ending start-up together "
                    "can each drop the other's picks",
        file=CACHE,
        old="            fcntl.flock(lock, fcntl.LOCK_EX)\n",
        new="            pass\n",
        gates=(f"{UNIT}::test_a_save_waits_for_another_writers_lock",),
        expect="the save went ahead while another writer held the lock",
    ),
    Mutation(
        id="plan-cache-retime-takes-stored-picks",
        description="VT_GEMM_PLAN_CACHE=retime still takes the stored picks: a noisy pick can never be replaced",
        file=CACHE,
        old="        entry = None if self.retime else self.plans.get(entry_key(key, candidates))\n",
        new="        entry = self.plans.get(entry_key(key, candidates))\n",
        gates=(f"{UNIT}::test_retime_takes_nothing_stored_and_overwrites_it",),
        expect="retime times a stored shape again",
    ),
    Mutation(
        id="plan-cache-tag-ignores-the-sources",
        description="the plan file's name leaves the sources out: a changed kernel keeps the picks its predecessor "
                    "earned",
        file=CACHE,
        old="        h.update(text.encode())\n",
        new="        pass\n",
        gates=(f"{UNIT}::test_the_machine_tag_changes_with_any_part_or_source_and_only_then",),
        expect="a source changed",
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
        id="ranking-sources-take-the-raw-kernel-files",
        description="the plan file is named by each GEMM kernel's own file, not with its headers inlined: an edit "
                    "to common.cuh keeps the old picks",
        file=TUNER,
        old="[(f, build.source(f)) for f in kernels]",
        new="[(f, (build.KERNEL_DIR / f).read_text()) for f in kernels]",
        gates=(f"{UNIT}::test_the_ranking_sources_are_the_gemm_kernels_headers_included_and_no_other_kernel",),
        expect="a header the skinny GEMM includes changed",
    ),
    Mutation(
        id="ranking-sources-take-every-kernel",
        description="the plan file is named by every kernel of the library: an edit to the decode attention times "
                    "every GEMM again, and an A/B of it compares two tunings",
        file=TUNER,
        old="    kernels = sorted({i.file for m in (skinny_gemm, skinny_mma, norm, activation) for i in m.CI_INSTANCES})\n",
        new="    kernels = sorted(p.name for p in build.KERNEL_DIR.glob(\"*.cu\"))\n",
        gates=(f"{UNIT}::test_the_ranking_sources_are_the_gemm_kernels_headers_included_and_no_other_kernel",),
    ),
    Mutation(
        id="cuda-plan-cache-hit-still-times",
        description="a shape whose pick the cache holds is timed again anyway: start-up pays the tuning and a "
                    "restart may run another plan",
        file=TUNER,
        old="        if stored is not None:  # an earlier process's pick among these very candidates, taken untimed\n",
        new="        if False:\n",
        gates=(GPU_GATE,),
        needs_gpu=True,
    ),
]
