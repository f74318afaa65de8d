"""The engine interface: token ids in, a stream of generated token ids out.

An engine knows nothing about chat formats. The layers above render the prompt with a dialect,
hand the ids to :meth:`Engine.stream`, and parse what comes back. Stopping iteration (``break``,
``aclose()``, or cancelling the consuming task) stops generation.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ..errors import EngineError
from ..grammar import Grammar
from ..tokenizers.base import Tokenizer

if TYPE_CHECKING:
    from ..tokenizers.gguf import GGUFTokenizer

#: What an engine can constrain: nothing, whole completions, or also lazily (after a trigger).
GrammarSupport = Literal["none", "full", "lazy"]

EngineFinish = Literal["stop", "length"]


def model_file(model_path: str | os.PathLike[str]) -> Path:
    """``model_path`` expanded, or :class:`EngineError` naming the fix if no such file."""
    path = Path(model_path).expanduser()
    if not path.is_file():
        raise EngineError(f"model file {str(path)!r} not found; pass a path to a .gguf file")
    return path


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to sample one completion.

    ``temperature == 0`` is greedy decoding. ``stop_ids`` end generation when produced (the id
    is yielded, so a parser sees the stop token). ``stop_strings`` are passed to remote servers
    that take them (not llama-server: see :mod:`chatfmt.engines.remote`); callers that need
    stop strings apply them to the text themselves, as the server's decoder does.
    """

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    #: Sample among the ``top_k`` likeliest tokens only (0: no limit).
    top_k: int = 0
    #: Drop tokens whose probability is below ``min_p`` times the likeliest one's (0: off).
    min_p: float = 0.0
    #: OpenAI's penalties (-2..2, 0: off): subtracted from a token's logit once it appeared
    #: (presence) and per appearance (frequency) in the completion.
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    #: The multiplicative penalty of vLLM and llama.cpp (1: off; > 1 discourages repeats).
    repetition_penalty: float = 1.0
    #: ``(token id, bias)`` pairs added to the logits (-100 bans a token, 100 forces it).
    logit_bias: tuple[tuple[int, float], ...] = ()
    #: Report each sampled token's log-probability and the ``logprobs`` likeliest
    #: alternatives at its position (0: the sampled token's only; ``None``: none).
    logprobs: int | None = None
    stop_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()
    #: Constrain sampling to this grammar (see :attr:`Engine.grammar_support`; an engine
    #: that cannot enforce it raises :class:`EngineError` instead of ignoring it).
    grammar: Grammar | None = None

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0: no limit), got {self.top_k}")
        if not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2 <= getattr(self, name) <= 2:
                raise ValueError(f"{name} must be in [-2, 2], got {getattr(self, name)}")
        if self.repetition_penalty <= 0:
            raise ValueError(
                f"repetition_penalty must be > 0 (1: off), got {self.repetition_penalty}"
            )
        if self.logprobs is not None and not 0 <= self.logprobs <= 20:
            raise ValueError(f"logprobs must be in [0, 20], got {self.logprobs}")

    def optional_fields(self) -> tuple[str, ...]:
        """The fields of :data:`OPTIONAL_SAMPLING` this request sets away from "off": what an
        engine must honour (:meth:`Engine.check_sampling`) or refuse."""
        return tuple(name for name, off in OPTIONAL_SAMPLING.items() if getattr(self, name) != off)


#: The sampling fields not every engine can honour, each with its "off" value (the default,
#: which every engine honours by doing nothing): temperature, top_p, seed, the stops and
#: ``max_tokens`` every engine takes.
OPTIONAL_SAMPLING: dict[str, object] = {
    "top_k": 0,
    "min_p": 0.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "repetition_penalty": 1.0,
    "logit_bias": (),
    "logprobs": None,
}


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One generated token with its log-probability, as the engine reports it (its raw
    distribution, before sampling): ``top`` holds the likeliest ``(id, logprob)`` at its
    position, best first (as many as :attr:`SamplingParams.logprobs` asked for).

    ``text`` is ``None`` when the entry stands for its own token's bytes; otherwise it is the
    bytes it stands for (llama-server reports one entry for a character split over several
    tokens: the last token's, with the whole character's bytes).
    """

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()
    text: bytes | None = None


@dataclass(frozen=True, slots=True)
class GenerationChunk:
    """Newly generated ids; ``text`` when the engine also reports their text.

    The last chunk of a stream has ``finish_reason`` set (it may carry no ids). ``exact_ids``
    is False when the engine only had text and re-encoded it: such ids count tokens, but the
    text is what to decode (re-encoding a fragment can differ from what the model generated,
    e.g. SentencePiece puts a space before every separately encoded piece).
    """

    token_ids: tuple[int, ...]
    text: str | None = None
    finish_reason: EngineFinish | None = None
    exact_ids: bool = True
    #: How many prompt tokens the engine took from its prompt cache, where it says (llama.cpp
    #: does, with the last chunk); ``None``: not reported.
    cached_tokens: int | None = None
    #: The tokens' log-probabilities, in order, when :attr:`SamplingParams.logprobs` asked for
    #: them (``None`` otherwise: nothing is built per token for a request that did not ask).
    logprobs: tuple[TokenLogprob, ...] | None = None


def merge_chunks(chunks: Sequence[GenerationChunk]) -> list[GenerationChunk]:
    """Consecutive chunks of one stream as few as can carry the same: ids and text joined
    while ``exact_ids`` agrees, up to a chunk that finishes. A reader that received several
    at once hands them on as one (one decode step, one delta to the client)."""
    out: list[GenerationChunk] = []
    for chunk in chunks:
        last = out[-1] if out else None
        if last is None or last.finish_reason is not None or last.exact_ids != chunk.exact_ids:
            out.append(chunk)
            continue
        text = (last.text or "") + (chunk.text or "")
        cached = chunk.cached_tokens if chunk.cached_tokens is not None else last.cached_tokens
        logprobs = last.logprobs
        if chunk.logprobs is not None:
            logprobs = chunk.logprobs if logprobs is None else logprobs + chunk.logprobs
        out[-1] = GenerationChunk(
            last.token_ids + chunk.token_ids,
            text or None,
            chunk.finish_reason,
            chunk.exact_ids,
            cached,
            logprobs,
        )
    return out


@dataclass(slots=True)
class Generation:
    """A whole completion, as :meth:`Engine.generate` returns it."""

    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: EngineFinish = "stop"
    #: Every token's log-probability, when the request asked for them.
    logprobs: list[TokenLogprob] | None = None


class Engine(ABC):
    """A model runtime that continues a prompt given as token ids."""

    #: A short description for logs and ``/health`` (``"local:/path/model.gguf"``).
    name: str = "engine"

    @property
    def grammar_support(self) -> GrammarSupport:
        """Which :attr:`SamplingParams.grammar` this engine enforces while sampling:
        ``"none"``, ``"full"`` (a grammar for the whole completion) or ``"lazy"`` (also
        grammars switched on by triggers, as tool calls in free text need)."""
        return "none"

    def check_grammar(self, params: SamplingParams) -> None:
        """Raise :class:`EngineError` if ``params.grammar`` is one this engine cannot enforce."""
        g = params.grammar
        if g is None:
            return
        support = self.grammar_support
        if support == "none" or (g.lazy and support != "lazy"):
            kind = "a lazy grammar (tool calls in free text)" if g.lazy else "a grammar"
            raise EngineError(
                f"this engine ({self.name}) cannot enforce {kind}; use llama.cpp's "
                "llama-server (chatfmt's default engine, or a remote one)"
            )

    @property
    @abstractmethod
    def context_length(self) -> int:
        """Prompt plus completion tokens the engine can hold."""

    @property
    @abstractmethod
    def tokenizer(self) -> Tokenizer:
        """A chatfmt tokenizer for the model's vocabulary."""

    @abstractmethod
    def stream(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncGenerator[GenerationChunk, None]:
        """Generate after ``prompt_ids``; raises :class:`EngineError` when the runtime fails.

        Implementations are async generators: closing the iterator stops generation.
        """

    @property
    def sampling_support(self) -> frozenset[str]:
        """Which of :data:`OPTIONAL_SAMPLING` this engine honours (an engine that cannot
        honour a field a request sets refuses it: :meth:`check_sampling`)."""
        return frozenset()

    def check_sampling(self, params: SamplingParams) -> None:
        """Raise :class:`EngineError` naming the first field ``params`` sets that this engine
        cannot honour (never a field silently left out)."""
        support = self.sampling_support
        for name in params.optional_fields():
            if name not in support:
                raise EngineError(
                    f"this engine ({self.name}) cannot honour {name}; leave it out, or use "
                    "an engine that takes it (llama-server, chatfmt's default, or vLLM)"
                )

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        """Run :meth:`stream` to the end and collect the result."""
        out = Generation()
        texts: list[str] = []
        stream = self.stream(prompt_ids, params)
        try:
            async for chunk in stream:
                out.token_ids.extend(chunk.token_ids)
                if chunk.text:
                    texts.append(chunk.text)
                if chunk.logprobs is not None:
                    if out.logprobs is None:
                        out.logprobs = []
                    out.logprobs.extend(chunk.logprobs)
                if chunk.finish_reason is not None:
                    out.finish_reason = chunk.finish_reason
        finally:
            await stream.aclose()
        out.text = "".join(texts)
        return out

    async def health(self) -> bool:
        """Whether the engine can serve requests now."""
        return True

    async def aclose(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release the runtime (threads, connections, model memory)."""

    def prepare(self, prompt_ids: Sequence[int], params: SamplingParams) -> tuple[list[int], int]:
        """The prompt as a list and the completion budget: ``max_tokens`` capped by the room
        left in the context. Raises :class:`EngineError` for an empty prompt or no room."""
        prompt = list(prompt_ids)
        if not prompt:
            raise EngineError("the prompt is empty; render at least one message")
        budget = min(params.max_tokens, self.context_length - len(prompt))
        if budget < 1:
            self.check_fits(len(prompt), params.max_tokens)
        return prompt, budget

    def check_fits(self, n_prompt: int, max_tokens: int) -> None:
        """Raise :class:`EngineError` if the prompt plus ``max_tokens`` exceed the context."""
        if n_prompt + max_tokens > self.context_length:
            raise EngineError(
                f"the prompt has {n_prompt} tokens and max_tokens is {max_tokens}, which "
                f"exceeds the context length {self.context_length}; shorten the conversation "
                "or lower max_tokens"
            )


class GGUFEngine(Engine):
    """An engine of one GGUF model run by llama.cpp (in this process or in a child): its
    vocabulary read from the model, and the context it serves (:meth:`_serve_context`)."""

    _tokenizer: GGUFTokenizer
    _context_length: int

    def _serve_context(self, asked: int | None, allocated: int, train: int) -> None:
        """Serve ``allocated`` tokens of context (those ``asked`` for, or a default), capped
        at the model's training context ``train`` when none were asked for (``train`` 0 or
        less: the model does not say)."""
        self._context_length = allocated if asked or train <= 0 else min(allocated, train)

    @property
    def context_length(self) -> int:
        return self._context_length

    @property
    def tokenizer(self) -> GGUFTokenizer:
        return self._tokenizer
