"""``/metrics``: what the server and its engine are doing, in Prometheus text format.

Each app has its own registry (several apps can live in one process, as tests do). Counted
here: requests by route and status, prompt and completion tokens, time to first token and
time per output token (histograms), requests in flight. Read from the engine at scrape time:
whether it is up, its restarts, and — for the managed llama-server — busy slots and requests
waiting for one (llama.cpp's own gauges). Names follow Prometheus conventions (``_total``
counters, ``_seconds`` units) under the ``chatfmt_`` prefix.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from ..engines.base import Engine, GenerationChunk, GrammarSupport, SamplingParams
from ..tokenizers.base import Tokenizer

# Small models on CPUs answer in tens of milliseconds; long prompts take tens of seconds.
_TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_TPOT_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class ServerMetrics:
    """The app's counters and histograms, and the ``/metrics`` page built from them."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.registry = r = CollectorRegistry()
        self.requests = Counter(
            "chatfmt_requests", "HTTP requests answered, by route and status.",
            ["route", "status"], registry=r,
        )  # fmt: skip
        self.in_flight = Gauge(
            "chatfmt_requests_in_flight", "HTTP requests being answered now.", registry=r
        )
        self.prompt_tokens = Counter(
            "chatfmt_prompt_tokens", "Prompt tokens of chat completions.", registry=r
        )
        self.completion_tokens = Counter(
            "chatfmt_completion_tokens", "Completion tokens generated.", registry=r
        )
        self.ttft = Histogram(
            "chatfmt_time_to_first_token_seconds",
            "From the request being ready to generate to the engine's first token.",
            buckets=_TTFT_BUCKETS, registry=r,
        )  # fmt: skip
        self.tpot = Histogram(
            "chatfmt_time_per_output_token_seconds",
            "Time between output tokens after the first, one sample per completion.",
            buckets=_TPOT_BUCKETS, registry=r,
        )  # fmt: skip
        self.engine_up = Gauge(
            "chatfmt_engine_up", "1 when the engine can serve requests.", registry=r
        )
        self.engine_restarts = Counter(
            "chatfmt_engine_restarts",
            "Times the engine process was restarted after it exited unexpectedly.",
            registry=r,
        )
        self._restarts_seen = 0
        self.slots = Gauge(
            "chatfmt_engine_slots", "Sequences the engine decodes at once.", registry=r
        )
        self.active = Gauge(
            "chatfmt_engine_active_slots", "Slots generating or reading a prompt now.", registry=r
        )
        self.queued = Gauge(
            "chatfmt_engine_queue_depth", "Requests waiting for a free slot.", registry=r
        )
        self.continuations = Counter(
            "chatfmt_responses_continued",
            "Responses that continued a stored conversation, by how its earlier part was "
            "sent: the exact ids kept with it, or rendered again.",
            ["prompt"], registry=r,
        )  # fmt: skip

    def completion(self, prompt: int, completion: int, ttft: float, decode: float) -> None:
        """Record one finished completion: token counts, time to first token, and the time
        spent on the tokens after the first (``decode``)."""
        self.prompt_tokens.inc(prompt)
        self.completion_tokens.inc(completion)
        self.ttft.observe(ttft)
        if completion > 1:
            self.tpot.observe(decode / (completion - 1))

    def continued(self, exact: bool) -> None:
        """Count one continued stored conversation."""
        self.continuations.labels("exact" if exact else "rendered").inc()

    async def page(self) -> bytes:
        """The Prometheus text page, with the engine's gauges read now."""
        engine = self.engine
        self.engine_up.set(1 if await engine.health() else 0)
        supervisor = getattr(engine, "supervisor", None)
        restarts = int(getattr(supervisor, "restarts", 0))
        if restarts > self._restarts_seen:  # the supervisor counts; the counter follows it
            self.engine_restarts.inc(restarts - self._restarts_seen)
            self._restarts_seen = restarts
        self.slots.set(getattr(engine, "parallel", 1))
        load = getattr(engine, "load", None)
        stats: dict[str, float] = await load() if load is not None else {}
        self.active.set(stats.get("requests_processing", 0))
        self.queued.set(stats.get("requests_deferred", 0))
        return bytes(generate_latest(self.registry))


class CountRequests:
    """ASGI middleware: every HTTP request counted by route and status, and those in flight."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics, routes: Any = None) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes  # the application's routes, for requests answered before routing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # an app that fails before answering has answered 500

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, watch)
        finally:
            self.metrics.in_flight.dec()
            # The route's template, as the router matched it ("/v1/models/{model_id}"); a path
            # no route matched is "other", so a client cannot grow the label set.
            route = getattr(scope.get("route"), "path", None) or self._static(scope)
            self.metrics.requests.labels(route, str(status)).inc()

    def _static(self, scope: Scope) -> str:
        """The label of a request answered before routing (413 by the body limit): its path
        when that is a route's own parameterless path, else "other" (a raw path with an id in
        it would let clients grow the label set)."""
        path = scope.get("path")
        return path if isinstance(path, str) and path in _static_paths(self.routes) else "other"


def _static_paths(router: Any) -> set[str]:
    """The parameterless paths of ``router``'s routes, included routers' too."""
    out: set[str] = set()
    for route in getattr(router, "routes", ()):
        path = getattr(route, "path", None)
        if isinstance(path, str) and "{" not in path:
            out.add(path)
        # FastAPI keeps an included router behind a wrapper (original_router).
        inner = getattr(route, "original_router", None)
        if inner is not None:
            out |= _static_paths(inner)
    return out


class MeteredEngine(Engine):
    """``engine`` with every generation timed and counted into ``metrics``.

    Whoever generates through it is counted (the API, the web chat's agent); everything else
    (``supervisor``, ``load()``, ``connect()``, ...) is the wrapped engine's own.
    """

    def __init__(self, engine: Engine, metrics: ServerMetrics) -> None:
        self.inner = engine
        self.metrics = metrics
        self.name = engine.name

    @property
    def context_length(self) -> int:
        return self.inner.context_length

    @property
    def tokenizer(self) -> Tokenizer:
        return self.inner.tokenizer

    @property
    def grammar_support(self) -> GrammarSupport:
        return self.inner.grammar_support

    @property
    def sampling_support(self) -> frozenset[str]:
        return self.inner.sampling_support

    async def stream(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncGenerator[GenerationChunk, None]:
        stream = self.inner.stream(prompt_ids, params)
        watch = Stopwatch()
        n = 0
        try:
            async for chunk in stream:
                if chunk.token_ids:
                    watch.token()
                    n += len(chunk.token_ids)
                yield chunk
        finally:
            await stream.aclose()
            if n:
                self.metrics.completion(len(prompt_ids), n, *watch.split())

    async def health(self) -> bool:
        return await self.inner.health()

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes this class lacks: the wrapped engine's extras.
        return getattr(self.inner, name)


class Stopwatch:
    """Times a completion: start, first token, end."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.first: float | None = None

    def token(self) -> None:
        if self.first is None:
            self.first = time.perf_counter()

    def split(self) -> tuple[float, float]:
        """(time to first token, time after it)."""
        now = time.perf_counter()
        first = self.first if self.first is not None else now
        return first - self.start, now - first
