"""``chatfmt serve``: its options (:func:`add_serve_parser`), the command (:func:`cmd_serve`:
flags checked, web chat and interpreter pool configured), and the library behind it: build the
engine (:func:`build_engine`, shared with ``chatfmt chat``), pick the dialect (the one named,
else the one the model's chat template is written in: :mod:`chatfmt.cli.model_format`), create
the app and run uvicorn (:func:`run_server`)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

from .._imports import require
from ..dialects.base import Dialect
from ..engines.default_model import DEFAULT_MODEL_NAME, resolve_model
from ..errors import ChatFmtError, MissingDependencyError
from .kernel import (
    add_kernel_options,
    add_keys_without_sandbox_option,
    add_public_bind_option,
    check_keys_sandbox,
    check_public_bind,
    interpreter_wanted,
)
from .model_format import choose_dialect, default_dialect
from .options import (
    add_engine_options,
    default_store_path,
    engine_options,
    fail,
    load_tools_file,
    read_keys,
    server_limits,
)

if TYPE_CHECKING:
    from ..engines.base import Engine
    from ..server.http.limits import ServerLimits

EngineKind = Literal["llama-server", "local", "remote"]


def build_engine(
    model: str = "default",
    *,
    engine: EngineKind = "local",
    engine_url: str | None = None,
    tokenizer: str | None = None,
    engine_api_key: str | None = None,
    n_ctx: int | None = None,
    n_threads: int | None = None,
    text_controls: Sequence[str] | None = None,
    parallel: int | None = None,
    prompt_cache_mb: int | None = None,
    stream_interval: int = 1,
) -> Engine:
    """The engine ``chatfmt serve`` would run.

    ``llama-server`` is llama.cpp's server as a supervised child with ``parallel`` slots
    (started by ``connect()``; ``prompt_cache_mb`` bounds its host prompt cache, ``None``: its
    default; ``stream_interval`` as :class:`~chatfmt.engines.remote.RemoteEngine` takes it,
    for it and ``remote``); ``local`` runs the model in this process, one sequence at a
    time (loaded here); ``remote`` is a server at ``engine_url``.

    For ``remote``, ``tokenizer`` names the served model's vocabulary (a name or path for
    :func:`~chatfmt.tokenizers.load_tokenizer`); by default ``qwen2.5`` for the default model,
    else ``model`` itself (a ``.gguf``, ``tokenizer.json`` or model directory).
    ``text_controls`` are the dialect's (:attr:`~chatfmt.Dialect.text_controls`): where a remote
    server returns text only, control tokens are split out of it at these and no others.
    """
    if stream_interval < 1:
        raise ChatFmtError(
            f"--stream-interval must be 1 or more (tokens sent at a time), got {stream_interval}"
        )
    if stream_interval != 1 and engine == "local":
        raise ChatFmtError(
            "--stream-interval applies to the llama-server and remote engines; the local "
            "engine sends every token as it comes"
        )
    if engine == "llama-server":
        from ..engines.llama_server import (
            DEFAULT_PARALLEL,
            DEFAULT_PROMPT_CACHE_MB,
            LlamaServerEngine,
        )

        return LlamaServerEngine(
            resolve_model(model),
            parallel=DEFAULT_PARALLEL if parallel is None else parallel,
            n_ctx=n_ctx,
            n_threads=n_threads,
            prompt_cache_mb=DEFAULT_PROMPT_CACHE_MB if prompt_cache_mb is None else prompt_cache_mb,
            stream_interval=stream_interval,
        )
    if engine == "local":
        from ..engines.local import LocalEngine

        return LocalEngine(resolve_model(model), n_ctx=n_ctx, n_threads=n_threads)
    if engine == "remote":
        if not engine_url:
            raise ChatFmtError("--engine remote needs --engine-url URL (the server's base URL)")
        from ..engines.remote import RemoteEngine
        from ..tokenizers import load_tokenizer

        name = tokenizer or ("qwen2.5" if model == "default" else model)
        return RemoteEngine(
            engine_url,
            tokenizer=load_tokenizer(name),
            api_key=engine_api_key,
            context_length=n_ctx,
            text_controls=text_controls,
            stream_interval=stream_interval,
        )
    raise ChatFmtError(f"unknown engine {engine!r}; use 'llama-server', 'local' or 'remote'")


def _engine_server(config: Any, engine: Engine) -> Any:
    """A uvicorn server for ``config`` that stops ``engine`` when it shuts down."""
    base: Any = require("uvicorn", extra="server").Server

    class EngineServer(base):  # type: ignore[misc]
        """uvicorn's server, stopping the engine as the last step of its graceful shutdown:
        after SIGTERM uvicorn re-raises the signal once ``serve()`` returns, which ends the
        process before any code after it (or an ``atexit`` hook) runs."""

        def __init__(self, config: Any, engine: Engine) -> None:
            super().__init__(config)
            self.engine = engine

        async def shutdown(self, sockets: Any = None) -> None:
            try:
                await super().shutdown(sockets)
            finally:
                await self.engine.aclose()

    return EngineServer(config, engine)


def trusted_hosts(host: str) -> list[str] | None:
    """Host headers the server answers. A server on loopback answers only loopback names:
    otherwise a web page could rebind its own domain to 127.0.0.1 and, being "same-origin",
    drive the API and the code interpreter. ``None`` (any) for a wildcard bind, which is
    reachable by name from elsewhere anyway: protect that one with ``--api-key``."""
    if host in ("0.0.0.0", "::", ""):
        return None
    return sorted({host, "127.0.0.1", "localhost", "::1", "[::1]"})


def model_name(model: str) -> str:
    """The model id the server reports: the default model's name, a GGUF file's name without
    ``.gguf``, or a remote engine's model id as given (``Qwen/Qwen2.5-7B-Instruct``: its dots
    are part of the name, not a suffix)."""
    if model == "default":
        return DEFAULT_MODEL_NAME
    if model.lower().endswith(".gguf"):
        return Path(model).name[: -len(".gguf")]
    return model


def run_server(
    model: str = "default",
    dialect: str | None = None,
    engine: EngineKind = "llama-server",
    engine_url: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    api_key: str | Sequence[str] | None = None,
    *,
    tokenizer: str | None = None,
    engine_api_key: str | None = None,
    n_ctx: int | None = None,
    n_threads: int | None = None,
    parallel: int | None = None,
    prompt_cache_mb: int | None = None,
    stream_interval: int = 1,
    drain_timeout: float = 30.0,
    limits: ServerLimits | None = None,
    call_grammar: bool = True,
    log_level: str = "warning",
    out: TextIO | None = None,
    configure: Callable[[Any, Engine, Dialect], None] | None = None,
    store: str | None = None,
    store_max_age_days: float | None = 30.0,
    store_max_mb: float | None = None,
    template_check: bool = True,
) -> None:
    """Serve ``model`` over HTTP until interrupted; prints the URL once it is accepting.

    Returns after Ctrl+C (SIGINT) once in-flight requests are done; SIGTERM ends the process
    the same way and then exits with the signal's status, as uvicorn does. Either stops new
    connections at once and lets requests in flight (streams included) finish for up to
    ``drain_timeout`` seconds, then cancels what is left and stops the engine. ``limits`` bound
    what one request or client may take (body size, messages, tools, header time, connections).
    ``call_grammar=False`` leaves calls the model may choose to make unconstrained.
    ``store`` keeps Responses API responses and web chat conversations: a SQLite file's path,
    or a ``postgresql://`` URL that replicas share (``None``: none are kept); rows older than
    ``store_max_age_days`` are deleted, and the oldest past ``store_max_mb``.
    A GGUF file's dialect is checked against the model's own chat template
    (:func:`check_template`); ``template_check=False`` serves it anyway, with a warning.

    Raises :class:`~chatfmt.errors.ChatFmtError` (or ``MissingDependencyError``) with a
    message naming the fix when the model, engine or extras are missing.
    """
    uvicorn = require("uvicorn", extra="server")
    require("fastapi", extra="server")
    from ..server import create_app
    from ..server.http.limits import DEFAULT_LIMITS, uvicorn_options
    from ..store import open_store

    limits = limits or DEFAULT_LIMITS
    # A named dialect is checked before anything starts, and so is a GGUF file's own (from its
    # header): a format that cannot be told is refused before the store opens or llama.cpp runs.
    named, chat_only, described = choose_dialect(
        model, dialect, template_check=template_check, log=sys.stderr
    )
    kept = (
        open_store(store, max_age_days=store_max_age_days, max_mb=store_max_mb)
        if store is not None
        else None
    )

    stream = out or sys.stdout
    eng = build_engine(
        model,
        engine=engine,
        engine_url=engine_url,
        tokenizer=tokenizer,
        engine_api_key=engine_api_key,
        n_ctx=n_ctx,
        n_threads=n_threads,
        text_controls=named.text_controls if named else None,
        parallel=parallel,
        prompt_cache_mb=prompt_cache_mb,
        stream_interval=stream_interval,
    )
    chosen = named or default_dialect(model, eng.tokenizer, log=sys.stderr)
    name = model_name(model)
    choice = getattr(eng, "context_choice", None)
    if choice is not None:  # the embedded engine: how much context it serves, and why
        slots = getattr(eng, "parallel", 1)
        print(f"chatfmt: {choice.describe(slots)}", file=sys.stderr, flush=True)

    async def main() -> None:
        connect = getattr(eng, "connect", None)
        if connect is not None:
            # remote: detect the server kind and its context length; llama-server: start it.
            await connect()
        app = create_app(
            eng,
            chosen,
            model_name=name,
            api_key=api_key,
            limits=limits,
            call_grammar=call_grammar,
            store=kept,
            chat_only=chat_only,
            format_description=described,
        )
        if configure is not None:
            configure(app, app.state.service.engine, chosen)  # the engine /metrics counts
        hosts = trusted_hosts(host)
        if hosts is not None:
            from starlette.middleware.trustedhost import TrustedHostMiddleware

            app.add_middleware(TrustedHostMiddleware, allowed_hosts=hosts)
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level,
            timeout_graceful_shutdown=drain_timeout,
            **uvicorn_options(limits),
        )
        server = _engine_server(config, eng)
        task = asyncio.create_task(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.05)
        if server.started:
            bound = server.servers[0].sockets[0].getsockname()[1] if server.servers else port
            shown = f"[{host}]" if ":" in host else host
            print(
                f"chatfmt: serving {name} ({chosen.name}, {eng.name}) at http://{shown}:{bound}/v1",
                file=stream,
                flush=True,
            )
            if configure is not None:
                print(f"chatfmt: web chat at http://{shown}:{bound}/", file=stream, flush=True)
        try:
            await task
        finally:
            await eng.aclose()
            if kept is not None:
                kept.close()

    try:
        run_fast(main())
    except KeyboardInterrupt:
        # uvicorn shut down gracefully and re-raised Ctrl+C: a normal way to stop serving.
        pass


def run_fast(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` on uvloop's event loop where it is installed (the server extra installs
    it; its transports and polling cost a fraction of asyncio's per streamed token), else on
    asyncio's own."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)


# ==== The command ====


def add_serve_parser(sub: Any) -> None:
    """The ``serve`` command and its options, on the ``chatfmt`` parser's ``sub``."""
    p = sub.add_parser("serve", help="OpenAI-compatible API and web chat")
    add_engine_options(p)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", action="append",
                   help="require this bearer token (repeat for several keys; stored responses "
                   "belong to the key that made them)")  # fmt: skip
    p.add_argument("--api-key-file", metavar="FILE", help="API keys, one per line")
    p.add_argument("--store", metavar="PATH|URL",
                   help="where Responses API responses and web chat conversations are kept: a "
                   "SQLite file, or a postgresql://user@host/db URL that replicas share (the "
                   "postgres extra) (default: a file in the user's data directory)")  # fmt: skip
    p.add_argument("--no-store", action="store_true", help="keep no responses")
    p.add_argument("--store-max-age-days", type=float, default=30.0, metavar="DAYS",
                   help="delete stored responses older than this (default: 30)")  # fmt: skip
    p.add_argument("--store-max-mb", type=float, default=1024.0, metavar="MB",
                   help="past this much stored data, the oldest responses and web chat "
                   "conversations go first; 0 for no limit (default: 1024)")  # fmt: skip
    p.add_argument("--threads", type=int, help="CPU threads for the local model")
    p.add_argument(
        "--parallel",
        type=int,
        metavar="N",
        help="conversations the llama-server engine decodes at once, each with its own "
        "context of --n-ctx tokens and prompt cache (default: 4)",
    )
    p.add_argument(
        "--prompt-cache-mb",
        type=int,
        metavar="MB",
        help="host memory the llama-server engine may keep prompts in after they leave a "
        "slot, so that returning conversations find them; 0 for none (default: 1024)",
    )
    p.add_argument(
        "--stream-interval",
        type=int,
        default=1,
        metavar="N",
        help="after a reply's first token, send its tokens to the client N at a time (as "
        "vLLM's --stream-interval): less CPU per token in front of a busy engine, less smooth "
        "streaming; llama-server and remote engines (default: 1, every token as it comes)",
    )
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM or Ctrl+C, how long requests in flight may take to finish (default: 30)",
    )
    p.add_argument(
        "--no-template-check",
        action="store_true",
        help="serve a GGUF model with its dialect even where the model's own chat template "
        "renders the probe conversations differently (default: refuse, showing the difference)",
    )
    p.add_argument(
        "--no-call-grammar",
        action="store_true",
        help="leave tool calls unconstrained when the model may answer in text (tool_choice "
        '"auto"); forced calls, strict tools and response_format are still constrained',
    )
    limits = p.add_argument_group("limits per request and client")
    limits.add_argument(
        "--max-body-mb",
        type=float,
        default=8.0,
        metavar="MB",
        help="largest request body; larger ones get 413 (default: 8)",
    )
    limits.add_argument(
        "--max-messages",
        type=int,
        default=4096,
        metavar="N",
        help="most messages in one request (default: 4096)",
    )
    limits.add_argument(
        "--max-tools",
        type=int,
        default=512,
        metavar="N",
        help="most tools in one request (default: 512)",
    )
    limits.add_argument(
        "--header-timeout",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="a connection must send its request headers within this (default: 20)",
    )
    limits.add_argument("--body-timeout", type=float, default=60.0, metavar="SECONDS",
                        help="a request body must arrive within this of its headers "
                        "(default: 60)")  # fmt: skip
    limits.add_argument("--max-connections-per-client", type=int, default=64, metavar="N",
                        help="open connections one client address may hold; 0 for no cap, e.g. "
                        "behind a reverse proxy (default: 64)")  # fmt: skip
    p.add_argument("--tools", metavar="FILE.py", help="tools for the web chat (default: demo)")
    p.add_argument("--no-interpreter", action="store_true", help="no code interpreter mode")
    p.add_argument("--max-upload-mb", type=float, default=8.0, metavar="MB",
                   help="largest file the web chat uploads to the interpreter; at most "
                   "--max-body-mb (default: 8)")  # fmt: skip
    add_kernel_options(p)
    add_public_bind_option(p)
    add_keys_without_sandbox_option(p)
    p.add_argument("--no-web", action="store_true", help="serve only the API, no web chat")
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    """``chatfmt serve``: check the flags before the model loads, then :func:`run_server` with
    the web chat (and a warm interpreter kernel) mounted unless ``--no-web``."""
    from ..server.http.bodies import check_api_key

    api_key = read_keys(args) or None
    check_api_key(api_key)  # before the model loads: a key no client could send
    wanted = interpreter_wanted(args)
    check_public_bind(args.host, api_key, interpreter=wanted, allow=args.allow_public_without_key)
    check_keys_sandbox(
        api_key, args.sandbox, interpreter=wanted, allow=args.allow_keys_without_sandbox
    )
    tools = load_tools_file(args.tools) if args.tools else None
    if args.store_max_age_days <= 0 or args.store_max_mb < 0:
        fail("--store-max-age-days must be positive, and --store-max-mb 0 (no limit) or more")
    if args.store is not None and not args.no_store:
        from ..store import is_postgres

        # Before the model loads: a URL of a scheme no backend serves is an error (it used to
        # become a folder named after the scheme), and a PostgreSQL one needs its extra.
        if is_postgres(args.store):
            require("psycopg", extra="postgres")
    if not 0 < args.max_upload_mb <= args.max_body_mb:
        fail(f"--max-upload-mb must be positive and at most --max-body-mb ({args.max_body_mb:g})")
    # Before the store opens: the engine's own checks come after it.
    if args.stream_interval < 1:
        fail(f"--stream-interval must be 1 or more (tokens at a time), got {args.stream_interval}")
    if args.prompt_cache_mb is not None and args.prompt_cache_mb < 0:
        fail(f"--prompt-cache-mb must be 0 (no cache) or more, got {args.prompt_cache_mb}")

    def configure(app: Any, engine: Any, dialect: Dialect) -> None:
        from ..web import demo_tools, mount_web

        factory, sandbox_line = None, None
        if not args.no_interpreter:
            try:
                require_jupyter()
            except MissingDependencyError:
                pass  # the web chat offers chat and tool modes only
            else:
                import atexit

                from ..interpreter import KernelPool
                from .kernel import announce, kernel_kwargs

                kwargs = kernel_kwargs(args)
                announce(kwargs)
                sandbox_line = kwargs["sandbox"].describe()
                # A warm kernel waits for the next conversation that asks for the interpreter.
                pool = KernelPool(size=1, **kwargs).start()
                atexit.register(pool.close)
                factory = pool.acquire
        mount_web(
            app,
            engine=engine,
            dialect=dialect,
            tools=tools if tools is not None else demo_tools(),
            interpreter_factory=factory,
            model_name=model_name(args.model),
            api_key=api_key,
            allowed_hosts=trusted_hosts(args.host),
            sandbox=sandbox_line,
            max_upload_bytes=round(args.max_upload_mb * 1024 * 1024),
            store=app.state.store,
        )

    run_server(
        model=args.model,
        dialect=args.dialect,
        host=args.host,
        port=args.port,
        api_key=api_key,
        store=None if args.no_store else (args.store or default_store_path()),
        store_max_age_days=args.store_max_age_days,
        store_max_mb=args.store_max_mb or None,
        n_threads=args.threads,
        parallel=args.parallel,
        prompt_cache_mb=args.prompt_cache_mb,
        stream_interval=args.stream_interval,
        drain_timeout=args.drain_timeout,
        call_grammar=not args.no_call_grammar,
        template_check=not args.no_template_check,
        limits=server_limits(args),
        configure=None if args.no_web else configure,
        **{**engine_options(args), "engine": args.engine or "llama-server"},
    )
    return 0


def require_jupyter() -> None:
    """Raise MissingDependencyError unless the interpreter's kernel packages are installed."""
    require("jupyter_client", extra="jupyter")
    require("ipykernel", extra="jupyter")
