"""The GPU never waits for the host (issue 28): async scheduling. Step N+1 (decode or mixed) is launched before step
N's results are applied; its decode rows' input tokens are read on the device by request slot, from a decode step's
sampler or a prefill's; step N's ids are copied out on the compute stream, so step N+1's sampler cannot overwrite
them first. The gates: outputs equal the synchronous engine's, under the stream simulator's schedules too."""

from __future__ import annotations

from mutations.model import Mutation

ASYNC = "tests/engine/test_async_scheduling.py"
RACES = tuple(f"{ASYNC}::test_async_scheduling_is_race_free_under_every_schedule[{p}]"
              for p in ("in order", "side streams late", "seeded 5"))
REUSED = f"{ASYNC}::test_an_id_reused_while_its_aborted_request_is_in_flight_gets_none_of_its_tokens"
EQUAL = (f"{ASYNC}::test_async_outputs_equal_the_synchronous_engines",
         f"{ASYNC}::test_n_samples_and_preemption_under_async_scheduling",
         f"{ASYNC}::test_an_abort_while_a_step_is_in_flight_drops_its_token_and_frees_its_blocks", REUSED)
MIXED = (f"{ASYNC}::test_mixed_steps_overlap_their_decode_rows_reading_tokens_on_the_device",
         *(f"{ASYNC}::test_overlapped_mixed_steps_are_race_free_under_every_schedule[{p}]"
           for p in ("in order", "side streams late", "seeded 5")))

ENTRIES: list[Mutation] = [
    Mutation(
        id="async-step-reads-a-token-not-sampled-yet",
        description="the decode step stores its rows' ids before its sampler runs (and again after), and its "
                    "input tokens after that: a step reads ids its own slot held from an earlier replay, not the "
                    "ones the step before sampled",
        file="vt/engine/worker/graph_driver.py",
        old="        self.backend.feed_tokens(slot.tokens, slot.feed_src, self.last_sampled)\n",
        new="        self.backend.keep_sampled(slot.out_ids, slot.keep_dst, self.last_sampled)\n"
            "        self.backend.feed_tokens(slot.tokens, slot.feed_src, self.last_sampled)\n",
        gates=(*EQUAL, *RACES, *MIXED),
    ),
    Mutation(
        id="async-feed-keyed-by-a-moving-row",
        description="a step's input token is read from the slot of its batch row, not of its request: once rows "
                    "condense, a request reads another's token",
        file="vt/engine/worker/runner.py",
        old="            feed_src=np.where(unsent, b.feed_slot[rows], -1),",
        new="            feed_src=np.where(unsent, rows, -1),",
        gates=(*EQUAL, *RACES, *MIXED),
    ),
    Mutation(
        id="async-read-back-races-the-next-sampler",
        description="with async scheduling the sampled ids are still copied out on a side stream: the next step's "
                    "sampler, launched before the host waits for that copy, overwrites them with no wait between",
        file="vt/engine/worker/runner.py", old="async_readback=bool(cfg.async_scheduling))", new="async_readback=False)",
        gates=(*RACES, *MIXED[1:]),
    ),
    Mutation(
        id="uploads-overwrite-a-buffer-a-copy-still-reads",
        description="a step's inputs are written into a pinned buffer whose copy to the device is still queued",
        file="vt/engine/worker/uploads.py",
        old="        while self.busy and self.backend.query_event(self.busy[0][0]):",
        new="        while self.busy:",
        gates=("tests/engine/test_uploads.py::test_a_pinned_buffer_is_written_again_only_after_its_copy_ran",),
    ),
]

ENTRIES += [
    Mutation(
        id="mixed-step-decode-rows-not-fed",
        description="a mixed step's decode rows take the host's placeholder for a token the step before sampled, not "
                    "the sampled id from their request slot",
        file="vt/engine/worker/runner.py",
        old="        feed = np.where(b.ahead[decoding] > 0, b.feed_slot[decoding], -1)\n",
        new="        feed = np.full(len(decoding), -1)\n",
        gates=(*MIXED, EQUAL[0], *RACES),
    ),
    Mutation(
        id="mixed-feed-keyed-by-a-moving-row",
        description="a mixed step's decode row reads the slot of its batch row, not of its request",
        file="vt/engine/worker/runner.py",
        old="        feed = np.where(b.ahead[decoding] > 0, b.feed_slot[decoding], -1)\n",
        new="        feed = np.where(b.ahead[decoding] > 0, decoding, -1)\n",
        gates=(*MIXED, EQUAL[0], *RACES),
    ),
    Mutation(
        id="prefill-ids-not-kept-for-the-next-step",
        description="the ids a prefill samples for the prompts it ends are not stored at their request slots: the "
                    "next step's decode rows read whatever the slot held",
        file="vt/engine/worker/runner.py",
        old="        keep[: len(ends)] = b.feed_slot[ending]",
        new="        keep[: len(ends)] = -1",
        gates=(*MIXED, *EQUAL, *RACES),
    ),
    Mutation(
        id="reused-id-takes-an-aborted-requests-token",
        description="a step's token for a request that left while it ran is dropped only when no request has taken "
                    "its id since: a new request under that id receives the old one's token",
        file="vt/engine/front/llm_engine.py",
        old="            if left and rid in left:  # it finished while this step ran",
        new="            if left and rid in left and rid not in requests:  # it finished while this step ran",
        gates=(REUSED,),
    ),
    Mutation(
        id="async-scheduling-off-by-default-on-cuda",
        description="unset, async scheduling stays off on CUDA: the GPU idles while the host updates each step",
        file="vt/engine/config.py",
        old="            self.async_scheduling = (self.backend == \"cuda\" and self.speculative_model is None",
        new="            self.async_scheduling = (self.backend == \"none\" and self.speculative_model is None",
        gates=(f"{ASYNC}::test_async_scheduling_is_on_by_default_where_the_gpu_has_something_to_overlap[cuda]",),
    ),
]
