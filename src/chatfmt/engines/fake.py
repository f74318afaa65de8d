"""A scripted engine for unit tests of the layers above engines (server, agents)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Sequence

from ..decoding import split_controls
from ..errors import EngineError
from ..tokenizers.base import Tokenizer
from .base import Engine, GenerationChunk, GrammarSupport, SamplingParams, TokenLogprob

Reply = str | Sequence[int]
Script = Sequence[Reply] | Callable[[list[int]], Reply]


class FakeEngine(Engine):
    """Replays scripted replies, one per call, cycling through ``script``.

    A reply is token ids, or text in which control tokens are written out
    (``"<tool_call>\\n{...}\\n</tool_call><|im_end|>"``); text is encoded with ``tokenizer``.
    ``script`` may also be a function of the prompt ids. Stop ids and ``max_tokens`` are
    honoured like a real engine: the stop id is yielded, then the stream ends with ``stop``;
    a reply that runs out without a stop id ends with ``stop`` too (as at end of text).

    ``delay`` sleeps between tokens, ``first_delay`` before the first one (an engine reading a
    long prompt); ``fail_after`` raises :class:`EngineError` after that many
    tokens (0: before the first; at the end of a shorter reply). ``grammar_support`` is what it
    claims to enforce (it enforces nothing); ``sampling`` the optional sampling fields it
    claims to honour (it samples nothing; any other is refused as a real engine refuses it).
    With ``logprobs`` claimed and asked for, token ``n`` of a reply gets the log-probability
    :func:`fake_logprob` (``n``) and, as alternatives, itself then the ids after it, each one
    less likely. Every prompt is recorded in
    :attr:`prompts`, its sampling parameters in :attr:`params`, and :attr:`cancelled` counts
    streams closed before they finished.
    """

    name = "fake"

    def __init__(
        self,
        tokenizer: Tokenizer,
        script: Script = ("Hello!",),
        *,
        context_length: int = 32768,
        delay: float = 0.0,
        first_delay: float = 0.0,
        fail_after: int | None = None,
        text_controls: Sequence[str] | None = None,
        grammar_support: GrammarSupport = "none",
        sampling: Sequence[str] = (),
    ) -> None:
        self._tokenizer = tokenizer
        self._text_controls = list(tokenizer.controls if text_controls is None else text_controls)
        self._script = script
        self._context_length = context_length
        self._calls = 0
        self.delay = delay
        self.first_delay = first_delay
        self.fail_after = fail_after
        self.prompts: list[list[int]] = []
        self.params: list[SamplingParams] = []
        self.cancelled = 0
        self.finished = 0
        self._grammar_support: GrammarSupport = grammar_support
        self._sampling = frozenset(sampling)

    @property
    def grammar_support(self) -> GrammarSupport:
        """As given: the fake replays its script whatever the grammar (it records it)."""
        return self._grammar_support

    @property
    def sampling_support(self) -> frozenset[str]:
        """As given: what the fake claims to honour (it records the parameters)."""
        return self._sampling

    @property
    def context_length(self) -> int:
        return self._context_length

    @property
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer

    def reply_ids(self, reply: Reply) -> list[int]:
        """Token ids of a scripted reply."""
        if not isinstance(reply, str):
            return list(reply)
        return self._tokenizer.encode_pieces(split_controls(reply, self._text_controls))

    def _next_reply(self, prompt: list[int]) -> list[int]:
        if callable(self._script):
            return self.reply_ids(self._script(prompt))
        reply = self._script[self._calls % len(self._script)]
        self._calls += 1
        return self.reply_ids(reply)

    async def stream(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncGenerator[GenerationChunk, None]:
        prompt = list(prompt_ids)
        self.check_fits(len(prompt), 1)
        self.check_grammar(params)
        self.check_sampling(params)
        self.prompts.append(prompt)
        self.params.append(params)
        ids = self._next_reply(prompt)
        budget = min(params.max_tokens, self._context_length - len(prompt))
        stops = set(params.stop_ids)
        done = False
        try:
            if self.first_delay:
                await asyncio.sleep(self.first_delay)  # the prompt read: cancellable
            for n, token in enumerate(ids):
                if self.fail_after is not None and n >= self.fail_after:
                    done = True
                    raise EngineError("the fake engine failed as scripted")
                if n >= budget:
                    break
                if self.delay:
                    await asyncio.sleep(self.delay)
                entries = None if params.logprobs is None else (_entry(n, token, params.logprobs),)
                if token in stops:
                    done = True
                    yield GenerationChunk((token,), finish_reason="stop", logprobs=entries)
                    return
                yield GenerationChunk((token,), logprobs=entries)
            if self.fail_after is not None and len(ids) <= budget:
                done = True
                raise EngineError("the fake engine failed as scripted")
            # Like a real engine: out of budget is "length" even if the reply just ended.
            done = True
            yield GenerationChunk((), finish_reason="length" if len(ids) >= budget else "stop")
        finally:
            if done:
                self.finished += 1
            else:
                self.cancelled += 1


def fake_logprob(n: int) -> float:
    """The fake's log-probability of the ``n``-th token of a reply (0, -0.5, -1, 0, ...)."""
    return -(n % 3) / 2


def _entry(n: int, token: int, k: int) -> TokenLogprob:
    own = fake_logprob(n)
    top = tuple((token + i, own - i) for i in range(k))
    return TokenLogprob(token, own, top)
