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
  stop token and the closing chunks left out), all at once and step by step;
- a thinking budget (:class:`ThoughtBudget`): at the cap, the engine's stream is closed, the
  dialect's closing of the thought is fed to the parser as if the model had written it, and
  a second request (prompt, reply so far and the closing: the engine's prompt cache holds
  all but the closing) lets the model answer.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable, Iterable, Sequence
from dataclasses import dataclass, replace

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


@dataclass(frozen=True, slots=True)
class ThoughtBudget:
    """A cap on a reply's reasoning: at most ``tokens`` generated tokens inside an open
    thought (the closing tag the model writes itself included; the opening tag and the layout
    before it not). At the cap the driver appends ``close_ids`` (the dialect's
    :meth:`~chatfmt.dialects.base.Dialect.close_thought`, encoded) and the model answers.
    Exact for engines that report token ids (each of chatfmt's); for a text-only engine the
    cap is checked per chunk of text."""

    tokens: int
    close_ids: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.tokens < 0:
            raise ValueError(f"a thinking budget is at least 0 tokens, got {self.tokens}")
        if not self.close_ids:
            raise ValueError("a thinking budget needs the ids that close the thought")


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
        budget: ThoughtBudget | None = None,
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
        self._budget = budget
        #: Generated tokens inside an open thought, counted while a budget is set.
        self.reasoning_tokens = 0
        #: How many times the budget closed the thought (each a further engine request).
        self.thoughts_closed = 0
        # Every id of the reply so far (exact or not): what a continuation's prompt appends.
        self._reply: list[int] = []
        # The prompt opened the thought and the budget is 0: close it before generating.
        self._close_first = False

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
        prompt = list(self.prompt_ids)
        budget = self._budget
        if (
            budget is not None
            and budget.tokens == 0
            and not self._prefill
            and self.decoder.parser.in_thought is True
        ):
            self._close_first = True
            prompt += budget.close_ids
        self._stream = self.engine.stream(prompt, self.params)
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
            if self._close_first and self._budget is not None:
                self.thoughts_closed += 1
                yield self._step(self._feed(GenerationChunk(self._budget.close_ids)))
            pending, self._first = self._first, None
            while not self.decoder.done:
                if pending is None:
                    stream = self._stream  # a closed thought's continuation replaces it
                    if self._exhausted or stream is None:
                        break
                    try:
                        pending = await stream.__anext__()
                    except StopAsyncIteration:
                        break
                if self._budget is not None and self.decoder.parser.in_thought is not False:
                    events = self._step(await self._budgeted(pending))
                else:
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
        self._reply.extend(chunk.token_ids)
        # A continuation's prompt is mostly the reply so far: only the first request's
        # cached tokens are the prompt's.
        if chunk.cached_tokens is not None and not self.thoughts_closed:
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

    async def _budgeted(self, chunk: GenerationChunk) -> list[Event]:
        """``chunk`` fed a token at a time while the thought may be open, counting the
        tokens inside it; at the budget, the thought is closed (what the chunk holds past
        the cap is dropped: the engine generated it, but it is not the reply)."""
        budget = self._budget
        assert budget is not None
        parser = self.decoder.parser
        events: list[Event] = []
        for part in _per_token(chunk):
            inside = parser.in_thought is True
            events += self._feed(part)
            if inside:
                self.reasoning_tokens += len(part.token_ids)
            if self.decoder.done:
                break
            if parser.in_thought is True and self.reasoning_tokens >= budget.tokens:
                events += await self._close_thought(budget)
                break
        return events

    async def _close_thought(self, budget: ThoughtBudget) -> list[Event]:
        """Close the thought at the budget: stop this generation, feed the closing ids as the
        reply's, and continue with a request for the answer (its prompt: the first one, the
        reply so far, the closing), within what is left of ``max_tokens``."""
        stream, self._stream = self._stream, None
        if stream is not None:
            with anyio.CancelScope(shield=True):
                await stream.aclose()
        self.thoughts_closed += 1
        events = self._feed(GenerationChunk(budget.close_ids))
        left = self.params.max_tokens - self.completion_tokens
        if left < 1:
            self._exhausted = True
            return events + self.decoder.finish("length")
        params = replace(self.params, max_tokens=left)
        self._stream = self.engine.stream([*self.prompt_ids, *self._reply], params)
        self._exhausted = False
        return events

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
            if chunk.cached_tokens is not None and not self.thoughts_closed:
                self.cached_tokens = chunk.cached_tokens
            if chunk.token_ids or chunk.finish_reason is not None:
                return


def _per_token(chunk: GenerationChunk) -> list[GenerationChunk]:
    """``chunk`` as one chunk per token (its finish on the last; log-probabilities with their
    tokens where there is one entry per token, else on the last), so that a budget can stop
    between two tokens. A text-only chunk cannot be split: it stays whole."""
    ids = chunk.token_ids
    if len(ids) <= 1 or not chunk.exact_ids:
        return [chunk]
    entries = chunk.logprobs
    aligned = entries is not None and len(entries) == len(ids)
    last = len(ids) - 1
    parts = []
    for i, token in enumerate(ids):
        logprobs: tuple[TokenLogprob, ...] | None = None
        if entries is not None and aligned:
            logprobs = (entries[i],)
        elif entries is not None and i == last:
            logprobs = entries
        parts.append(
            GenerationChunk(
                (token,),
                finish_reason=chunk.finish_reason if i == last else None,
                cached_tokens=chunk.cached_tokens if i == last else None,
                logprobs=logprobs,
            )
        )
    return parts


__all__ = ["EventFilter", "ThoughtBudget", "TurnDriver"]
