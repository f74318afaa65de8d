"""The chat-completions logic behind the HTTP routes, free of web-framework types.

A request goes: OpenAI body → messages and tools → ``dialect.render`` (exact prompt ids, in a
worker thread for a long one) → context check → :class:`~chatfmt.driver.TurnDriver` (the engine,
decoded by the dialect's parser) → the call policy → OpenAI deltas.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass

from ...decoding import TurnDecoder
from ...dialects.base import Dialect
from ...driver import ThoughtBudget, TurnDriver
from ...engines.base import Engine, SamplingParams, TokenLogprob
from ...errors import ChatFmtError, ValidationError
from ...messages import Conversation, conversation_of
from ...render_cache import ConversationCache, Lookup, ToolsCache
from ...segments import Block, BlockEncoder, Control, RenderedPrompt, Segment
from ...store import view_of
from ...tokenizers.base import Piece, Tokenizer
from ..http.bodies import json_bytes
from ..http.errors import ApiError
from ..http.limits import DEFAULT_LIMITS, ServerLimits, count_problem
from ..http.sse import DONE, pings_until_started, sse_event, stop_started, stream_errors
from ..metrics import ServerMetrics
from .budget import thought_budget
from .constraints import (
    NO_TOOLS_SHOWN,
    check_chat_only,
    constraint,
    forced_call,
    select_tools,
)
from .continuation import Continuation, Splicer
from .logprobs import LogprobWriter
from .policy import CallPolicy
from .reasoning import configure, controls_of
from .sampling import check_supported, sampling_params
from .schemas import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Choice,
    ChunkChoice,
    NamedToolChoice,
    TokenizeResponse,
    Usage,
)
from .wire import ROLE_FRAME, assistant_message, choice_frames, logprob_frames

#: Requests with less message text than this are rendered on the event loop: a thread hop
#: costs more than encoding a few thousand characters (tens of microseconds).
INLINE_RENDER_CHARS = 8192

#: Requests with more message text than this skip the shared block cache: re-encoding them is
#: cheap next to their size (a tokenizer encodes megabytes per second), and cached they would
#: keep their text and ids in memory long after the request.
CACHED_RENDER_CHARS = 256 * 1024

#: How far a normalising tokenizer may shrink text before it encodes it (NFC composes three
#: Hangul jamo into one syllable): the early context check divides by this too, so that it
#: refuses only prompts that cannot fit.
_NORMALISED_SHRINK = 4

log = logging.getLogger("chatfmt.server")

#: Roles whose string content every dialect renders in full (assistant content is left out:
#: some formats drop earlier turns' reasoning).
_RENDERED_ROLES = frozenset({"system", "developer", "user", "tool"})


def _text_size(req: ChatCompletionRequest) -> int:
    """About how much rendering work a request is (characters, plus per-message work)."""
    size = 16 * len(req.messages)  # per-message work: validation, headers
    for m in req.messages:
        content = m.get("content")
        if isinstance(content, str):
            size += len(content)
        elif content is not None:
            size += len(str(content))
        size += 32 * len(m.get("tool_calls") or ())
        reasoning = m.get("reasoning_content") or m.get("reasoning")
        if isinstance(reasoning, str):
            size += len(reasoning)
    return size + 512 * len(req.tools or ())


def _rendered_chars(req: ChatCompletionRequest) -> int:
    """Characters of message text that certainly reach the prompt (a lower bound)."""
    chars = 0
    for m in req.messages:
        if m.get("role") not in _RENDERED_ROLES:
            continue
        content = m.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") == "text":
                    text = part.get("text")
                    chars += len(text) if isinstance(text, str) else 0
    return chars


def _longest_token_bytes(tokenizer: Tokenizer) -> int:
    """The most bytes of text one token of ``tokenizer``'s vocabulary stands for."""
    controls = set(tokenizer.controls.values())
    sizes = (len(tokenizer.token_bytes(i)) for i in range(tokenizer.vocab_size))
    return max((n for i, n in enumerate(sizes) if i not in controls), default=1) or 1


@dataclass
class Prepared:
    """A validated, rendered request, ready for the engine."""

    prompt_ids: list[int]
    params: SamplingParams
    stop_strings: tuple[str, ...]
    stream: bool
    include_usage: bool
    #: What the prompt ends with to force a tool call (``tool_choice``), as the parser reads it.
    prefill: tuple[Piece, ...] = ()
    #: Tools the reply may call (``None``: any) and how many calls it may make.
    allowed_calls: frozenset[str] | None = None
    max_calls: int | None = None
    #: The dialect as this request configured it (its reasoning controls); ``None``: the
    #: service's own.
    dialect: Dialect | None = None
    #: The digest of the prompt as rendered (``None`` unless asked for), how many of
    #: ``prompt_ids`` are a stored conversation's exact ids (0: all rendered), and where the
    #: reply starts in them (after the prompt, before a forced call's opening).
    view: str | None = None
    exact_base: int = 0
    reply_start: int = 0
    #: The reply's reasoning cap (``thinking_token_budget``), ``None``: none.
    budget: ThoughtBudget | None = None

    def policy(self) -> CallPolicy:
        return CallPolicy(self.allowed_calls, self.max_calls)


class ChatService:
    """Serves chat completions for one engine and one dialect."""

    def __init__(
        self,
        engine: Engine,
        dialect: Dialect,
        *,
        model_name: str,
        limits: ServerLimits = DEFAULT_LIMITS,
        metrics: ServerMetrics | None = None,
        call_grammar: bool = True,
        chat_only: bool = False,
    ) -> None:
        self.engine = engine
        self.call_grammar = call_grammar
        #: The model's own template writes no tools (see :mod:`chatfmt.template`): requests
        #: with tools are refused rather than described in a way the model never saw.
        self.chat_only = chat_only
        #: How the model is served, in words (``/v1/models``).
        self.format_description: str = getattr(
            dialect, "description", f"the {dialect.name} dialect"
        )
        self.dialect = dialect
        self.model_name = model_name
        self.limits = limits
        self.metrics = metrics
        self.tokenizer = engine.tokenizer
        self.stop_ids = frozenset(dialect.stop_ids(self.tokenizer))
        self._splicer = Splicer(dialect, self.tokenizer, self.stop_ids)
        # One encoder for all requests: a chat that grows by a turn re-encodes only that turn.
        # Its cache is a plain dict, so one render at a time uses it; a render that finds it
        # busy uses an encoder of its own instead of waiting (see _render).
        self._encoder = BlockEncoder(self.tokenizer)
        self._render_lock = threading.Lock()
        self._longest_token: int | None = None
        # A client re-sends the whole history as new JSON on every request: these keep the
        # tool sets and the last requests (messages and prompts), so that a returning
        # conversation pays for its new messages only. Both are bounded (render_cache.py).
        self._tools = ToolsCache()
        self._conversations = ConversationCache()
        #: Token log-probabilities as the APIs write them (texts of the vocabulary kept).
        self.logprobs = LogprobWriter(self.tokenizer)

    # ==== Request → prompt ====

    async def prepare_async(
        self,
        req: ChatCompletionRequest,
        *,
        continuation: Continuation | None = None,
        view: bool = False,
    ) -> Prepared:
        """:meth:`prepare` without blocking the event loop on a long conversation."""
        size = _text_size(req)
        if size <= INLINE_RENDER_CHARS and not self._needs_vocabulary_scan(req, size):
            return self.prepare(req, continuation=continuation, view=view, size=size)
        # Rendering a long conversation is CPU work: keep it off the event loop. The tokenizer
        # releases the GIL while it encodes, so the loop serves other requests meanwhile.
        return await asyncio.to_thread(
            lambda: self.prepare(req, continuation=continuation, view=view, size=size)
        )

    def prepare(
        self,
        req: ChatCompletionRequest,
        *,
        continuation: Continuation | None = None,
        view: bool = False,
        size: int | None = None,
    ) -> Prepared:
        """Validate and render a request (blocking, but never waiting for another render).

        With a ``continuation`` whose view is this request's render of the same messages, its
        exact ids stand in for them (see :meth:`.Splicer.splice`); ``view`` asks for the
        digest of the rendered prompt (:attr:`Prepared.view`), to store with the reply.
        ``size``: the request's ``_text_size``, when the caller has it already."""
        if req.n is not None and req.n != 1:
            raise ApiError(
                400,
                f"n={req.n} is not supported: chatfmt generates one choice per request; "
                "send n=1 (or omit it) and make several requests",
                param="n",
            )
        if not req.messages:
            raise ApiError(400, "'messages' is empty; send at least one message", param="messages")
        # The routes checked the counts on the parsed body already; this is for direct callers.
        problem = count_problem({"messages": req.messages, "tools": req.tools}, self.limits)
        if problem is not None:
            raise problem
        if size is None:
            size = _text_size(req)
        self._check_text_fits(req, size)
        try:
            lookup = self._conversations.messages(req.messages)
        except ValidationError as exc:
            raise ApiError(400, str(exc), param="messages") from None
        if self.chat_only:
            check_chat_only(req, getattr(self.dialect, "chat_only_reason", NO_TOOLS_SHOWN))
        declared_tools = self._tools.tools(req.tools) if req.tools else ()
        tools = select_tools(req, declared_tools)
        enabled, effort = controls_of(
            req.reasoning_effort, req.chat_template_kwargs, effort_param="reasoning_effort"
        )
        dialect = configure(self.dialect, enabled, effort, param="reasoning_effort")
        if tools:
            dialect = dialect.with_tools(tools)
        try:
            conv = conversation_of(tuple(lookup.messages), tuple(tools))
            # How the reply starts (a thought open or not): the grammar and parser follow it.
            dialect = dialect.for_reply_to(conv)
            grammar = constraint(req, tools, dialect, self.engine, call_grammar=self.call_grammar)
            # Without a grammar, a forced call is started in the prompt instead.
            prefill = forced_call(req, tools, dialect) if grammar is None else ()
            rendered, prefill_ids, spliced = self._render(
                conv, prefill, size, continuation, dialect, lookup
            )
        except ValidationError as exc:
            raise ApiError(400, str(exc), param="messages") from None
        except ApiError:
            raise
        except (ChatFmtError, ValueError) as exc:
            raise ApiError(400, str(exc)) from None
        prompt = rendered.ids if spliced is None else spliced
        ids = prompt + prefill_ids if prefill_ids else prompt
        n_prompt = len(ids)
        context = self.engine.context_length
        requested = req.requested_max_tokens
        room = context - n_prompt
        if room < 1:
            asked = "" if requested is None else f" (and max_tokens is {requested})"
            raise ApiError(
                400,
                f"the prompt has {n_prompt} tokens, which fills the model's context length "
                f"of {context} tokens{asked}; shorten the conversation, or serve the model "
                "with a larger context (chatfmt serve --n-ctx)",
                param="messages",
                code="context_length_exceeded",
            )
        # A limit over the room left is bounded by it, not refused: agents ask for a fixed
        # 8,000 or 32,000 tokens whatever the model (Qwen Code, opencode); a reply that
        # reaches the window ends with "length", as one that reaches max_tokens does.
        max_tokens = room if requested is None else min(requested, room)
        if requested is not None and requested > room:
            log.info(
                "max_tokens %d bounded to the %d tokens the %d-token prompt leaves",
                requested,
                room,
                n_prompt,
            )
        stops = tuple(req.stop_list)
        params = sampling_params(
            req,
            self.tokenizer,
            max_tokens=max_tokens,
            stop_ids=tuple(sorted(self.stop_ids)),
            stop_strings=(*dialect.stop_strings(), *stops),
            grammar=grammar,
        )
        check_supported(self.engine, params)
        budget = thought_budget(
            req.thought_cap, dialect, self.tokenizer, grammar, stop_ids=self.stop_ids
        )
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        pieces = tuple(
            Control(s.token)
            if isinstance(s, Control) and self.tokenizer.has_control(s.token)
            else s.token
            if isinstance(s, Control)
            else s.text
            for s in prefill
        )
        choice = req.tool_choice
        declared = frozenset(t.name for t in declared_tools)
        allowed = frozenset() if choice == "none" else declared
        single = isinstance(choice, NamedToolChoice) or req.parallel_tool_calls is False
        return Prepared(
            ids,
            params,
            stops,
            req.stream,
            include_usage,
            pieces,
            allowed,
            1 if single else None,
            dialect=dialect,
            view=view_of(rendered.ids) if view else None,
            exact_base=0 if spliced is None or continuation is None else len(continuation.ids),
            reply_start=len(prompt),
            budget=budget,
        )

    def _render(
        self,
        conv: Conversation,
        prefill: tuple[Segment, ...],
        size: int,
        continuation: Continuation | None = None,
        dialect: Dialect | None = None,
        lookup: Lookup | None = None,
    ) -> tuple[RenderedPrompt, list[int], list[int] | None]:
        """The prompt's ids, those of the forced-call prefix, and the prompt with a
        continuation's exact ids spliced in (``None``: not possible, see :meth:`.Splicer.splice`).

        The shared, cached encoder serves a request of ordinary size when no other render is
        using it; otherwise this render takes an encoder of its own, so that no request ever
        waits behind another one's render (a small chat behind a megabyte conversation).
        """
        dialect = dialect or self.dialect
        shared = size <= CACHED_RENDER_CHARS and self._render_lock.acquire(blocking=False)
        encoder = self._encoder if shared else BlockEncoder(self.tokenizer, max_entries=0)
        try:
            if lookup is not None:
                # A returning conversation renders only its new turn; what is cached beyond
                # the encoder's blocks stays within ordinary sizes.
                rendered = self._conversations.render(
                    dialect, conv, encoder, lookup, store=size <= CACHED_RENDER_CHARS
                )
            else:
                rendered = dialect.render(conv, self.tokenizer, encoder=encoder)
            prefill_ids = list(encoder.encode_block(Block(prefill))) if prefill else []
            spliced = None
            # The splicer renders with the service's dialect: a request that configured its
            # own (thinking switched) gets no splice rather than a view of another prompt.
            if continuation is not None and dialect is self.dialect:
                spliced = self._splicer.splice(conv, rendered.ids, continuation, encoder)
        finally:
            if shared:
                self._render_lock.release()
        return rendered, prefill_ids, spliced

    def _needs_vocabulary_scan(self, req: ChatCompletionRequest, size: int) -> bool:
        """Whether :meth:`_check_text_fits` would first scan the vocabulary (tens of ms)."""
        # The text size bounds the rendered characters from above: small, no scan.
        limit = self.engine.context_length * _NORMALISED_SHRINK
        return self._longest_token is None and size >= limit and _rendered_chars(req) >= limit

    def _check_text_fits(self, req: ChatCompletionRequest, size: int) -> None:
        """The context check before rendering, for a prompt whose text alone cannot fit.

        No token stands for more text than the vocabulary's longest one, so the message text
        gives a lower bound on the prompt's tokens; over the context length, the request gets
        the full check's error without paying for rendering and tokenizing megabytes.
        """
        context = self.engine.context_length
        if size < context * _NORMALISED_SHRINK:
            return  # _text_size counts at least the rendered characters: fits, no scan
        chars = _rendered_chars(req)
        if chars < context * _NORMALISED_SHRINK:
            return  # fits whatever the vocabulary: no need to know its longest token
        longest = self._longest_token
        if longest is None:
            longest = self._longest_token = _longest_token_bytes(self.tokenizer)
        at_least = chars // (longest * _NORMALISED_SHRINK)
        if at_least >= context:
            raise ApiError(
                400,
                f"the prompt has at least {at_least} tokens ({chars} characters of message "
                f"text, and no token of this model stands for more than {longest} bytes), which "
                f"is more than the model's context length of {context} tokens; shorten the "
                "conversation",
                param="messages",
                code="context_length_exceeded",
            )

    def render_info(self, req: ChatCompletionRequest) -> TokenizeResponse:
        """The prompt a request renders to (for ``/tokenize``), without generating."""
        prep = self.prepare(req)
        return TokenizeResponse(
            count=len(prep.prompt_ids),
            tokens=prep.prompt_ids,
            max_model_len=self.engine.context_length,
            text=self.tokenizer.decode(prep.prompt_ids),
        )

    # ==== Generation ====

    def driver(self, prep: Prepared) -> tuple[TurnDriver, CallPolicy]:
        """The generation of one reply to ``prep``, and the request's call policy, which
        filters its events (chat completions and the Responses API both drive it)."""
        policy = prep.policy()
        decoder = TurnDecoder(
            prep.dialect or self.dialect, self.tokenizer, stop_strings=prep.stop_strings
        )
        driver = TurnDriver(
            self.engine,
            decoder,
            prep.prompt_ids,
            prep.params,
            prefill=prep.prefill,
            events=policy.filter,
            budget=prep.budget,
        )
        return driver, policy

    def new_id(self) -> str:
        return "chatcmpl-" + secrets.token_hex(12)

    async def complete(self, prep: Prepared) -> ChatCompletion:
        """A whole ``chat.completion`` response."""
        driver, policy = self.driver(prep)
        message = assistant_message(await driver.run(), policy)
        entries = driver.logprobs
        logprobs = None if entries is None else self.logprobs.chat(entries)
        choice = Choice(message=message, finish_reason=driver.finish_reason, logprobs=logprobs)
        return ChatCompletion(
            id=self.new_id(),
            created=int(time.time()),
            model=self.model_name,
            choices=[choice],
            usage=Usage.of(driver.prompt_tokens, driver.completion_tokens, driver.cached_tokens),
        )

    def sse(
        self, prep: Prepared, driver: TurnDriver, opening: asyncio.Task[None] | None = None
    ) -> AsyncIterator[bytes]:
        """The ``text/event-stream`` body of ``driver``: chunks, the usage chunk if asked,
        ``[DONE]``; an error after the headers is reported in the stream. ``opening``: the
        driver's start still under way (:func:`~..http.sse.start_stream`): the role chunk goes
        out at once, then a ``: ping`` comment every ``PING_SECONDS`` until the first token."""
        cid, created, model = self.new_id(), int(time.time()), self.model_name
        # Chunks carry "usage": null only when the request asked for the usage chunk.
        exclude = None if prep.include_usage else {"usage"}

        def frame(choices: list[ChunkChoice], usage: Usage | None = None) -> bytes:
            body = ChatCompletionChunk(
                id=cid, created=created, model=model, choices=choices, usage=usage
            )
            return sse_event(json_bytes(body, exclude=exclude))

        # Every chunk of this stream is the same frame around its choices: serialize the frame
        # once and only the choices per chunk (a third of the cost of a whole model per token).
        empty = frame([])
        cut = empty.index(b'"choices":[') + len(b'"choices":[')
        head, tail = empty[:cut], empty[cut:]

        async def body() -> AsyncIterator[bytes]:
            yield head + ROLE_FRAME + tail
            if opening is not None:
                async for ping in pings_until_started(opening):
                    yield ping
            async with aclosing(driver.steps()) as steps:
                if driver.logprobs is None:  # the hot path: nothing per token for logprobs
                    async for events in steps:
                        for choice in choice_frames(events):
                            yield head + choice + tail
                else:
                    pending: list[TokenLogprob] = []  # of steps that changed nothing visible
                    async for events in steps:
                        pending += driver.take_logprobs()
                        for choice in logprob_frames(events, pending, self.logprobs):
                            yield head + choice + tail
            if prep.include_usage:
                usage = Usage.of(
                    driver.prompt_tokens, driver.completion_tokens, driver.cached_tokens
                )
                yield frame([], usage)
            yield DONE

        async def close() -> None:
            if opening is None:
                await driver.aclose()
            else:
                await stop_started(opening, driver.aclose)

        return stream_errors(body(), "chat completion", close=close)
