"""The `vt` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _conformance(args: argparse.Namespace) -> int:
    from vt.conformance import table
    from vt.registry import backend_class

    cls = backend_class(args.backend)
    rows = table(lambda: cls())
    w = max(len(r) for r, _, _ in rows)
    print(f"capture-rule table, backend={args.backend}")
    print(f"{'operation inside capture':<{w}}  {'mode':<12}  {'call':<44}  end_capture")
    for row, mode, ans in rows:
        replay = {None: "", True: ", replay bit-exact", False: ", REPLAY DIFFERS"}[ans.replay_ok]
        call = ans.call + replay
        print(f"{row:<{w}}  {mode:<12}  {call:<44}  {ans.end}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vt", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("conformance", help="print the capture-rule table as a backend answers it")
    c.add_argument("--backend", default="cpu")
    c.set_defaults(fn=_conformance)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.fn(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
