"""Row moves keep every per-row field with its request: random add/finish/condense/swap/reorder
sequences against a plain dict keyed by request id."""

from __future__ import annotations

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from vt.engine.input_batch import InputBatch
from vt.engine.request import Request
from vt.engine.sampling import SamplingParams

ROWS, MAX_LEN, MAX_BLOCKS, TRASH = 6, 64, 4, 99


def _req(i: int, rng: np.random.Generator) -> Request:
    n = int(rng.integers(1, 20))
    sp = SamplingParams(temperature=float(i % 3) / 2, top_p=1.0 - (i % 4) / 10, top_k=i % 5, max_tokens=8)
    r = Request(f"r{i}", rng.integers(0, 500, n).tolist(), sp.resolve({}))
    r.block_ids = rng.choice(50, size=int(rng.integers(1, MAX_BLOCKS + 1)), replace=False).tolist()
    return r


class BatchMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.batch = InputBatch(ROWS, MAX_LEN, MAX_BLOCKS, TRASH)
        self.model: dict[str, dict] = {}
        self.next_id = 0
        self.rng = np.random.default_rng(0)

    def _expect(self, r: Request) -> dict:
        return {"ids": list(r.all_ids), "prompt": len(r.prompt_ids), "blocks": list(r.block_ids),
                "params": (r.params.temperature, r.params.top_p, r.params.top_k, r.params.min_p), "req": r}

    @precondition(lambda self: len(self.model) < ROWS)
    @rule()
    def add(self) -> None:
        r = _req(self.next_id, self.rng)
        self.next_id += 1
        self.batch.add(r)
        self.model[r.id] = self._expect(r)

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
            self.batch.append_token(rid, tok)
            self.model[rid]["ids"].append(tok)

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
        is_decode = lambda r: int(r.id[1:]) % 2 == 0  # noqa: E731
        self.batch.reorder_decode_first(is_decode)
        kinds = [is_decode(self.batch.requests[i]) for i in self.batch.rows()]
        assert kinds == sorted(kinds, reverse=True), "decode rows first"

    @invariant()
    def every_field_is_with_its_request(self) -> None:
        b = self.batch
        assert set(b.row_of) == set(self.model)
        for rid, want in self.model.items():
            row = b.row_of[rid]
            assert b.requests[row] is want["req"]
            n = int(b.num_tokens[row])
            assert b.token_ids[row, :n].tolist() == want["ids"], f"{rid}: tokens moved without their row"
            assert int(b.num_prompt[row]) == want["prompt"]
            nb = int(b.num_blocks[row])
            assert b.block_table[row, :nb].tolist() == want["blocks"], f"{rid}: block table moved apart"
            assert (b.block_table[row, nb:] == TRASH).all(), "unused block-table entries name the trash block"
            got = (b.temperature[row], b.top_p[row], b.top_k[row], b.min_p[row])
            assert tuple(float(x) for x in got) == tuple(float(x) for x in want["params"])
        for row in range(b.max_rows):
            if b.requests[row] is None:
                assert (b.block_table[row] == TRASH).all(), f"hole row {row} keeps a stale block table"


BatchMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)
TestInputBatchMachine = BatchMachine.TestCase
