"""One generation driver: a prompt through an engine into one decoded assistant turn.

Every consumer that generates — chat completions (whole and streamed), the Responses API, the
agent loop and so the web chat — drives the engine through :class:`TurnDriver`. What differs
between them is what they make of the events; what is the same is written once here:

- the forced-call prefill is parsed before the model's output;
- an engine that is down fails in :meth:`TurnDriver.open`, before any response headers;
- after a reply that ended at a stop token, the engine's closing chunk is read for what it
  reports (llama.cpp: the prompt tokens it took from its cache);
- an output that ends without a finish reason is finished as ``stop``;
- the engine's stream is always closed, shielded from the cancellation of a client that went
  away (otherwise the engine would go on generating for nobody);
- the counts: prompt, completion and cached tokens, and the ids the model produced;
- the tokens' log-probabilities, when the request asked for them: those of the reply (the
  stop token and the closing chunks left out), all at once and step by step.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable, Iterable, Sequence

import anyio

from .decoding import TurnDecoder
from .engines.base import Engine, GenerationChunk, SamplingParams, TokenLogprob
from .errors import EngineError
from .events import Event, Finish, FinishReason, ParseResult
from .tokenizers.base import Piece

#: Chunks read after a stop token while looking for the engine's closing chunk: the engine
#: stops at that token too, so its next chunk closes the stream; one that goes on generating
#: is not waited for.
_TAIL_CHUNKS = 4
#: How a turn ends when the engine itself has stopped.
_ENGINE_ENDED = frozenset({"control", "end", "length"})

log = logging.getLogger("chatfmt.engine")

EventFilter = Callable[[list[Event]], list[Event]]


class TurnDriver:
    """Drives one reply: ``await open()`` (optional), then ``async for events in steps()``.

    ``steps`` yields the prefill's events first, then those of each engine chunk (an empty
    list is possible), the last including :class:`~chatfmt.events.Finish`. ``events`` is an
    optional filter applied to every step (the server's call policy). After the steps, the
    counts and :meth:`result` are final; an :class:`~chatfmt.errors.EngineError` raised by
    the engine propagates from :meth:`open` or :meth:`steps`.
    """

    def __init__(
        self,
        engine: Engine,
        decoder: TurnDecoder,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        *,
        prefill: Iterable[Piece] = (),
        events: EventFilter | None = None,
    ) -> None:
        self.engine = engine
        self.decoder = decoder
        self.prompt_ids = prompt_ids
        self.params = params
        self._prefill = tuple(prefill)
        self._filter = events
        self._stream: AsyncGenerator[GenerationChunk, None] | None = None
        self._first: GenerationChunk | None = None
        self._exhausted = False
        #: Tokens generated (every chunk's ids, the prefill not included).
        self.completion_tokens = 0
        #: Prompt tokens the engine took from its cache, where it reports it.
        self.cached_tokens: int | None = None
        #: The ids the model produced, while the engine gives them exactly (``None`` once a
        #: chunk came as text only: re-encoded text is not what the model produced).
        self.produced: list[int] | None = []
        #: The turn's finish reason as the parser reports it (``tool_calls`` for a turn that
        #: ended in complete calls).
        self.finish_reason: FinishReason = "stop"
        #: Each generated token's log-probability, in order, up to the stop token (left out),
        #: when ``params.logprobs`` asked for them; ``None`` otherwise.
        self.logprobs: list[TokenLogprob] | None = [] if params.logprobs is not None else None
        self._taken = 0  # of them, handed out by take_logprobs
        self._stop_ids = frozenset(params.stop_ids)

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_ids)

    @property
    def cut(self) -> bool:
        """Whether the reply was cut by the token limit."""
        return self.finish_reason == "length"

    async def open(self) -> None:
        """Start generating and wait for the first chunk, so that an engine that is down
        fails here, while an HTTP error can still be answered, rather than mid-stream."""
        if self._stream is not None:
            return
        self._stream = self.engine.stream(list(self.prompt_ids), self.params)
        try:
            self._first = await self._stream.__anext__()
        except StopAsyncIteration:
            self._exhausted = True
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Stop the engine's generation (shielded: a cancelled caller still stops it)."""
        stream, self._stream = self._stream, None
        self._exhausted = True
        if stream is not None:
            with anyio.CancelScope(shield=True):
                await stream.aclose()

    async def steps(self) -> AsyncGenerator[list[Event], None]:
        """The turn's events, step by step; the engine's stream is closed at the end."""
        try:
            yield self._step(self.decoder.prefill(self._prefill))
            await self.open()
            stream = self._stream
            pending, self._first = self._first, None
            while not self.decoder.done:
                if pending is None:
                    if self._exhausted or stream is None:
                        break
                    try:
                        pending = await stream.__anext__()
                    except StopAsyncIteration:
                        break
                events = self._step(self._feed(pending))
                pending = None
                if self.decoder.done:
                    await self._read_tail()
                yield events
            if not self.decoder.done:
                yield self._step(self.decoder.finish("stop"))
        finally:
            await self.aclose()

    async def run(self) -> ParseResult:
        """Drive the whole turn, ignoring events; the parsed result."""
        async for _ in self.steps():
            pass
        return self.result()

    def result(self) -> ParseResult:
        """The parsed turn (after the steps)."""
        return self.decoder.result()

    def take_logprobs(self) -> list[TokenLogprob]:
        """The log-probabilities that came since the last call: after each step, those of the
        tokens it decoded (a stream sends them with that step's deltas)."""
        entries = self.logprobs
        if entries is None or self._taken == len(entries):
            return []
        self._taken, new = len(entries), entries[self._taken :]
        return new

    # ==== Internals ====

    def _feed(self, chunk: GenerationChunk) -> list[Event]:
        self.completion_tokens += len(chunk.token_ids)
        if chunk.cached_tokens is not None:
            self.cached_tokens = chunk.cached_tokens
        produced = self.produced
        if produced is not None:
            if chunk.exact_ids:
                produced.extend(chunk.token_ids)
            else:
                self.produced = None
        if chunk.logprobs and self.logprobs is not None:
            self._keep_logprobs(chunk.logprobs)
        return self.decoder.feed_chunk(chunk)

    def _keep_logprobs(self, entries: tuple[TokenLogprob, ...]) -> None:
        kept = self.logprobs
        assert kept is not None
        stops = self._stop_ids
        for entry in entries:
            if entry.token_id in stops:  # the stop token and what follows are not the reply
                return
            kept.append(entry)

    def _step(self, events: list[Event]) -> list[Event]:
        if self._filter is not None:
            events = self._filter(events)
        for ev in events:
            if isinstance(ev, Finish):
                self.finish_reason = ev.reason
        return events

    async def _read_tail(self) -> None:
        """After a reply that the engine ended (a stop token, its finish), its closing chunks:
        they carry what the engine reports of the whole request (the cached prompt tokens:
        llama-server's last event, vLLM's usage chunk). Not after a stop string or the parser
        ended the turn: the engine may still be generating then."""
        stream = self._stream
        if self.decoder.stopped_by not in _ENGINE_ENDED or stream is None or self._exhausted:
            return
        for _ in range(_TAIL_CHUNKS):
            try:
                chunk = await stream.__anext__()
            except StopAsyncIteration:
                self._exhausted = True
                return
            except EngineError as exc:
                # The reply is whole (its stop token came): only the engine's closing report
                # is lost, so the turn ends normally, without a cached-token count.
                log.info("the engine's stream failed after the reply ended: %s", exc)
                self._exhausted = True
                return
            if chunk.cached_tokens is not None:
                self.cached_tokens = chunk.cached_tokens
            if chunk.token_ids or chunk.finish_reason is not None:
                return


__all__ = ["EventFilter", "TurnDriver"]
