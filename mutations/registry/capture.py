"""GraphCaptureScope (vt/capture.py): a failure inside is marked, not raised; a second scope is refused."""

from __future__ import annotations

from mutations.model import Mutation
from mutations.registry.gates import SCOPE

ENTRIES: list[Mutation] = [
    Mutation(
        id="scope-raises-from-exit",
        description="GraphCaptureScope's exit re-raises the failure instead of marking it",
        file="vt/capture.py",
        old="        return ev is None or isinstance(ev, Exception)", new="        return ev is None",
        gates=(f"{SCOPE}::test_failure_inside_is_marked_kept_and_exit_does_not_raise",),
    ),
    Mutation(
        id="scope-allows-nesting",
        description="GraphCaptureScope no longer refuses a second open scope on the thread",
        file="vt/capture.py", old="        if getattr(_open_scopes, \"scope\", None) is not None:",
        new="        if False:",
        gates=(f"{SCOPE}::test_second_scope_on_the_same_thread_is_refused",),
    ),
]
