"""``/v1/completions``, ``/detokenize`` and ``/v1/chat/render`` on the chat service.

A completion continues the prompt as given, with no chat template: a text prompt is encoded
with special-token parsing off (text never becomes a control token), token ids are passed as
they are (each checked against the vocabulary). Generation stops where chat's does — at the
served model's stop tokens, a stop string or ``max_tokens`` — so that, greedy, a completion of
a chat prompt's ids continues it as ``/v1/chat/completions`` would. The same driver and decoder
run it (:class:`~chatfmt.driver.TurnDriver`), with a parser that reads every token as text: a
control token the model writes (other than a stop) is written out by name.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Literal

from ...decoding import TurnDecoder
from ...dialects.parsers.plain import PlainParser
from ...driver import TurnDriver
from ...engines.base import SamplingParams, TokenLogprob
from ...events import Event, Finish, TextDelta
from ..chat.logprobs import LogprobWriter
from ..chat.sampling import check_supported, sampling_of
from ..chat.schemas import ChatCompletionRequest, Usage
from ..chat.service import ChatService
from ..http.bodies import json_bytes
from ..http.errors import ApiError
from ..http.sse import DONE, pings_until_started, sse_event, stream_errors
from .schemas import (
    DEFAULT_MAX_TOKENS,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    DetokenizeRequest,
    DetokenizeResponse,
    RenderResponse,
)

#: A completion's finish reasons (no calls: nothing is parsed).
Ended = Literal["stop", "length"]


@dataclass
class PreparedCompletion:
    prompt_ids: list[int]
    params: SamplingParams
    stop_strings: tuple[str, ...]
    stream: bool
    include_usage: bool


def _refuse(field: str, why: str) -> ApiError:
    return ApiError(400, why, param=field, code="unsupported_parameter")


class CompletionsService:
    """The legacy completions and the token utilities of one served model."""

    def __init__(self, chat: ChatService) -> None:
        self.chat = chat
        self.tokenizer = chat.tokenizer
        self.logprobs = LogprobWriter(chat.tokenizer)

    # ==== /v1/completions ====

    def prepare(self, req: CompletionRequest) -> PreparedCompletion:
        """The prompt ids and sampling parameters, or a 400 naming the field at fault."""
        if req.echo:
            raise _refuse(
                "echo",
                "echo is not supported: the engines report no log-probabilities of prompt "
                "tokens; prepend the prompt yourself, and send echo false (or leave it out)",
            )
        if req.suffix:
            raise _refuse("suffix", "suffix (insertion) is not supported; leave it out")
        for name, value in (("n", req.n), ("best_of", req.best_of)):
            if value is not None and value != 1:
                raise _refuse(
                    name,
                    f"{name}={value} is not supported: chatfmt generates one choice per request; "
                    "send 1 (or leave it out) and make several requests",
                )
        ids = self._prompt_ids(req.prompt)
        context = self.chat.engine.context_length
        max_tokens = req.max_tokens or DEFAULT_MAX_TOKENS
        if len(ids) + max_tokens > context:
            raise ApiError(
                400,
                f"the model's context length is {context} tokens, but the prompt has {len(ids)} "
                f"tokens and max_tokens is {max_tokens}; lower max_tokens to at most "
                f"{max(context - len(ids), 0)} or shorten the prompt",
                param="max_tokens",
                code="context_length_exceeded",
            )
        stops = tuple(req.stop_list)
        params = sampling_of(
            req,
            self.tokenizer,
            logprobs=req.logprobs,
            max_tokens=max_tokens,
            stop_ids=tuple(sorted(self.chat.stop_ids)),
            stop_strings=stops,
            grammar=None,
        )
        check_supported(self.chat.engine, params)
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        return PreparedCompletion(ids, params, stops, req.stream, include_usage)

    def _prompt_ids(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            if len(prompt) > self.chat.limits.max_body_bytes:
                raise ApiError(400, "the prompt is longer than this server takes", param="prompt")
            # chatfmt's rule: text never becomes a control token.
            return self.tokenizer.encode_text(prompt)
        size = self.tokenizer.vocab_size
        for i, token in enumerate(prompt):
            if not 0 <= token < size:
                raise ApiError(
                    400,
                    f"prompt[{i}] is {token}, which is not in this model's vocabulary (ids 0 to "
                    f"{size - 1}); take ids from POST /tokenize or the model's tokenizer",
                    param="prompt",
                )
        return prompt

    def driver(self, prep: PreparedCompletion) -> TurnDriver:
        dialect = self.chat.dialect
        parser = PlainParser(stop_controls=dialect.stop_controls)
        decoder = TurnDecoder(
            dialect, self.tokenizer, stop_strings=prep.stop_strings, parser=parser
        )
        return TurnDriver(self.chat.engine, decoder, prep.prompt_ids, prep.params)

    def _legacy(self, entries: Sequence[TokenLogprob], offset: int) -> CompletionLogprobs:
        """OpenAI's legacy shape; ``offset``: where the first token's text starts."""
        tokens: list[str] = []
        values: list[float | None] = []
        tops: list[dict[str, float]] = []
        offsets: list[int] = []
        for token, top in self.logprobs.entries(entries):
            offsets.append(offset)
            offset += len(token.token)
            tokens.append(token.token)
            values.append(token.logprob)
            alternatives: dict[str, float] = {}
            for alt in top:
                alternatives.setdefault(alt.token, alt.logprob)  # two ids may share a text
            tops.append(alternatives)
        return CompletionLogprobs(
            tokens=tokens, token_logprobs=values, top_logprobs=tops, text_offset=offsets
        )

    def _new(self, choices: list[CompletionChoice], usage: Usage | None = None) -> Completion:
        return Completion(
            id="cmpl-" + secrets.token_hex(12),
            created=int(time.time()),
            model=self.chat.model_name,
            choices=choices,
            usage=usage,
        )

    async def complete(self, prep: PreparedCompletion) -> Completion:
        driver = self.driver(prep)
        result = await driver.run()
        text = result.content or ""
        entries = driver.logprobs
        logprobs = None if entries is None else self._legacy(entries, 0)
        reason: Ended = "length" if driver.finish_reason == "length" else "stop"
        choice = CompletionChoice(text=text, logprobs=logprobs, finish_reason=reason)
        usage = Usage.of(driver.prompt_tokens, driver.completion_tokens, driver.cached_tokens)
        return self._new([choice], usage)

    def sse(
        self,
        prep: PreparedCompletion,
        driver: TurnDriver,
        opening: asyncio.Task[None] | None = None,
    ) -> AsyncIterator[bytes]:
        """Chunks (``text_completion`` objects, each with the text since the last one), the
        usage chunk if asked, ``[DONE]``. ``opening``: the driver's start still under way
        (:func:`~..http.sse.start_stream`): a ``: ping`` comment every ``PING_SECONDS`` until
        the first token."""
        base = self._new([])
        exclude = None if prep.include_usage else {"usage"}

        def frame(choices: list[CompletionChoice], usage: Usage | None = None) -> bytes:
            body = base.model_copy(update={"choices": choices, "usage": usage})
            return sse_event(json_bytes(body, exclude=exclude))

        async def body() -> AsyncIterator[bytes]:
            if opening is not None:
                async for ping in pings_until_started(opening):
                    yield ping
            offset = 0
            async with aclosing(driver.steps()) as steps:
                async for events in steps:
                    text, finish = _text_of(events)
                    entries = driver.take_logprobs()
                    if not text and finish is None and not entries:
                        continue
                    logprobs = None
                    if driver.logprobs is not None:
                        logprobs = self._legacy(entries, offset)
                        offset += sum(len(t) for t in logprobs.tokens)
                    yield frame(
                        [CompletionChoice(text=text, logprobs=logprobs, finish_reason=finish)]
                    )
            if prep.include_usage:
                usage = Usage.of(
                    driver.prompt_tokens, driver.completion_tokens, driver.cached_tokens
                )
                yield frame([], usage)
            yield DONE

        return stream_errors(body(), "completion", close=driver.aclose)

    # ==== /detokenize and /v1/chat/render ====

    def detokenize(self, req: DetokenizeRequest) -> DetokenizeResponse:
        size = self.tokenizer.vocab_size
        for i, token in enumerate(req.tokens):
            if not 0 <= token < size:
                raise ApiError(
                    400,
                    f"tokens[{i}] is {token}, which is not in this model's vocabulary (ids 0 to "
                    f"{size - 1})",
                    param="tokens",
                )
        return DetokenizeResponse(prompt=self.tokenizer.decode(req.tokens))

    def render(self, req: ChatCompletionRequest) -> RenderResponse:
        """The chat service's own preparation of ``req``, shown rather than generated."""
        prep = self.chat.prepare(req)
        ids = prep.prompt_ids
        return RenderResponse(
            dialect=(prep.dialect or self.chat.dialect).name,
            prompt=self.tokenizer.decode(ids),
            prompt_token_ids=ids,
            count=len(ids),
            max_model_len=self.chat.engine.context_length,
            max_tokens=prep.params.max_tokens,
            stop_token_ids=list(prep.params.stop_ids),
            stop=list(prep.params.stop_strings),
        )


def _text_of(events: list[Event]) -> tuple[str, Ended | None]:
    """The text of a step's events and the finish reason, if the step finished."""
    parts: list[str] = []
    finish: Ended | None = None
    for ev in events:
        if isinstance(ev, TextDelta):
            parts.append(ev.text)
        elif isinstance(ev, Finish):
            finish = "length" if ev.reason == "length" else "stop"
    return "".join(parts), finish


__all__ = ["CompletionsService", "PreparedCompletion"]
