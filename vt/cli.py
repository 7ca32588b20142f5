"""The `vt` command: generate, serve (the OpenAI API), bench serve, ladder, conformance."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

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


def _concurrency(text: str, flag: str = "--concurrency") -> list[int]:
    """A comma-separated list of ints: '1,2,4,8' (run_ladder checks the levels)."""
    from vt.errors import ConfigError

    try:
        conc = [int(c) for c in text.split(",")]
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: expected positive integers separated by commas (1,2,4)") from None
    return conc


def _loaded(build, model: str):
    """Builds the engine, saying so on stderr: loading a real checkpoint takes seconds, not nothing. What
    start-up built (the tokenizer's vocabulary, the model's objects) lives as long as this process: frozen out of
    the collector's reach, a full collection no longer walks it (one took 238 ms of an H200 serving step)."""
    import gc
    import time

    t0 = time.monotonic()
    print(f"vt: loading {model} ...", file=sys.stderr, flush=True)
    engine = build()
    gc.collect()
    gc.freeze()
    print(f"vt: loaded {model} in {time.monotonic() - t0:.1f}s", file=sys.stderr, flush=True)
    return engine


def _engine_kwargs(args: argparse.Namespace) -> dict:
    kw = dict(backend=args.backend, max_model_len=args.max_model_len, num_blocks=args.num_blocks,
              gpu_memory_utilization=args.gpu_memory_utilization, kv_cache_gib=args.kv_cache_gib,
              max_num_seqs=args.max_num_seqs, enforce_eager=args.enforce_eager, seed=args.seed, dtype=args.dtype,
              max_num_batched_tokens=args.max_num_batched_tokens, tensor_parallel_size=args.tensor_parallel_size,
              startup_capture={"auto": None, "on": True, "off": False}[args.startup_capture],
              enable_prefix_caching=args.enable_prefix_caching, chat_template=getattr(args, "chat_template", None),
              async_scheduling=args.async_scheduling, generation_config=args.generation_config,
              override_generation_config=_json_object("--override-generation-config",
                                                      args.override_generation_config))
    if getattr(args, "speculative_model", None):
        kw.update(speculative_model=args.speculative_model, num_speculative_tokens=args.num_speculative_tokens)
    elif getattr(args, "num_speculative_tokens", 0):  # it means nothing without a draft: said, not dropped
        kw.update(num_speculative_tokens=args.num_speculative_tokens)  # by EngineConfig's rule, as the API's
    return kw


def _json_object(flag: str, text: str | None) -> dict | None:
    """A flag's JSON object (vLLM's --override-generation-config '{"temperature": 0}'); anything else one line."""
    import json

    from vt.errors import ConfigError

    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{flag} {text!r}: not JSON ({e})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{flag} {text!r}: expected a JSON object")
    return value


def _engine_flags(args: argparse.Namespace) -> list[str]:
    """The engine flags of args as a command line: what `vt bench serve --model` passes on to the `vt serve` it
    starts (every flag _engine_args defines but the model, so none can be forgotten)."""
    p = argparse.ArgumentParser(add_help=False)
    _engine_args(p, 0, 0, model="optional")
    argv: list[str] = []
    for a in p._actions:
        value, flag = getattr(args, a.dest, None), a.option_strings[0] if a.option_strings else None
        if flag is None or a.dest == "model" or value is None:
            continue
        if isinstance(a, argparse.BooleanOptionalAction):
            argv.append(flag if value else "--no-" + flag[2:])
        elif a.nargs == 0:  # store_true
            argv += [flag] if value else []
        else:
            argv += [flag, str(value)]
    return argv


def _sampling_params(args: argparse.Namespace) -> Any:
    from vt.engine.sample.params import SamplingParams

    return SamplingParams(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, min_p=args.min_p,
                          max_tokens=args.max_tokens, seed=args.seed, stop=args.stop or [],
                          ignore_eos=args.ignore_eos, n=args.n, min_tokens=args.min_tokens,
                          repetition_penalty=args.repetition_penalty)


def _unset_from_the_checkpoint(params: Any, llm: Any) -> Any:
    """The sampling flags left unset take the checkpoint's generation_config defaults, as a request to vt serve
    does (the offline LLM uses given SamplingParams as they are, vLLM's rule: a None there would be neutral)."""
    import dataclasses

    from vt.engine.front.llm import NEUTRAL

    defaults = llm.get_default_sampling_params()
    return dataclasses.replace(params, **{k: getattr(defaults, k) for k in NEUTRAL if getattr(params, k) is None})


def _generate(args: argparse.Namespace) -> int:
    from vt.engine.front.llm import LLM
    from vt.errors import RequestError

    params = _sampling_params(args)  # a bad flag is named before anything loads: an 8B checkpoint loads for a minute
    if args.max_model_len and args.max_model_len > 0 and args.max_tokens > args.max_model_len:  # a bad length is
        # the engine config's to name, not max_tokens' fault
        raise RequestError(f"--max-tokens {args.max_tokens}: more than --max-model-len {args.max_model_len} allows")
    if not args.max_model_len:  # the checkpoint's limit, read before anything is built
        from models.loader import load_checkpoint, resolve_model

        limit = load_checkpoint(resolve_model(args.model)).config.max_position_embeddings
        if args.max_tokens > limit:
            raise RequestError(f"--max-tokens {args.max_tokens}: more than the model's max_position_embeddings "
                               f"({limit}) allows")
    llm = _loaded(lambda: LLM(args.model, **_engine_kwargs(args)), args.model)
    if args.max_tokens > llm.engine.cfg.max_model_len:  # the checkpoint's, capped by the KV cache
        raise RequestError(f"--max-tokens {args.max_tokens}: more than max_model_len {llm.engine.cfg.max_model_len} "
                           f"allows")
    out = llm.generate([args.prompt], _unset_from_the_checkpoint(params, llm), use_tqdm=False)[0]  # one prompt: no bar
    if out.error:
        raise RequestError(out.error)
    for c in out.outputs:
        print(c.text if len(out.outputs) == 1 else f"--- sample {c.index}\n{c.text}")
    return 0


def _cors_policy(args: argparse.Namespace) -> Any:
    """vLLM's CORS flags as the server's policy: JSON lists of strings (a ConfigError line otherwise)."""
    from vt.server.cors import CorsPolicy, json_list

    return CorsPolicy(json_list("--allowed-origins", args.allowed_origins),
                      json_list("--allowed-methods", args.allowed_methods),
                      json_list("--allowed-headers", args.allowed_headers), args.allow_credentials)


def _serve(args: argparse.Namespace) -> int:
    import math

    from vt.errors import ConfigError
    from vt.server.reasoning import check_parser
    from vt.server.serve import listen_socket, make_server, uvicorn_server
    from vt.server.tools import ToolOptions

    cors = _cors_policy(args)  # a bad JSON list is one line, before the port or the model
    tools = ToolOptions(args.enable_auto_tool_choice, args.tool_call_parser, args.exclude_tools_when_tool_choice_none)
    check_parser(args.reasoning_parser)
    if not (math.isfinite(args.shutdown_timeout) and args.shutdown_timeout >= 0):
        raise ConfigError(f"--shutdown-timeout {args.shutdown_timeout}: must be a number of seconds >= 0 (0: the "
                          "requests in flight fail at once on SIGTERM)")
    sock = listen_socket(args.host, args.port)  # a port in use fails here, before the model loads
    from vt.env import flags

    key = args.api_key if args.api_key is not None else flags().api_key
    server, app = _loaded(lambda: make_server(args.model, args.served_model_name, api_key=key,
                                              engine_process=flags().engine_process,
                                              prompt_tokens_details=args.enable_prompt_tokens_details,
                                              cors=cors, tool_options=tools,
                                              reasoning_parser=args.reasoning_parser,
                                              return_tokens_as_token_ids=args.return_tokens_as_token_ids,
                                              **_engine_kwargs(args)),
                          args.model)
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"vt: serving {' / '.join(server.model_names)} on http://{host}:{sock.getsockname()[1]} "
          f"(OpenAI API under /v1; /health, /metrics)", file=sys.stderr, flush=True)
    import signal

    stopped: list[int] = []
    # uvicorn stops on SIGTERM / SIGINT, then re-raises the signal into the handler found before it ran:
    # this one, so a clean stop exits 0 and says so.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stopped.append(signum))

    def on_signal(signum: int, again: bool) -> None:  # vLLM's --shutdown-timeout; a second signal: no more waiting
        server.begin_shutdown(f"the server is shutting down ({signal.Signals(signum).name})", args.shutdown_timeout,
                              now=again)

    uv = uvicorn_server(app, args.host, sock.getsockname()[1], on_signal, args.shutdown_timeout)
    server.llm.on_dead = lambda e: setattr(uv, "should_exit", True)  # a dead engine serves nothing: exit 1
    uv.run(sockets=[sock])
    # uvicorn's force exit (a third signal) skips the lifespan's end: the engine process, if any, is stopped here
    # all the same, or the interpreter's exit would wait on it forever
    server.llm.shutdown()
    if server.llm.dead is not None:
        print(f"vt: stopped: the engine died ({type(server.llm.dead).__name__}: {server.llm.dead}); the requests in "
              f"flight were failed", file=sys.stderr, flush=True)
        return 1
    print(f"vt: stopped{' on ' + signal.Signals(stopped[0]).name if stopped else ''}: connections drained, "
          f"the engine shut down", file=sys.stderr, flush=True)
    return 0


def _bench_serve(args: argparse.Namespace) -> int:
    import asyncio
    import contextlib

    from vt.engine.sample.params import rng_seed
    from vt.errors import ConfigError
    from vt.server import bench
    from vt.server.serve import server_process

    levels = _concurrency(args.max_concurrency, "--max-concurrency")
    if min(levels) < 1:  # a level of 0 requests in flight would never send one
        raise ConfigError(f"--max-concurrency {args.max_concurrency}: every level must be >= 1")
    for name in ("input_len", "output_len", "num_prompts"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} {getattr(args, name)}: must be >= 1")
    if args.base_url is None and args.model is None:
        raise ConfigError("vt bench serve: give --base-url of a running server, or --model to start one")
    if args.base_url is not None:  # a running server: the flags that would have built an engine reach nothing
        given = [f"--{d.replace('_', '-')}" for d, default in args.engine_flag_defaults.items()
                 if d not in BENCH_ENGINE_FLAGS_USED and (getattr(args, d) != default or any(
                     tok == o or tok.startswith(o + "=") for tok in args.given_argv
                     for o in args.engine_flag_options[d]))]  # a value, or the flag named at its default
        if given:
            raise ConfigError(f"--base-url {args.base_url}: the server runs already, so {', '.join(given)} would "
                              f"be ignored (they configure the server --model starts)")
    if not args.request_rate > 0:  # NaN too
        raise ConfigError(f"--request-rate {args.request_rate}: must be > 0 (inf: all at once)")
    if args.base_url is None and args.max_model_len > 0:  # the server --model starts: its length is known now
        _check_lengths(args, args.max_model_len)
    if args.save_result:  # checked before the run: a path found bad at the end lost every level's rows
        folder = os.path.dirname(os.path.abspath(args.save_result))
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            raise ConfigError(f"--save-result {args.save_result}: {folder} is not a folder this user can write")
    with contextlib.ExitStack() as stack:
        url, name = args.base_url, args.served_model_name or args.model
        if url is None:
            print(f"vt: starting a server on {args.model} ...", file=sys.stderr, flush=True)
            url = stack.enter_context(server_process(args.model, _engine_flags(args)))
            print(f"vt: serving on {url}", file=sys.stderr, flush=True)
        served, max_model_len = _served_model(url)  # also: the server answers at all, before any level runs
        if max_model_len is not None:
            _check_lengths(args, max_model_len)
        name = name or served
        rng = __import__("numpy").random.default_rng(rng_seed(args.seed))
        # one request first, not counted (as vLLM's benchmark does): the server's cold start is not a level's
        asyncio.run(bench.run_level(url, name, [rng.integers(3, 500, args.input_len).tolist()], args.output_len, 1,
                                    float("inf")))
        results = []
        say = lambda line: print(f"vt bench: {line}", file=sys.stderr, flush=True)  # noqa: E731
        for c in levels:
            prompts = [rng.integers(3, 500, args.input_len).tolist() for _ in range(args.num_prompts)]
            r = asyncio.run(bench.run_level(url, name, prompts, args.output_len, c, args.request_rate, args.seed,
                                            progress=say))
            print(bench.table(r), flush=True)
            results.append(r)
        print(bench.summary(results), flush=True)
        if args.save_result:
            title = (f"vt bench serve: {name}, {args.input_len} in / {args.output_len} out, {args.num_prompts} "
                     f"prompts a level, request rate {args.request_rate:g}")
            for path in bench.save(results, args.save_result, title):
                print(f"vt: wrote {path}", file=sys.stderr)
    return 0 if all(r.failed == 0 for r in results) else 1


def _served_model(url: str) -> tuple[str, int | None]:
    """The model a running server serves and its max_model_len (vLLM's and vt's /v1/models say it; None where a
    server does not), from its /v1/models; a typed error if nothing answers there."""
    import httpx

    from vt.errors import ConfigError

    try:
        r = httpx.get(url.rstrip("/") + "/v1/models", timeout=30)
        model = r.json()["data"][0]
        length = model.get("max_model_len")
        return str(model["id"]), length if isinstance(length, int) else None
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as e:
        raise ConfigError(f"--base-url {url}: no OpenAI-compatible server answered GET /v1/models "
                          f"({type(e).__name__}: {e})") from None


def _check_lengths(args: argparse.Namespace, max_model_len: int) -> None:
    """Every request's prompt and output fit max_model_len, or the run is refused before it starts: the engine
    cuts an output at max_model_len (the ladder's rungs said ok over shortened outputs) and the server refuses
    such a request (each failed, the run exited 1)."""
    from vt.errors import ConfigError

    total = args.input_len + args.output_len
    if total > max_model_len:
        raise ConfigError(f"--input-len {args.input_len} + --output-len {args.output_len} = {total} tokens: more "
                          f"than max_model_len {max_model_len} holds (lower them, or raise --max-model-len)")


def _ladder(args: argparse.Namespace) -> int:
    from vt.engine.config import EngineConfig
    from vt.engine.front.ladder import run_ladder
    from vt.engine.front.llm_engine import LLMEngine
    from vt.errors import ConfigError

    conc = _concurrency(args.concurrency)
    for name in ("input_len", "output_len", "num_prompts"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} {getattr(args, name)}: must be >= 1")
    if args.max_model_len > 0:
        _check_lengths(args, args.max_model_len)  # before the model loads
    engine = _loaded(lambda: LLMEngine(EngineConfig(model=args.model, **_engine_kwargs(args))), args.model)
    _check_lengths(args, engine.cfg.max_model_len)  # the checkpoint's, capped by what the KV cache holds
    rungs = run_ladder(engine, conc, args.input_len, args.output_len, args.num_prompts, args.seed,
                       show_progress=not args.json)
    if args.json:
        print(json.dumps([r.row() for r in rungs]))
    else:
        print("  ".join(f"{k:>10}" for k in rungs[0].row()))
        for r in rungs:
            print("  ".join(f"{v:>10}" for v in r.row().values()))
    for r in rungs:  # a failed request says why, once per distinct reason
        for reason in dict.fromkeys(r.errors):
            print(f"vt: c={r.c}: {r.errors.count(reason)} request(s) failed: {reason}", file=sys.stderr)
    return 0 if all(r.failed == 0 for r in rungs) else 1


# What vt bench serve reads of the engine flags against a running server: --model names the model to ask for,
# --seed draws the prompts
BENCH_ENGINE_FLAGS_USED = ("model", "seed")


def _engine_args(p: argparse.ArgumentParser, max_model_len: int, num_blocks: int, model: str = "required") -> None:
    """model: "required" (--model), "positional" (vt serve MODEL) or "optional" (vt bench serve). The flags'
    defaults go in args.engine_flag_defaults (vt bench serve refuses any other value beside --base-url)."""
    from models.tiny import SPECS
    from vt.registry import BACKENDS

    first = len(p._actions)

    what = f"a built-in ({', '.join(SPECS)}) or an HF checkpoint directory"
    if model == "positional":
        p.add_argument("model", help=what)
    else:
        p.add_argument("--model", required=model == "required", help=what + (
            "; with no --base-url, a server on it is started" if model == "optional" else ""))
    p.add_argument("--backend", default="auto", help=f"one of {', '.join(BACKENDS)}, or auto: CUDA where CuPy sees a "
                                                     f"GPU, else the CPU")
    p.add_argument("--max-model-len", type=int, default=max_model_len,
                   help="longest prompt + output, in tokens (0: the checkpoint's, capped by the KV cache)")
    p.add_argument("--num-blocks", type=int, default=num_blocks,
                   help="KV cache blocks of 16 tokens (0: sized from memory; see --gpu-memory-utilization)")
    p.add_argument("--gpu-memory-utilization", type=float, default=None,
                   help="CUDA: the share of the GPU the engine may hold (unset: 0.9); the KV cache gets what the "
                        "weights and the largest step leave. The CPU backend refuses it: see --kv-cache-gib")
    p.add_argument("--kv-cache-gib", type=float, help="the KV cache's size in GiB (over the utilization; the CPU's "
                                                      "default: 4, or a quarter of the available memory if less)")
    p.add_argument("--max-num-seqs", type=int, default=16, help="requests in one step at most")
    p.add_argument("--max-num-batched-tokens", type=int, default=0, help="tokens one step computes at most "
                                                                          "(prompts beyond it are chunked); 0: 8192 "
                                                                          "or max-model-len if larger")
    p.add_argument("--enforce-eager", action="store_true", help="no decode graphs (as VT_CUDAGRAPH=0)")
    p.add_argument("--startup-capture", choices=["auto", "on", "off"], default="auto",
                   help="capture every graph at start-up, never on a request's time (auto: on for CUDA)")
    p.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction, default=None,
                   help="launch each decode step while the one before runs (its tokens read on the device): the "
                        "host's update overlaps the GPU (not with speculation or tensor parallelism yet); "
                        "default: on for CUDA where it applies")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True,
                   help="share the KV of full prompt blocks across requests (vLLM's automatic prefix caching)")
    p.add_argument("--generation-config", default="auto", metavar="SOURCE",
                   help="where unset sampling fields come from: auto (the checkpoint's generation_config.json), "
                        "vllm (nowhere: neutral values) or a folder holding a generation_config.json (vLLM's flag)")
    p.add_argument("--override-generation-config", metavar="JSON",
                   help='sampling defaults laid over the source\'s, e.g. \'{"temperature": 0}\' (vLLM\'s flag)')
    p.add_argument("--seed", type=int, default=0, help="engine seed, and the request seed for generate")
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32", "half", "float"],
                   help="what weights and the KV cache are held in (GEMMs accumulate in float32): auto is the "
                        "checkpoint's dtype on CUDA and float32 on the CPU")
    p.add_argument("--speculative-model", help="a draft checkpoint (name or directory), or [ngram] for prompt "
                                               "lookup with no second model")
    p.add_argument("--num-speculative-tokens", type=int, default=0, help="tokens proposed per step")
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1, help="ranks (one process and one device "
                                                                              "each) the model is split over")
    p.set_defaults(engine_flag_defaults={a.dest: a.default for a in p._actions[first:]},
                   engine_flag_options={a.dest: a.option_strings for a in p._actions[first:]})


def build_parser() -> argparse.ArgumentParser:
    from importlib.metadata import PackageNotFoundError, version

    try:
        ver = version("vt")
    except PackageNotFoundError:
        ver = "(not installed)"
    fmt = argparse.ArgumentDefaultsHelpFormatter
    p = argparse.ArgumentParser(prog="vt", description=__doc__, formatter_class=fmt)
    p.add_argument("--version", action="version", version=f"vt {ver}")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("conformance", help="print the capture-rule table as a backend answers it", formatter_class=fmt)
    c.add_argument("--backend", default="cpu", help="cpu or cuda")
    c.set_defaults(fn=_conformance)
    g = sub.add_parser("generate", help="generate from one prompt", formatter_class=fmt)
    _engine_args(g, 0, 0)
    g.add_argument("--prompt", required=True, help="the prompt text")
    g.add_argument("--max-tokens", type=int, default=32, help="tokens to generate at most")
    g.add_argument("--temperature", type=float, default=None, help="0 is greedy; unset: the checkpoint's default")
    g.add_argument("--top-p", type=float, default=None, help="nucleus sampling; unset: the checkpoint's default")
    g.add_argument("--top-k", type=int, default=None, help="0 or -1 disables; unset: the checkpoint's default")
    g.add_argument("--min-p", type=float, default=None, help="unset: the checkpoint's default")
    g.add_argument("--stop", action="append", help="a stop string (repeat for several)")
    g.add_argument("--ignore-eos", action="store_true", help="keep generating past the EOS token")
    g.add_argument("--n", type=int, default=1, help="parallel samples of the prompt (seeds seed, seed+1, ...)")
    g.add_argument("--min-tokens", type=int, default=0, help="no EOS or stop before this many tokens")
    g.add_argument("--repetition-penalty", type=float, default=None,
                   help="> 1 discourages repeats (HF's rule); unset: the checkpoint's default, else 1")
    g.set_defaults(fn=_generate)
    lad = sub.add_parser("ladder", help="run a concurrency ladder like a serving benchmark", formatter_class=fmt)
    _engine_args(lad, 2048, 3744)
    lad.add_argument("--concurrency", default="1,2,4,8", help="requests kept in flight, one rung per level")
    lad.add_argument("--input-len", type=int, default=128, help="prompt tokens per request")
    lad.add_argument("--output-len", type=int, default=64, help="generated tokens per request")
    lad.add_argument("--num-prompts", type=int, default=16, help="requests per rung")
    lad.add_argument("--json", action="store_true", help="one JSON array of rows instead of the table")
    lad.set_defaults(fn=_ladder)
    srv = sub.add_parser("serve", help="serve the OpenAI API (completions, chat, models, health, metrics)",
                         formatter_class=fmt)
    _engine_args(srv, 0, 0, model="positional")
    srv.add_argument("--host", default="127.0.0.1", help="address to listen on")
    srv.add_argument("--port", type=int, default=8000,
                     help="port to listen on (0: a free one, named in the first line)")
    srv.add_argument("--served-model-name", nargs="+", metavar="NAME",
                     help="the model name(s) clients use (vLLM's: a request may name any; responses and the metrics' "
                          "label carry the first); unset: MODEL as given")
    # the server's alone, as vLLM's (a FrontendArgs flag, not EngineArgs): generate and ladder render no chat
    srv.add_argument("--chat-template", help="a Jinja chat template (a file's path, or the template itself) in place "
                                             "of the checkpoint's")
    srv.add_argument("--api-key", help="clients of the /v1 routes must send 'Authorization: Bearer KEY' (unset: "
                                       "$VT_API_KEY, else no key)")
    srv.add_argument("--shutdown-timeout", type=float, default=0.0, metavar="SECONDS",
                     help="on SIGTERM / SIGINT, new requests are refused (503) and those in flight may finish for up "
                          "to SECONDS before they fail with an error frame (vLLM's flag; 0: they fail at once). A "
                          "second signal fails them at once; a third cuts the connections")
    srv.add_argument("--enable-prompt-tokens-details", action="store_true",
                     help="usage carries prompt_tokens_details.cached_tokens: the prompt tokens the prefix cache "
                          "served (vLLM's flag)")
    srv.add_argument("--enable-auto-tool-choice", action="store_true",
                     help='tool_choice "auto" (the default when a request gives tools): the model chooses, and '
                          '--tool-call-parser reads its calls (vLLM\'s flag; named and "required" choices need '
                          'neither)')
    srv.add_argument("--tool-call-parser", metavar="NAME",
                     help="how the model writes a tool call: hermes (Qwen's and Hermes' <tool_call> blocks)")
    srv.add_argument("--reasoning-parser", metavar="NAME",
                     help="qwen3: a chat answer's <think> block is its message's reasoning (and reasoning_content), "
                          "the rest its content (vLLM's flag)")
    srv.add_argument("--return-tokens-as-token-ids", action="store_true",
                     help="logprobs name each token as token_id:ID, not its text (a request's "
                          "return_tokens_as_token_ids overrides; vLLM's flag)")
    srv.add_argument("--exclude-tools-when-tool-choice-none", action="store_true",
                     help='tool_choice "none": the tools are left out of the prompt too (vLLM\'s flag)')
    for what in ("origins", "methods", "headers"):  # vLLM's CORS flags, JSON lists as vLLM takes them
        srv.add_argument(f"--allowed-{what}", default='["*"]', metavar="JSON",
                         help=f"CORS: the {what} browsers may use, a JSON list of strings")
    srv.add_argument("--allow-credentials", action="store_true", help="CORS: allow credentials (vLLM's flag)")
    srv.set_defaults(fn=_serve)
    bench = sub.add_parser("bench", help="benchmarks", formatter_class=fmt)
    bsub = bench.add_subparsers(dest="bench_cmd", required=True, help="what to benchmark")
    bs = bsub.add_parser("serve", help="a serving benchmark against an OpenAI-compatible server (vLLM's shape)",
                         formatter_class=fmt)
    _engine_args(bs, 2048, 2048, model="optional")
    bs.add_argument("--base-url", help="a running server; unset: one is started on --model")
    bs.add_argument("--served-model-name", help="the model name to ask for; unset: --model, or the server's")
    bs.add_argument("--input-len", type=int, default=128, help="prompt tokens per request")
    bs.add_argument("--output-len", type=int, default=128, help="generated tokens per request")
    bs.add_argument("--num-prompts", type=int, default=64, help="requests per concurrency level")
    bs.add_argument("--max-concurrency", default="1,8", help="requests in flight at most, one run per level")
    bs.add_argument("--request-rate", type=float, default=float("inf"), help="arrivals per second (Poisson); inf: "
                                                                            "all at once")
    bs.add_argument("--save-result", help="write the rows as JSON here, and a PNG plot beside it")
    bs.set_defaults(fn=_bench_serve)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    import logging

    args = build_parser().parse_args(argv)
    args.given_argv = list(sys.argv[1:] if argv is None else argv)  # what was typed, beside the parsed values
    logging.basicConfig(format="vt: %(message)s", level=logging.INFO, stream=sys.stderr, force=True)  # capture
    try:
        return int(args.fn(args) or 0)
    except VtError as e:
        print(f"vt: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
