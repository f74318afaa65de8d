"""The web chat's routes: the page, its static files, and a small JSON/SSE API over the agent.

Each ``/api/agent`` request carries the whole conversation (the browser keeps it), so requests
are independent and nothing leaks between tabs or users. The one piece of server state is the
code interpreter: a kernel per browser conversation (:class:`InterpreterSessions`), keyed by the
conversation id the page generates (kept in ``sessionStorage``, so each tab has its own).

Security: the interpreter runs whatever code the model writes, so mount it only where every
visitor may run code on the host (the server binds to 127.0.0.1 by default). POST routes accept
only ``application/json`` from the page's own origin, so another web site open in the same
browser cannot make a local server run code (a cross-site "simple" POST needs no preflight).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, Response
from pydantic import BaseModel

from ..agent import Agent, CodeRunner, ToolRunner
from ..context import Budget
from ..dialects.base import Dialect
from ..engines.base import Engine, SamplingParams
from ..errors import ChatFmtError, InterpreterError
from ..interpreter.sessions import InterpreterSessions
from ..messages import Conversation, Message, Tool, from_openai
from ..prompts import default_system_prompt
from ..server.http.bodies import (
    ApiKeys,
    check_api_key,
    install_error_handler,
    json_bytes,
    json_response,
    read_json_body,
    require_bearer,
)
from ..server.http.errors import ApiError
from ..server.http.openapi import error_responses, event_stream_ok, json_body, publish_models
from ..server.http.sse import event_stream, sse_event, sse_response
from ..store import ResponseStore, owner_of
from .conversation_routes import mount_conversations
from .file_routes import mount_files, session_error, session_errors
from .markdown import render_markdown
from .modes import INTERPRETER_TOOL, MODES, Modes
from .page_events import agent_events, error_event
from .schemas import (
    CONVERSATION_ID,
    MAX_MARKDOWN_CHARS,
    AgentRequest,
    CountRequest,
    CountResponse,
    InfoResponse,
    MarkdownRequest,
    MarkdownResponse,
)
from .security import (
    LOOPBACK_HOSTS,
    SECURITY_HEADERS,
    STATIC_DIR,
    SecureStatic,
    require_same_origin,
)

_Body = TypeVar("_Body", bound=BaseModel)

_AGENT_OK = event_stream_ok("Server-sent events: 'data: <event>' per step of the agent loop")


def _conversation(
    messages: Sequence[Mapping[str, Any]], system: str | None, tools: Sequence[Mapping[str, Any]]
) -> Conversation:
    msgs = from_openai(messages)
    if system is not None and system.strip():
        # The page's system field replaces a system message sent in the history.
        if msgs and msgs[0].role == "system":
            msgs = msgs[1:]
        msgs.insert(0, Message(role="system", content=system))
    return Conversation(messages=tuple(msgs), tools=tuple(Tool.of(t) for t in tools))


def _close_sessions_at_shutdown(app: FastAPI, sessions: InterpreterSessions) -> None:
    """Close the kernels at shutdown, around whatever lifespan the app already has."""
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(application: Any) -> AsyncIterator[Any]:
        try:
            async with inner(application) as state:
                yield state
        finally:
            await sessions.close_all()

    app.router.lifespan_context = lifespan


def mount_web(
    app: FastAPI,
    *,
    engine: Engine,
    dialect: Dialect,
    tools: ToolRunner | None = None,
    interpreter_factory: Callable[[], CodeRunner] | None = None,
    model_name: str,
    params: SamplingParams | None = None,
    max_steps: int = 8,
    idle_timeout: float = 600.0,
    max_sessions: int = 8,
    api_key: ApiKeys = None,
    allowed_hosts: Iterable[str] | None = LOOPBACK_HOSTS,
    sandbox: str | None = None,
    max_upload_bytes: int = 8 * 1024 * 1024,
    store: ResponseStore | None = None,
) -> None:
    """Serve the web chat on ``app``: ``/``, ``/static/``, ``/api/info``, ``/api/count``,
    ``/api/agent``, ``/api/markdown``.

    ``tools`` enables tool mode; ``interpreter_factory`` (a function returning a new
    interpreter, e.g. ``JupyterInterpreter``) enables interpreter mode, one kernel per
    browser conversation. ``params`` are the sampling parameters of every model turn.
    ``api_key`` makes every ``/api`` route require ``Authorization: Bearer <api_key>`` (the
    page asks for the key); the page itself and its static files stay public.
    ``allowed_hosts`` are the host names the ``/api`` POSTs may be addressed to (by default
    loopback only, which stops DNS-rebinding pages from driving the model and the interpreter);
    give the names the server is reached by, or ``None`` for any (then protect it with
    ``api_key``). ``sandbox`` is the one-line description of the interpreter's confinement
    the page shows; ``max_upload_bytes`` bounds a file uploaded into a conversation's
    working directory (``/api/files/...``). ``store`` keeps the page's conversations on the
    server (``/api/conversations``), each visible to the API key that saved it only.
    """
    check_api_key(api_key)
    hosts = (
        None if allowed_hosts is None else frozenset(h.lower().strip("[]") for h in allowed_hosts)
    )
    sampling = params or SamplingParams(max_tokens=1024, temperature=0.0)
    budget = Budget(dialect, engine.tokenizer)
    budget_lock = threading.Lock()  # the block cache is shared by worker threads
    keys = 1 if isinstance(api_key, str) else len(api_key or ())
    sessions = (
        InterpreterSessions(
            interpreter_factory,
            idle_timeout=idle_timeout,
            max_sessions=max_sessions,
            # Each key its fair share, so one key cannot close another's kernels.
            max_per_owner=max(1, max_sessions // max(1, keys)),
        )
        if interpreter_factory is not None
        else None
    )
    modes = Modes(
        tools, interpreter=sessions is not None, interpreter_tool=not dialect.fenced_code_runs
    )
    app.state.chatfmt_web_sessions = sessions
    if sessions is not None:
        _close_sessions_at_shutdown(app, sessions)
    install_error_handler(app)
    publish_models(app, CountRequest, AgentRequest, MarkdownRequest)

    async def read_post(request: Request, model: type[_Body]) -> _Body:
        """The checked body of a POST to ``/api/*`` (or an :class:`ApiError`)."""
        require_bearer(request, api_key)
        require_same_origin(request, hosts)
        return await read_json_body(request, model)

    app.mount("/static", SecureStatic(directory=STATIC_DIR), name="chatfmt-web-static")

    @app.get("/", include_in_schema=False)
    async def page() -> Response:
        return FileResponse(STATIC_DIR / "index.html", headers=SECURITY_HEADERS)

    @app.get(
        "/api/info",
        response_model=None,
        responses={200: {"model": InfoResponse}, **error_responses(401)},
    )
    async def info(request: Request) -> Response:
        require_bearer(request, api_key)
        body = InfoResponse(
            model=model_name,
            dialect=dialect.name,
            context=engine.context_length,
            max_tokens=sampling.max_tokens,
            tools=tools.openai_tools() if tools is not None else [],
            interpreter=sessions is not None,
            interpreter_tool=INTERPRETER_TOOL,
            modes=modes.available(),
            sandbox=sandbox if sessions is not None else None,
            max_upload_bytes=max_upload_bytes if sessions is not None else 0,
            system_prompts={m: default_system_prompt(m) for m in MODES},
        )
        return json_response(body)

    def check_page(request: Request) -> str | None:
        """What every route of the page's own requests checks; the API key it carried."""
        key = require_bearer(request, api_key)
        require_same_origin(request, hosts)
        return key

    mount_conversations(app, store, check=check_page)
    if sessions is not None:
        mount_files(app, sessions, check=check_page, max_upload_bytes=max_upload_bytes)

    @app.post(
        "/api/count",
        response_model=None,
        openapi_extra=json_body(CountRequest),
        responses={200: {"model": CountResponse}, **error_responses(400, 401, 403, 415)},
    )
    async def count(request: Request) -> Response:
        body = await read_post(request, CountRequest)
        defs = body.tools if body.tools is not None else modes.tool_definitions(body.mode)

        def run() -> int:
            conv = _conversation(body.messages, body.system, defs)
            with budget_lock:
                if not conv.messages:
                    # A new chat: what the system prompt and tools cost before the first message
                    # (rendering needs no messages; validation would reject the empty chat).
                    return budget.encoder.count(dialect.render_blocks(conv))
                # Not strict: a conversation being composed still counts.
                return budget.count(conv, strict=False)

        try:
            tokens = await asyncio.to_thread(run)
        except (ChatFmtError, ValueError) as exc:  # ValueError: a malformed tool definition
            raise ApiError(400, str(exc)) from None
        return json_response(CountResponse(tokens=tokens, context=engine.context_length))

    @app.post(
        "/api/markdown",
        response_model=None,
        openapi_extra=json_body(MarkdownRequest),
        responses={
            200: {"model": MarkdownResponse},
            **error_responses(400, 401, 403, 413, 415),
        },
    )
    async def markdown(request: Request) -> Response:
        body = await read_post(request, MarkdownRequest)
        if len(body.text) > MAX_MARKDOWN_CHARS:
            raise ApiError(
                413,
                f"text is {len(body.text):,} characters; /api/markdown renders at most "
                f"{MAX_MARKDOWN_CHARS:,}",
                param="text",
                code="text_too_long",
            )
        # In a thread: a long text takes a while, and other requests go on meanwhile.
        html = await asyncio.to_thread(render_markdown, body.text)
        return json_response(MarkdownResponse(html=html))

    @app.post(
        "/api/agent",
        response_model=None,
        openapi_extra=json_body(AgentRequest),
        responses={**_AGENT_OK, **session_errors(400, 401, 403, 415, 429, 503)},
    )
    async def agent(request: Request) -> Response:
        body = await read_post(request, AgentRequest)
        owner = owner_of(require_bearer(request, api_key))  # its sessions only
        problem = modes.problem(body.mode)
        if problem is not None:
            raise ApiError(400, problem, param="mode")
        cid = body.conversation_id
        if body.mode == "interpreter" and (cid is None or not CONVERSATION_ID.fullmatch(cid)):
            raise ApiError(
                400,
                "interpreter mode needs a conversation_id (8-64 of [A-Za-z0-9_-])",
                param="conversation_id",
            )
        try:
            conv = _conversation(body.messages, body.system, modes.tool_definitions(body.mode))
            dialect.validate(conv)
        except ValueError as exc:  # chatfmt's ValidationError is a ValueError too
            raise ApiError(400, str(exc), param="messages") from None
        if body.mode == "interpreter" and sessions is not None and cid is not None:
            try:  # before the stream begins, so "busy" is a status, not a 200's last event
                await sessions.start(cid, owner)
            except InterpreterError as exc:
                raise session_error(exc) from None

        def loop(interpreter: CodeRunner | None = None) -> Agent:
            runner = modes.runner(body.mode)
            return Agent(
                engine,
                dialect,
                tools=runner,
                interpreter=interpreter,
                params=sampling,
                max_steps=max_steps,
                default_system=False,  # the page sends the prompt it shows (or none)
            )

        async def events() -> AsyncIterator[dict[str, Any]]:
            if body.mode != "interpreter":
                async for event in agent_events(loop(), conv):
                    yield event
                return
            assert sessions is not None and cid is not None
            async with sessions.use(cid, owner) as interpreter:
                async for event in agent_events(loop(interpreter), conv):
                    yield event

        stream = event_stream(
            request, events(), encode=lambda e: sse_event(json_bytes(e)), on_error=error_event
        )
        return sse_response(stream)


__all__ = ["mount_web"]
