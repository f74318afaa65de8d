"""A chat request's sampling fields → the engine's :class:`SamplingParams`, or a 400 naming the
field the engine cannot honour.

A field left out keeps OpenAI's default, which every engine honours by doing nothing (no top-k,
no min-p, no penalties, no bias, no log-probabilities): a request that sets none samples as it
always did. ``top_k`` of -1 (vLLM's way of saying "no limit") is 0 here; ``logprobs: true`` asks
for ``top_logprobs`` alternatives (0 unless given) with each token.
"""

from __future__ import annotations

from ...engines.base import Engine, SamplingParams
from ...grammar import Grammar
from ...tokenizers.base import Tokenizer
from ..http.errors import ApiError
from .schemas import ChatCompletionRequest, SamplingFields


def sampling_params(
    req: ChatCompletionRequest,
    tokenizer: Tokenizer,
    *,
    max_tokens: int,
    stop_ids: tuple[int, ...],
    stop_strings: tuple[str, ...],
    grammar: Grammar | None,
) -> SamplingParams:
    """The engine's parameters for ``req`` (its ``logit_bias`` ids checked against the
    vocabulary: a 400 naming the first one outside it)."""
    return sampling_of(
        req,
        tokenizer,
        logprobs=(req.top_logprobs or 0) if req.logprobs else None,
        max_tokens=max_tokens,
        stop_ids=stop_ids,
        stop_strings=stop_strings,
        grammar=grammar,
    )


def sampling_of(
    req: SamplingFields,
    tokenizer: Tokenizer,
    *,
    logprobs: int | None,
    max_tokens: int,
    stop_ids: tuple[int, ...],
    stop_strings: tuple[str, ...],
    grammar: Grammar | None,
) -> SamplingParams:
    """The engine's parameters for the sampling fields every API shares (chat completions,
    Responses, the legacy completions), with the API's own ``logprobs`` (the alternatives
    per token; ``None``: none)."""
    bias = _logit_bias(req.logit_bias, tokenizer) if req.logit_bias else ()
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        seed=req.seed,
        top_k=max(req.top_k or 0, 0),
        min_p=req.min_p or 0.0,
        presence_penalty=req.presence_penalty or 0.0,
        frequency_penalty=req.frequency_penalty or 0.0,
        repetition_penalty=1.0 if req.repetition_penalty is None else req.repetition_penalty,
        logit_bias=bias,
        logprobs=logprobs,
        stop_ids=stop_ids,
        stop_strings=stop_strings,
        grammar=grammar,
    )


def _logit_bias(bias: dict[str, float], tokenizer: Tokenizer) -> tuple[tuple[int, float], ...]:
    size = tokenizer.vocab_size
    pairs: dict[int, float] = {}
    for key, value in bias.items():
        token = int(key)  # the request's validator let only integers through
        if not 0 <= token < size:
            raise ApiError(
                400,
                f"logit_bias names token {key}, which is not in this model's vocabulary "
                f"(ids 0 to {size - 1}); take ids from POST /tokenize or the model's tokenizer",
                param="logit_bias",
            )
        pairs[token] = value  # "7" and "07" are one token: the last one given counts
    return tuple(sorted(pairs.items()))


def check_supported(engine: Engine, params: SamplingParams) -> None:
    """A 400 naming the first field of ``params`` that ``engine`` cannot honour (rather than
    answering as if it had)."""
    support = engine.sampling_support
    for name in params.optional_fields():
        if name not in support:
            raise ApiError(
                400,
                f"{name} cannot be honoured by this server's engine ({engine.name}); leave it "
                "out, or serve with an engine that takes it (chatfmt's default llama-server, "
                "a llama.cpp server or vLLM)",
                param=name,
                code="unsupported_parameter",
            )


__all__ = ["check_supported", "sampling_of", "sampling_params"]
