"""What a mutation is, and what running one concluded."""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import asdict, dataclass, field


class Kind(enum.Enum):
    SOURCE = "source"  # breaks production code: a gate must notice
    TEST_SETUP = "test-setup"  # breaks a test's own setup: proves a guard in the test is load-bearing


class Verdict(enum.Enum):
    KILLED = "Killed"  # every named gate failed on its own assertion (with the expected text, if one is given)
    CRASHED = "Crashed"  # every named gate failed, but one on an exception that escaped it: no assertion went red
    SURVIVED = "Survived"  # a named gate stayed green, or failed for another reason than expected
    OVERREACH = "Overreach"  # the gates failed, and so did tests the entry does not name
    NOT_APPLIED = "NotApplied"  # the anchor matched a different number of places than declared
    TIMEOUT = "Timeout"  # ran past k x the baseline
    ERROR = "Error"  # collection errors, usage errors, no tests


# Tests about the registry itself, not about behaviour: an edited anchor line turns them red whatever the
# edit does, so they are never a gate and never count against a verdict (kill counts measure behaviour).
META_TESTS = ("tests/mutations/test_reports.py::test_registry_entries_are_well_formed",)


@dataclass(frozen=True, slots=True)
class Mutation:
    id: str
    description: str
    file: str
    old: str
    new: str
    gates: tuple[str, ...]
    count: int = 1  # how many places `old` must match
    expect: str | None = None  # text the gate's failure must contain
    kind: Kind = Kind.SOURCE
    env: tuple[tuple[str, str], ...] = ()  # extra environment, e.g. (("VT_POOL_BYPASS", "1"),)
    # Some gates are skipped unmutated (a lane where their guarantee does not apply) and the mutation
    # makes them run: the baseline must show them skipped (or passing), never failing.
    baseline_skipped: bool = False
    needs_gpu: bool = False  # runs on the GPU lane only (scripts/gpu-lane); the CPU lane lists it as such

    def __post_init__(self) -> None:
        if not self.gates:
            raise ValueError(f"mutation {self.id}: names no gate")
        if self.old == self.new:
            raise ValueError(f"mutation {self.id}: old == new")
        if any(g.split("[")[0] in META_TESTS for g in self.gates):
            raise ValueError(f"mutation {self.id}: a registry self-check is no gate of behaviour")
        if self.count < 1:
            raise ValueError(f"mutation {self.id}: count must be >= 1")

    @property
    def gate_files(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(g.split("::")[0] for g in self.gates))

    def fingerprint(self) -> str:
        d = asdict(self)
        d["kind"] = self.kind.value
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


@dataclass(slots=True)
class Result:
    mutation: Mutation
    verdict: Verdict
    seconds: float = 0.0
    reason: str = ""  # the failing assertion, or why it is not Killed
    failed_gates: list[str] = field(default_factory=list)
    failed_others: list[str] = field(default_factory=list)
    diff: str = ""
    is_cached: bool = False
    rerun_because: str = ""  # the pytest internal error that ended its first gate run, where one did

    def to_json(self) -> dict:
        return {"id": self.mutation.id, "verdict": self.verdict.value, "seconds": self.seconds,
                "reason": self.reason, "failed_gates": self.failed_gates,
                "failed_others": self.failed_others, "diff": self.diff, "rerun_because": self.rerun_because}
