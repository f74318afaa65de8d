"""The web chat's routes: the page, its static files, and a small JSON/SSE API over the agent.

Each ``/api/agent`` request carries the whole conversation (the browser keeps it), so requests
are independent and nothing leaks between tabs or users. The one piece of server state is the
code interpreter: a kernel per browser conversation, keyed by the conversation id the page
generates (kept in ``sessionStorage``, so each tab has its own), closed after it has been idle
for ``idle_timeout`` seconds, when more than ``max_sessions`` are open (least recently used
first), and at server shutdown.

Security: the interpreter runs whatever code the model writes, so mount it only where every
visitor may run code on the host (the server binds to 127.0.0.1 by default). POST routes accept
only ``application/json`` from the page's own origin, so another web site open in the same
browser cannot make a local server run code (a cross-site "simple" POST needs no preflight).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import re
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field

from ..agent import (
    Agent,
    AgentResult,
    CodeRunner,
    ModelEvent,
    ToolFinished,
    ToolRunner,
    ToolStarted,
    TurnFinished,
)
from ..context import Budget
from ..dialects.base import Dialect
from ..engines.base import Engine, SamplingParams
from ..errors import ChatFmtError, ValidationError
from ..events import TextDelta, ToolCallDelta, ToolCallStart
from ..messages import INTERPRETER, Conversation, Message, Tool, from_openai

logger = logging.getLogger("chatfmt.web")

STATIC_DIR = Path(__file__).resolve().parent / "static"

#: The tool definition offered to the model in interpreter mode; the agent runs calls of it in
#: the conversation's kernel.
INTERPRETER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": INTERPRETER,
        "description": (
            "Run Python code in a stateful Jupyter kernel and return its output. Variables "
            "persist between calls. Matplotlib figures are shown to the user as images."
        ),
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The Python code to run"}},
            "required": ["code"],
        },
    },
}

# The page is self-contained: scripts, styles and fetches from its own origin only; images may
# also be data: URLs (interpreter plots).
_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'"
)
_SECURITY_HEADERS = {
    "Content-Security-Policy": _CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


class _SecureStatic(StaticFiles):
    """Static files with the page's security headers: ``/static/index.html`` is the page too."""

    async def get_response(self, path: str, scope: Any) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(_SECURITY_HEADERS)
        return response


_CONVERSATION_ID = re.compile(r"^[A-Za-z0-9_-]{8,64}$")

Mode = Literal["chat", "tools", "interpreter"]


# ==== Request bodies ====


_Body = TypeVar("_Body", bound=BaseModel)


class CountRequest(BaseModel):
    """Body of ``POST /api/count``: what to count (``tools`` or a ``mode`` that implies them)."""

    model_config = ConfigDict(extra="forbid")

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    mode: Mode | None = None
    system: str | None = None


class AgentRequest(BaseModel):
    """Body of ``POST /api/agent``."""

    model_config = ConfigDict(extra="forbid")

    messages: list[dict[str, Any]] = Field(min_length=1)
    mode: Mode = "chat"
    system: str | None = None
    conversation_id: str | None = None


# ==== Interpreter sessions ====


class _Guarded:
    """An interpreter that knows whether a cell is running.

    A cancelled request cannot stop the worker thread running its cell, so the session is not
    handed to the next request until that cell has ended (or the kernel was interrupted).
    """

    def __init__(self, inner: CodeRunner) -> None:
        self.inner = inner
        self._idle = threading.Event()
        self._idle.set()

    def execute(self, code: str, timeout: float | None = None) -> Any:
        self._idle.clear()
        try:
            return self.inner.execute(code, timeout)
        finally:
            self._idle.set()

    @property
    def busy(self) -> bool:
        return not self._idle.is_set()

    def interrupt(self) -> None:
        """Ask the kernel to stop the running cell, if the interpreter can."""
        method = getattr(self.inner, "interrupt", None)
        if callable(method):
            try:
                method()
            except Exception:
                logger.warning("interrupting the interpreter failed", exc_info=True)

    def wait_idle(self, timeout: float | None = None) -> bool:
        return self._idle.wait(timeout)


@dataclass
class _Session:
    interpreter: _Guarded
    last_used: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class InterpreterSessions:
    """One interpreter per browser conversation, closed after ``idle_timeout`` seconds idle.

    Requests of the same conversation take turns on its kernel (a lock), so two tabs that share
    an id cannot interleave cells. Creating and closing kernels blocks, so it runs in threads.
    """

    def __init__(
        self,
        factory: Callable[[], CodeRunner],
        *,
        idle_timeout: float = 600.0,
        max_sessions: int = 8,
    ) -> None:
        self.factory = factory
        self.idle_timeout = idle_timeout
        self.max_sessions = max_sessions
        self._sessions: dict[str, _Session] = {}
        self._creating: dict[str, asyncio.Task[_Session]] = {}
        self._sweeper: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, conversation_id: object) -> bool:
        return conversation_id in self._sessions

    @asynccontextmanager
    async def use(self, conversation_id: str) -> AsyncIterator[CodeRunner]:
        """The conversation's interpreter (started on first use), held for this request."""
        session = await self._get(conversation_id)
        session.users += 1
        try:
            async with session.lock:
                session.last_used = time.monotonic()
                try:
                    yield session.interpreter
                finally:
                    if session.interpreter.busy:  # the request was cancelled mid-cell
                        await asyncio.to_thread(session.interpreter.interrupt)
                        await asyncio.to_thread(session.interpreter.wait_idle)
        finally:
            session.users -= 1
            session.last_used = time.monotonic()

    async def _get(self, conversation_id: str) -> _Session:
        self._ensure_sweeper()
        session = self._sessions.get(conversation_id)
        if session is not None:
            return session
        pending = self._creating.get(conversation_id)
        if pending is None:
            await self._make_room()
            pending = asyncio.get_running_loop().create_task(self._create(conversation_id))
            self._creating[conversation_id] = pending
        # Shielded: a request stopped while the kernel starts leaves the start to finish, and
        # the kernel is registered for the conversation's next request (never leaked).
        return await asyncio.shield(pending)

    async def _create(self, conversation_id: str) -> _Session:
        try:
            interpreter = await asyncio.to_thread(self.factory)
        finally:
            del self._creating[conversation_id]
        session = _Session(_Guarded(interpreter), time.monotonic())
        self._sessions[conversation_id] = session
        return session

    async def _make_room(self) -> None:
        while len(self._sessions) + len(self._creating) >= self.max_sessions:
            idle = [(s.last_used, k) for k, s in self._sessions.items() if s.users == 0]
            if not idle:
                raise ChatFmtError(
                    f"all {self.max_sessions} code interpreter sessions are busy; try again later"
                )
            await self.close(min(idle)[1])

    async def close(self, conversation_id: str) -> None:
        """Shut the conversation's kernel down (no-op if it has none)."""
        session = self._sessions.pop(conversation_id, None)
        if session is not None:
            await asyncio.to_thread(_close_interpreter, session.interpreter.inner)

    async def sweep(self) -> None:
        """Close the kernels idle for longer than ``idle_timeout``."""
        now = time.monotonic()
        for key, session in list(self._sessions.items()):
            if session.users == 0 and now - session.last_used > self.idle_timeout:
                logger.info("closing the idle interpreter of conversation %s", key)
                await self.close(key)

    async def close_all(self) -> None:
        """Stop the sweeper and close every kernel (server shutdown)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        for key in list(self._sessions):
            await self.close(key)

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def _sweep_forever(self) -> None:
        interval = max(0.05, min(self.idle_timeout / 4, 30.0))
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sweep()
            except Exception:  # a kernel that fails to close must not stop the sweeper
                logger.exception("closing an idle interpreter failed")


def _close_interpreter(interpreter: CodeRunner) -> None:
    for name in ("close", "shutdown"):
        method = getattr(interpreter, name, None)
        if callable(method):
            method()
            return


class _InterpreterOnly:
    """The tool runner of interpreter mode: offers the interpreter, refuses anything else.

    The agent sends calls named ``interpreter`` to its interpreter before asking the runner.
    """

    def openai_tools(self) -> list[dict[str, Any]]:
        return [INTERPRETER_TOOL]

    async def acall(
        self, name: str, arguments: str | Mapping[str, Any], *, timeout: float | None = None
    ) -> Any:
        from ..tools import ToolResult

        return ToolResult.failure(
            name, f"no tool named '{name}'; only '{INTERPRETER}' is available"
        )


# ==== Streaming interpreter code out of argument deltas ====


_CODE_KEY = re.compile(r'"code"\s*:\s*"')
_HEX = set("0123456789abcdefABCDEF")


class CodeDeltas:
    """Turns the JSON argument fragments of an interpreter call into code text deltas.

    The arguments stream as JSON (``{"code": "import m``...); this decodes the ``code``
    string as far as it is complete, holding back a half-written escape (``\\u00`` or the
    first half of a surrogate pair) until the rest arrives.
    """

    def __init__(self) -> None:
        self._buf = ""
        self._pos: int | None = None  # where the undecoded part of the code string starts
        self._done = False

    def feed(self, fragment: str) -> str:
        """The code text that ``fragment`` completes (may be empty)."""
        if self._done:
            return ""
        self._buf += fragment
        if self._pos is None:
            match = _CODE_KEY.search(self._buf)
            if match is None:
                return ""
            self._pos = match.end()
        buf, i, safe = self._buf, self._pos, self._pos
        n = len(buf)
        while i < n:
            ch = buf[i]
            if ch == '"':
                self._done = True
                safe = i
                break
            if ch != "\\":
                i += 1
                safe = i
                continue
            if i + 1 >= n:
                break
            if buf[i + 1] != "u":
                i += 2
                safe = i
                continue
            digits = buf[i + 2 : i + 6]
            if len(digits) < 4 or not set(digits) <= _HEX:
                if len(digits) == 4:  # malformed escape: give up on deltas for this call
                    self._done = True
                break
            i += 6
            if 0xD800 <= int(digits, 16) <= 0xDBFF:
                continue  # a high surrogate is only safe together with its low half
            safe = i
        chunk = buf[self._pos : safe]
        self._pos = safe
        if not chunk:
            return ""
        try:
            decoded: str = json.loads('"' + chunk + '"')
        except json.JSONDecodeError:
            self._done = True
            return ""
        return decoded


# ==== SSE ====


def _png_base64(image: Any) -> str | None:
    if isinstance(image, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(image)).decode("ascii")
    if isinstance(image, str):
        return image.split(",", 1)[1] if image.startswith("data:") else image
    data = getattr(image, "data", None)  # an image object carrying its bytes
    return _png_base64(data) if data is not None else None


def _openai(message: Message) -> dict[str, Any]:
    out = message.to_openai()
    if message.metadata is not None:  # ChatGLM3 history needs it back verbatim
        out["metadata"] = message.metadata
    return out


def _sse(event: Mapping[str, Any]) -> bytes:
    return f"data: {json.dumps(event, ensure_ascii=False)}\n\n".encode()


async def agent_events(agent: Agent, conversation: Conversation) -> AsyncIterator[dict[str, Any]]:
    """The agent loop as the page's JSON events (see ``docs/web.md``)."""
    codes: dict[int, CodeDeltas] = {}
    started: list[str] = []  # ids of the calls announced in this turn, by index
    ran = 0  # calls of this turn already run: the n-th ToolStarted is the n-th start
    stream = agent.stream(conversation)
    try:
        async for item in stream:
            if isinstance(item, ModelEvent):
                ev = item.event
                if isinstance(ev, TextDelta):
                    if ev.text:
                        yield {"type": "text", "text": ev.text}
                elif isinstance(ev, ToolCallStart):
                    started.append(ev.id)
                    if ev.name == INTERPRETER:
                        codes[ev.index] = CodeDeltas()
                    yield {
                        "type": "tool_call_start",
                        "index": ev.index,
                        "id": ev.id,
                        "name": ev.name,
                    }
                elif isinstance(ev, ToolCallDelta) and ev.index in codes:
                    text = codes[ev.index].feed(ev.arguments)
                    if text and ev.index < len(started):
                        yield {"type": "code_delta", "id": started[ev.index], "text": text}
            elif isinstance(item, TurnFinished):
                result = item.result
                yield {
                    "type": "turn",
                    "finish_reason": result.finish_reason,
                    "messages": [_openai(m) for m in result.messages],
                    "warnings": list(result.warnings),
                }
                codes.clear()
                started = []
                ran = 0
            elif isinstance(item, ToolStarted):
                call = item.call
                event: dict[str, Any] = {
                    "type": "tool_call",
                    "id": call.id,
                    "name": call.name,
                    "arguments": call.arguments,
                }
                # The parser's streamed id and the final call's id should agree; if a dialect
                # renames calls, tell the page which streamed element this is.
                if ran < len(started) and started[ran] != call.id:
                    event["stream_id"] = started[ran]
                ran += 1
                yield event
            elif isinstance(item, ToolFinished):
                images = [b for b in (_png_base64(i) for i in item.images) if b]
                msg = Message(
                    role="tool",
                    content=item.observation,
                    tool_call_id=item.call.id,
                    name=item.call.name,
                )
                yield {
                    "type": "tool_result",
                    "id": item.call.id,
                    "name": item.call.name,
                    "content": item.observation,
                    "ok": item.ok,
                    "images": images,
                    "message": _openai(msg),
                }
            elif isinstance(item, AgentResult):
                yield {
                    "type": "done",
                    "stopped": item.stopped,
                    "steps": item.steps,
                    "messages": [_openai(m) for m in item.new_messages],
                }
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


async def _stream_response(
    request: Request, events: AsyncIterator[dict[str, Any]]
) -> AsyncIterator[bytes]:
    """Run ``events`` in a task and stream them; a client disconnect cancels the task.

    The task and a disconnect watcher make cancellation prompt even while nothing is being
    sent (a long interpreter cell, a slow first token).
    """
    queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    async def produce() -> None:
        try:
            async for event in events:
                await queue.put(event)
        except asyncio.CancelledError:
            raise
        except ChatFmtError as exc:
            await queue.put({"type": "error", "message": str(exc)})
        except Exception as exc:
            logger.exception("the web agent loop failed")
            await queue.put({"type": "error", "message": f"internal error: {type(exc).__name__}"})
        finally:
            with contextlib.suppress(AttributeError):
                await events.aclose()  # type: ignore[attr-defined]
            queue.put_nowait(None)

    async def watch() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                logger.info("web client disconnected; stopping the agent loop")
                producer.cancel()
                return

    producer = asyncio.create_task(produce())
    watcher = asyncio.create_task(watch())
    try:
        while True:
            event = await queue.get()
            if event is None:
                break
            yield _sse(event)
    finally:
        for task in (producer, watcher):
            task.cancel()
        for task in (producer, watcher):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


# ==== Routes ====


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status)


def _check_post(request: Request) -> JSONResponse | None:
    """Reject POSTs that are not JSON from the page's own origin (see the module docstring)."""
    ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if ctype != "application/json":
        return _error(415, "send the request body as application/json")
    origin = request.headers.get("origin")
    if origin is not None and origin != "null":
        host = request.headers.get("host", "")
        if urlsplit(origin).netloc.lower() != host.lower():
            return _error(403, "cross-origin requests are not allowed", "permission_error")
    return None


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
    api_key: str | None = None,
) -> None:
    """Serve the web chat on ``app``: ``/``, ``/static/``, ``/api/info``, ``/api/count``,
    ``/api/agent``.

    ``tools`` enables tool mode; ``interpreter_factory`` (a function returning a new
    interpreter, e.g. ``JupyterInterpreter``) enables interpreter mode, one kernel per
    browser conversation. ``params`` are the sampling parameters of every model turn.
    ``api_key`` makes every ``/api`` route require ``Authorization: Bearer <api_key>`` (the
    page asks for the key); the page itself and its static files stay public.
    """
    sampling = params or SamplingParams(max_tokens=1024, temperature=0.0)
    budget = Budget(dialect, engine.tokenizer)
    budget_lock = threading.Lock()  # the block cache is shared by worker threads
    sessions = (
        InterpreterSessions(
            interpreter_factory, idle_timeout=idle_timeout, max_sessions=max_sessions
        )
        if interpreter_factory is not None
        else None
    )
    app.state.chatfmt_web_sessions = sessions

    if sessions is not None:
        # Close the kernels at shutdown, around whatever lifespan the app already has.
        inner = app.router.lifespan_context

        @asynccontextmanager
        async def lifespan(application: Any) -> AsyncIterator[Any]:
            try:
                async with inner(application) as state:
                    yield state
            finally:
                await sessions.close_all()

        app.router.lifespan_context = lifespan

    def tools_for(mode: Mode | None) -> list[dict[str, Any]]:
        if mode == "tools" and tools is not None:
            return tools.openai_tools()
        if mode == "interpreter":
            return [INTERPRETER_TOOL]
        return []

    def mode_problem(mode: Mode) -> str | None:
        if mode == "tools" and tools is None:
            return "tool mode is not available: the server has no tools registered"
        if mode == "interpreter" and sessions is None:
            return "interpreter mode is not available: the server has no code interpreter"
        return None

    def unauthorized(request: Request) -> JSONResponse | None:
        if api_key is None:
            return None
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and secrets.compare_digest(
            token.strip().encode(), api_key.encode()
        ):
            return None
        return _error(401, "this server needs an API key", "invalid_api_key")

    app.mount("/static", _SecureStatic(directory=STATIC_DIR), name="chatfmt-web-static")

    @app.get("/", include_in_schema=False)
    async def page() -> Response:
        return FileResponse(STATIC_DIR / "index.html", headers=_SECURITY_HEADERS)

    @app.get("/api/info")
    async def info(request: Request) -> Response:
        denied = unauthorized(request)
        if denied is not None:
            return denied
        return JSONResponse(
            {
                "model": model_name,
                "dialect": dialect.name,
                "context": engine.context_length,
                "max_tokens": sampling.max_tokens,
                "tools": tools.openai_tools() if tools is not None else [],
                "interpreter": sessions is not None,
                "interpreter_tool": INTERPRETER_TOOL,
                "modes": [m for m in ("chat", "tools", "interpreter") if mode_problem(m) is None],
            }
        )

    async def read_post(request: Request, model: type[_Body]) -> _Body | Response:
        """The checked body of a POST to ``/api/*``, or the error response to send."""
        rejected = _check_post(request) or unauthorized(request)
        if rejected is not None:
            return rejected
        try:
            return model.model_validate(await request.json())
        except (ValueError, RecursionError) as exc:  # RecursionError: absurdly nested JSON
            return _error(400, f"bad request body: {exc}")

    @app.post("/api/count")
    async def count(request: Request) -> Response:
        body = await read_post(request, CountRequest)
        if isinstance(body, Response):
            return body
        defs = body.tools if body.tools is not None else tools_for(body.mode)

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
            return _error(400, str(exc))
        return JSONResponse({"tokens": tokens, "context": engine.context_length})

    @app.post("/api/agent")
    async def agent(request: Request) -> Response:
        body = await read_post(request, AgentRequest)
        if isinstance(body, Response):
            return body
        problem = mode_problem(body.mode)
        if problem is not None:
            return _error(400, problem)
        cid = body.conversation_id
        if body.mode == "interpreter" and (cid is None or not _CONVERSATION_ID.match(cid)):
            return _error(400, "interpreter mode needs a conversation_id (8-64 of [A-Za-z0-9_-])")
        try:
            conv = _conversation(body.messages, body.system, tools_for(body.mode))
            dialect.validate(conv)
        except ValidationError as exc:
            return _error(400, str(exc))
        except ValueError as exc:
            return _error(400, str(exc))

        async def events() -> AsyncIterator[dict[str, Any]]:
            if body.mode == "interpreter":
                assert sessions is not None and cid is not None
                async with sessions.use(cid) as interpreter:
                    loop = Agent(
                        engine,
                        dialect,
                        tools=_InterpreterOnly(),
                        interpreter=interpreter,
                        params=sampling,
                        max_steps=max_steps,
                    )
                    async for event in agent_events(loop, conv):
                        yield event
                return
            loop = Agent(
                engine,
                dialect,
                tools=tools if body.mode == "tools" else None,
                params=sampling,
                max_steps=max_steps,
            )
            async for event in agent_events(loop, conv):
                yield event

        return StreamingResponse(
            _stream_response(request, events()),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )


__all__ = [
    "INTERPRETER_TOOL",
    "AgentRequest",
    "CodeDeltas",
    "CountRequest",
    "InterpreterSessions",
    "agent_events",
    "mount_web",
]
