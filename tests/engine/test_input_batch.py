"""Row moves keep every per-row field with its request: random add/finish/append/condense/swap/reorder
sequences against a plain dict keyed by request id, with two KV groups (target and draft tables)."""

from __future__ import annotations

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from vt.engine.worker.input_batch import InputBatch

ROWS, MAX_LEN, MAX_BLOCKS, TRASH, GROUPS = 6, 64, 4, 99, 2


class BatchMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.batch = InputBatch(ROWS, MAX_LEN, MAX_BLOCKS, TRASH, num_groups=GROUPS)
        self.model: dict[str, dict] = {}
        self.next_id = 0
        self.rng = np.random.default_rng(0)

    @precondition(lambda self: len(self.model) < ROWS)
    @rule()
    def add(self) -> None:
        rid = f"r{self.next_id}"
        self.next_id += 1
        ids = self.rng.integers(0, 500, int(self.rng.integers(1, 20))).tolist()
        blocks = [self.rng.choice(50, size=int(self.rng.integers(0, MAX_BLOCKS)), replace=False).tolist()
                  for _ in range(GROUPS)]
        self.batch.add(rid, ids, blocks)
        self.model[rid] = {"ids": list(ids), "blocks": [list(b) for b in blocks]}

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def finish(self, data) -> None:
        rid = data.draw(st.sampled_from(sorted(self.model)))
        self.batch.remove(rid)
        del self.model[rid]

    @precondition(lambda self: self.model)
    @rule(data=st.data(), tok=st.integers(0, 499))
    def append_token(self, data, tok: int) -> None:
        rid = data.draw(st.sampled_from(sorted(self.model)))
        if len(self.model[rid]["ids"]) < MAX_LEN:
            self.batch.append_tokens(rid, [tok])
            self.model[rid]["ids"].append(tok)

    @precondition(lambda self: self.model)
    @rule(data=st.data(), group=st.integers(0, GROUPS - 1), block=st.integers(50, 98))
    def append_block(self, data, group: int, block: int) -> None:
        rid = data.draw(st.sampled_from(sorted(self.model)))
        if len(self.model[rid]["blocks"][group]) < MAX_BLOCKS:
            self.batch.append_blocks(rid, group, [block])
            self.model[rid]["blocks"][group].append(block)

    @rule()
    def condense(self) -> None:
        self.batch.condense()
        assert self.batch.num_rows == len(self.model), "condense leaves no holes below the top row"

    @precondition(lambda self: self.batch.num_rows >= 2)
    @rule(data=st.data())
    def swap(self, data) -> None:
        i = data.draw(st.integers(0, self.batch.num_rows - 1))
        j = data.draw(st.integers(0, self.batch.num_rows - 1))
        self.batch.swap_states(i, j)

    @rule()
    def reorder_decode_first(self) -> None:
        is_decode = lambda rid: int(rid[1:]) % 2 == 0  # noqa: E731
        self.batch.reorder_decode_first(is_decode)
        kinds = [is_decode(self.batch.requests[i]) for i in self.batch.rows()]
        assert kinds == sorted(kinds, reverse=True), "decode rows first"

    @invariant()
    def every_field_is_with_its_request(self) -> None:
        b = self.batch
        assert set(b.row_of) == set(self.model)
        for rid, want in self.model.items():
            row = b.row_of[rid]
            assert b.requests[row] == rid
            assert b.tokens(rid).tolist() == want["ids"], f"{rid}: tokens moved without their row"
            for g in range(GROUPS):
                nb = int(b.num_blocks[row, g])
                assert b.block_table[row, g, :nb].tolist() == want["blocks"][g], f"{rid}: block table moved apart"
                assert (b.block_table[row, g, nb:] == TRASH).all(), "unused block-table entries name the trash block"
        for row in range(b.max_rows):
            if b.requests[row] is None:
                assert (b.block_table[row] == TRASH).all(), f"hole row {row} keeps a stale block table"


BatchMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=40, deadline=None,
                                           derandomize=True)  # the same runs every time: a stable gate
TestInputBatchMachine = BatchMachine.TestCase
