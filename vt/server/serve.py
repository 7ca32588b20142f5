"""Starting the server: `vt serve` runs uvicorn in the foreground (SIGTERM drains the connections, then fails what is
left); `running_server` runs one in a thread on a free port (tests); `server_process` runs `vt serve` as a child
process (`vt bench serve --model`: a benchmark's client must not share the server's interpreter, whose one GIL would
then parse every client stream between engine steps). Both listen on a socket bound here, before uvicorn runs: the
port is known at once (port 0 is one the OS picks as it binds, which no other process can take first, as it can a
port probed free and bound later), and a port in use is a typed error before any model loads."""

from __future__ import annotations

import contextlib
import math
import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from vt.engine.config import EngineConfig
from vt.errors import ConfigError, ServerStartError
from vt.server.app import MAX_BODY_BYTES, Server, build_app
from vt.server.async_llm import AsyncLLM
from vt.server.cors import CorsPolicy
from vt.server.protocol import served_names
from vt.server.reasoning import check_parser
from vt.server.tools import NO_AUTO_TOOLS, ToolOptions

GRACEFUL_SHUTDOWN_S = 30


def make_server(model: str, served_name: str | Sequence[str] | None = None, max_body_bytes: int | None = None,
                api_key: str | None = None, engine_process: bool = False, prompt_tokens_details: bool = False,
                cors: CorsPolicy | None = None, tool_options: ToolOptions = NO_AUTO_TOOLS,
                reasoning_parser: str | None = None, return_tokens_as_token_ids: bool = False,
                **engine_kwargs: Any) -> tuple[Server, Any]:
    """The app on an AsyncLLM; engine_process: the engine core in a process of its own (`vt serve`'s default);
    prompt_tokens_details: usage carries OpenAI's prompt_tokens_details.cached_tokens. served_name: the name, or
    names (vLLM's --served-model-name a b), clients may ask for; responses carry the first. cors: the
    --allowed-origins / -methods / -headers and --allow-credentials policy (None: vLLM's defaults)."""
    names = served_names(served_name or model)  # refused before the engine starts
    # tool_options: --enable-auto-tool-choice, --tool-call-parser, --exclude-tools-when-tool-choice-none;
    # reasoning_parser: --reasoning-parser (qwen3)
    check_parser(reasoning_parser)  # refused before the engine starts
    if api_key is not None and not api_key.strip():
        raise ConfigError("--api-key: an empty key protects nothing; give a key or leave it out")
    llm = AsyncLLM(EngineConfig(model=model, **engine_kwargs), engine_process=engine_process)
    try:
        server = Server(llm, names, max_body_bytes or MAX_BODY_BYTES, api_key=api_key,
                        prompt_tokens_details=prompt_tokens_details, tool_options=tool_options,
                        reasoning_parser=reasoning_parser, return_tokens_as_token_ids=return_tokens_as_token_ids)
    except BaseException:
        # the engine's thread or process is running: left so, it would keep the interpreter from ever exiting
        llm.shutdown("the server could not be built")
        raise
    return server, build_app(server, cors)


def listen_socket(host: str, port: int) -> socket.socket:
    """A socket listening at host:port; port 0 is a free one (`getsockname()[1]` says which). Made with
    the TCP protocol number from getaddrinfo, not 0: asyncio turns Nagle off (TCP_NODELAY) only on sockets
    that say IPPROTO_TCP, and with Nagle on, each small SSE frame waits for a delayed ACK (~40 ms)."""
    if not 0 <= port < 65536:  # getaddrinfo would wrap it (99999 -> 34463) and bind a port nobody asked for
        raise ConfigError(f"--port {port}: must be in [0, 65535] (0: a free port)")
    sock = None
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             proto=socket.IPPROTO_TCP)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        if sock is not None:
            sock.close()
        raise ConfigError(f"could not listen on {host}:{port}: {e.strerror or e} (the port is in use, or the host "
                          f"is not an address of this machine)") from None
    return sock


def uvicorn_server(app: Any, host: str, port: int, on_signal: Callable[[int, bool], None] | None = None,
                   shutdown_timeout_s: float = 0.0) -> Any:
    """uvicorn serving app. on_signal(signal, again) runs in its signal handler, after uvicorn's own: the first
    SIGTERM / SIGINT starts uvicorn's graceful shutdown (it stops accepting, then waits for the connections in
    flight, up to shutdown_timeout_s + GRACEFUL_SHUTDOWN_S), and on_signal decides when those fail; on a second
    (again), on_signal fails them at once, so each still ends with its error frame and the wait ends with them.
    uvicorn's force exit, which cuts every connection and skips the lifespan's end, waits for a third."""
    import uvicorn

    class Server(uvicorn.Server):  # type: ignore[misc]
        signals = 0

        def handle_exit(self, sig: int, frame: Any) -> None:
            self.signals += 1
            super().handle_exit(sig, frame)
            self.force_exit = self.signals >= 3
            if on_signal is not None:
                on_signal(sig, self.signals > 1)

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on",
                            timeout_graceful_shutdown=math.ceil(shutdown_timeout_s) + GRACEFUL_SHUTDOWN_S)
    return Server(config)


@contextlib.contextmanager
def running_server(model: str, host: str = "127.0.0.1", **kwargs: Any) -> Iterator[tuple[Server, str]]:
    """A server in a background thread; yields (server, base URL) once it accepts connections."""
    server, app = make_server(model, **kwargs)
    sock = listen_socket(host, 0)
    port = sock.getsockname()[1]
    uv = uvicorn_server(app, host, port)
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, name="vt-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not uv.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the server did not start on {host}:{port}")
        time.sleep(0.01)
    try:
        yield server, f"http://{host}:{port}"
    finally:
        uv.should_exit = True
        thread.join(timeout=GRACEFUL_SHUTDOWN_S + 10)
        sock.close()


SERVING_LINE = re.compile(r"^vt: serving .* on (http://\S+) ")


@contextlib.contextmanager
def server_process(model: str, flags: list[str], host: str = "127.0.0.1",
                   start_timeout_s: float = 1800.0) -> Iterator[str]:
    """`vt serve MODEL --port 0 FLAGS` in a child process; yields its base URL once it listens (its first
    'serving ... on URL' line). Its stderr is passed on as it comes but for its own error line, which becomes
    this ServerStartError's text if it exits first. SIGTERM on the way out: it drains, as `vt serve` does."""
    cmd = [sys.executable, "-m", "vt.cli", "serve", model, "--host", host, "--port", "0", *flags]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=os.environ.copy())
    lines: queue.Queue = queue.Queue()
    last: list[str] = []

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("vt: error:"):
                last.append(line.strip())
            else:
                sys.stderr.write(line)
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, name="vt-server-stderr", daemon=True).start()
    try:
        url, deadline = None, time.monotonic() + start_timeout_s
        while url is None:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise ServerStartError(f"the server did not listen within {start_timeout_s:.0f} s") from None
            if line is None:
                code = proc.wait()
                why = last[-1].removeprefix("vt: error: ") if last else "no error line"
                raise ServerStartError(f"the server exited with code {code} before it listened: {why}", code)
            m = SERVING_LINE.match(line)
            url = m.group(1) if m else None
        yield url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=GRACEFUL_SHUTDOWN_S + 10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
