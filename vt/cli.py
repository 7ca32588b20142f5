"""The `vt` command: conformance, generate, ladder."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from vt.errors import VtError


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


def _engine_kwargs(args: argparse.Namespace) -> dict:
    kw = dict(backend=args.backend, max_model_len=args.max_model_len, num_blocks=args.num_blocks,
              max_num_seqs=args.max_num_seqs, enforce_eager=args.enforce_eager, seed=args.seed, dtype=args.dtype)
    if getattr(args, "speculative_model", None):
        kw.update(speculative_model=args.speculative_model, num_speculative_tokens=args.num_speculative_tokens)
    return kw


def _generate(args: argparse.Namespace) -> int:
    from vt.engine.llm import LLM
    from vt.engine.sampling import SamplingParams

    llm = LLM(args.model, **_engine_kwargs(args))
    params = SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens, seed=args.seed)
    out = llm.generate([args.prompt], params)[0]
    if out.error:
        print(f"vt: request failed: {out.error}", file=sys.stderr)
        return 1
    print(out.text)
    return 0


def _ladder(args: argparse.Namespace) -> int:
    from vt.engine.config import EngineConfig
    from vt.engine.ladder import run_ladder
    from vt.engine.llm import LLMEngine

    conc = [int(c) for c in args.concurrency.split(",")]
    engine = LLMEngine(EngineConfig(model=args.model, **_engine_kwargs(args)))
    rungs = run_ladder(engine, conc, args.input_len, args.output_len, args.num_prompts, args.seed,
                       show_progress=not args.json)
    if args.json:
        print(json.dumps([r.row() for r in rungs]))
        return 0
    keys = list(rungs[0].row())
    print("  ".join(f"{k:>10}" for k in keys))
    for r in rungs:
        print("  ".join(f"{v:>10}" for v in r.row().values()))
    return 0 if all(r.failed == 0 for r in rungs) else 1


def _engine_args(p: argparse.ArgumentParser, max_model_len: int, num_blocks: int) -> None:
    p.add_argument("--model", required=True)
    p.add_argument("--backend", default="cpu")
    p.add_argument("--max-model-len", type=int, default=max_model_len)
    p.add_argument("--num-blocks", type=int, default=num_blocks)
    p.add_argument("--max-num-seqs", type=int, default=16)
    p.add_argument("--enforce-eager", action="store_true", help="no decode graphs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"],
                   help="weights' dtype: auto is the checkpoint's on CUDA; the CPU computes in float32 "
                        "(bfloat16/float16 round the weights through that dtype) (default: auto)")
    p.add_argument("--speculative-model", help="a draft checkpoint (name or directory), or [ngram] for prompt "
                                               "lookup with no second model")
    p.add_argument("--num-speculative-tokens", type=int, default=0, help="tokens proposed per step")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vt", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("conformance", help="print the capture-rule table as a backend answers it")
    c.add_argument("--backend", default="cpu")
    c.set_defaults(fn=_conformance)
    g = sub.add_parser("generate", help="generate from one prompt")
    _engine_args(g, 2048, 512)
    g.add_argument("--prompt", required=True)
    g.add_argument("--max-tokens", type=int, default=32)
    g.add_argument("--temperature", type=float, default=None)
    g.set_defaults(fn=_generate)
    lad = sub.add_parser("ladder", help="run a concurrency ladder like a serving benchmark")
    _engine_args(lad, 2048, 3744)
    lad.add_argument("--concurrency", default="1,2,4,8")
    lad.add_argument("--input-len", type=int, default=128)
    lad.add_argument("--output-len", type=int, default=64)
    lad.add_argument("--num-prompts", type=int, default=16)
    lad.add_argument("--json", action="store_true")
    lad.set_defaults(fn=_ladder)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except VtError as e:
        print(f"vt: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
