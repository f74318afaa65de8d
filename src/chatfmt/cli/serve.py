"""``chatfmt serve``: build the engine, dialect and app, and run uvicorn."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

from .._imports import require
from ..dialects import get_dialect
from ..dialects.base import Dialect
from ..engines.default_model import DEFAULT_MODEL_NAME, resolve_model
from ..errors import ChatFmtError

if TYPE_CHECKING:
    from ..engines.base import Engine
    from ..server.limits import ServerLimits
    from ..tokenizers.base import Tokenizer

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
) -> Engine:
    """The engine ``chatfmt serve`` would run.

    ``llama-server`` is llama.cpp's server as a supervised child with ``parallel`` slots
    (started by ``connect()``); ``local`` runs the model in this process, one sequence at a
    time (loaded here); ``remote`` is a server at ``engine_url``.

    For ``remote``, ``tokenizer`` names the served model's vocabulary (a name or path for
    :func:`~chatfmt.tokenizers.load_tokenizer`); by default ``qwen2.5`` for the default model,
    else ``model`` itself (a ``.gguf``, ``tokenizer.json`` or model directory).
    ``text_controls`` are the dialect's (:attr:`~chatfmt.Dialect.text_controls`): where a remote
    server returns text only, control tokens are split out of it at these and no others.
    """
    if engine == "llama-server":
        from ..engines.llama_server import DEFAULT_PARALLEL, LlamaServerEngine

        return LlamaServerEngine(
            resolve_model(model),
            parallel=DEFAULT_PARALLEL if parallel is None else parallel,
            n_ctx=n_ctx,
            n_threads=n_threads,
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


#: GGUF ``general.architecture`` values whose chat format is unambiguous.
_ARCHITECTURE_DIALECTS = {"gemma3": "gemma3", "qwen2": "qwen2.5"}


def default_dialect(model: str, tokenizer: Tokenizer | None = None) -> Dialect:
    """qwen2.5 for the embedded default model; for a GGUF (its vocabulary already loaded as
    ``tokenizer``), the dialect its architecture implies where that is unambiguous (Gemma 3,
    Qwen2); plain ChatML otherwise."""
    if model == "default":
        return get_dialect("qwen2.5")
    metadata = getattr(tokenizer, "metadata", None)
    architecture = metadata("general.architecture") if callable(metadata) else None
    return get_dialect(_ARCHITECTURE_DIALECTS.get(architecture or "", "chatml"))


def model_name(model: str) -> str:
    """The model id the server reports: the default model's name or the file's stem."""
    return DEFAULT_MODEL_NAME if model == "default" else Path(model).stem


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
    drain_timeout: float = 30.0,
    limits: ServerLimits | None = None,
    call_grammar: bool = True,
    log_level: str = "warning",
    out: TextIO | None = None,
    configure: Callable[[Any, Engine, Dialect], None] | None = None,
    store: str | None = None,
    store_max_age_days: float | None = 30.0,
    store_max_mb: float | None = None,
) -> None:
    """Serve ``model`` over HTTP until interrupted; prints the URL once it is accepting.

    Returns after Ctrl+C (SIGINT) once in-flight requests are done; SIGTERM ends the process
    the same way and then exits with the signal's status, as uvicorn does. Either stops new
    connections at once and lets requests in flight (streams included) finish for up to
    ``drain_timeout`` seconds, then cancels what is left and stops the engine. ``limits`` bound
    what one request or client may take (body size, messages, tools, header time, connections).
    ``call_grammar=False`` leaves calls the model may choose to make unconstrained.
    ``store`` is the SQLite file that keeps Responses API responses (``None``: none are kept);
    rows older than ``store_max_age_days`` are deleted, and the oldest past ``store_max_mb``.

    Raises :class:`~chatfmt.errors.ChatFmtError` (or ``MissingDependencyError``) with a
    message naming the fix when the model, engine or extras are missing.
    """
    uvicorn = require("uvicorn", extra="server")
    require("fastapi", extra="server")
    from ..server import create_app
    from ..server.limits import DEFAULT_LIMITS, uvicorn_options
    from ..server.store import ResponseStore

    limits = limits or DEFAULT_LIMITS
    kept = (
        ResponseStore(store, max_age_days=store_max_age_days, max_mb=store_max_mb)
        if store is not None
        else None
    )

    stream = out or sys.stdout
    # A named dialect is checked before the model loads; else the model's vocabulary tells.
    named = get_dialect(dialect) if dialect else None
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
    )
    chosen = named or default_dialect(model, eng.tokenizer)
    name = model_name(model)

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
        asyncio.run(main())
    except KeyboardInterrupt:
        # uvicorn shut down gracefully and re-raised Ctrl+C: a normal way to stop serving.
        pass
