"""The sampling fields in each remote server's own words, and the log-probabilities it returns.

Only the fields a request sets away from "off" are sent (:meth:`SamplingParams.optional_fields`),
so a request that sets none sends what it always did. By server kind:

- **llama-server** (``/completion``): ``top_k``, ``min_p``, ``repeat_penalty``,
  ``presence_penalty``, ``frequency_penalty``, ``logit_bias`` as ``[[id, bias], ...]``, and
  ``n_probs`` for log-probabilities (at least 1: 0 reports none); each event then carries
  ``completion_probabilities`` (``id``, ``logprob``, ``top_logprobs``).
- **vLLM** (``/v1/completions``): ``top_k``, ``min_p``, ``repetition_penalty``, the two
  penalties, ``logit_bias`` as ``{"id": bias}``, ``logprobs: k`` with
  ``return_tokens_as_token_ids`` (tokens and alternatives named ``token_id:N``).
- **llama-cpp-python's server**: as llama-server's names, ``logit_bias`` as ``{"id": bias}``;
  no log-probabilities (it names tokens by their text, not their ids).
- **any other OpenAI-compatible server**: OpenAI's own fields only (the two penalties and
  ``logit_bias``); ``top_k``, ``min_p`` and the repetition penalty are refused, since such a
  server might ignore them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .base import SamplingParams, TokenLogprob

ALL_FIELDS = frozenset(
    {
        "top_k",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "logit_bias",
        "logprobs",
    }
)
#: OpenAI's own: what any OpenAI-compatible completions server takes.
_OPENAI_FIELDS = frozenset({"presence_penalty", "frequency_penalty", "logit_bias"})

#: What each server kind honours (``None``: not detected yet, so only OpenAI's fields).
SUPPORT: dict[str | None, frozenset[str]] = {
    "llama.cpp": ALL_FIELDS,
    "vllm": ALL_FIELDS,
    "llama-cpp-python": ALL_FIELDS - {"logprobs"},
    "openai": _OPENAI_FIELDS,
    None: _OPENAI_FIELDS,
}

#: llama.cpp's own names for the fields that differ.
_LLAMA_NAMES = {"repetition_penalty": "repeat_penalty"}


def sampling_fields(params: SamplingParams, flavor: str | None) -> dict[str, Any]:
    """The request fields of the optional sampling ``params`` set, for a server of ``flavor``
    (the caller checked that it honours them)."""
    fields: dict[str, Any] = {}
    llama = flavor in ("llama.cpp", "llama-cpp-python")
    for name in params.optional_fields():
        if name == "logit_bias":
            if flavor == "llama.cpp":
                fields["logit_bias"] = [[token, bias] for token, bias in params.logit_bias]
            else:
                fields["logit_bias"] = {str(token): bias for token, bias in params.logit_bias}
        elif name == "logprobs":
            k = params.logprobs or 0
            if flavor == "llama.cpp":
                # n_probs 0 reports nothing: one alternative gives the sampled token's own.
                fields["n_probs"] = max(k, 1)
            else:
                fields["logprobs"] = k
                fields["return_tokens_as_token_ids"] = True
        else:
            key = _LLAMA_NAMES.get(name, name) if llama else name
            fields[key] = getattr(params, name)
    return fields


def native_logprobs(
    data: dict[str, Any], k: int, *, whole: bytes | None = None
) -> tuple[TokenLogprob, ...]:
    """The entries of a llama-server event's ``completion_probabilities``, ``k`` alternatives
    each. ``whole``: the bytes the event stands for, when it carries ids that it has no entry
    for (a character split over tokens): its one entry stands for all of them."""
    entries = data.get("completion_probabilities")
    if not isinstance(entries, list):
        return ()
    out: list[TokenLogprob] = []
    for entry in entries:
        if not isinstance(entry, dict) or type(entry.get("id")) is not int:
            continue
        top = _pairs(entry.get("top_logprobs"), k)
        out.append(TokenLogprob(entry["id"], _number(entry.get("logprob")), top, whole))
    return tuple(out)


def _pairs(alternatives: Any, k: int) -> tuple[tuple[int, float], ...]:
    if not k or not isinstance(alternatives, list):
        return ()
    pairs = [
        (alt["id"], _number(alt.get("logprob")))
        for alt in alternatives
        if isinstance(alt, dict) and type(alt.get("id")) is int
    ]
    pairs.sort(key=lambda p: -p[1])
    return tuple(pairs[:k])


def openai_logprobs(choice: dict[str, Any], ids: Sequence[int], k: int) -> tuple[TokenLogprob, ...]:
    """The entries of a completions chunk's ``logprobs`` (``tokens``, ``token_logprobs``,
    ``top_logprobs``), tokens named ``token_id:N`` (vLLM's ``return_tokens_as_token_ids``);
    ``ids``: the chunk's token ids, for tokens named otherwise."""
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        return ()
    values = logprobs.get("token_logprobs")
    if not isinstance(values, list):
        return ()
    tokens = logprobs.get("tokens")
    tops = logprobs.get("top_logprobs")
    out: list[TokenLogprob] = []
    for i, value in enumerate(values):
        name = tokens[i] if isinstance(tokens, list) and i < len(tokens) else None
        token = _token_id(name)
        if token is None:
            if i >= len(ids):
                continue
            token = ids[i]
        top: tuple[tuple[int, float], ...] = ()
        alternatives = tops[i] if isinstance(tops, list) and i < len(tops) else None
        if k and isinstance(alternatives, dict):
            pairs = [(_token_id(t), _number(lp)) for t, lp in alternatives.items()]
            known = [(t, lp) for t, lp in pairs if t is not None]
            known.sort(key=lambda p: -p[1])
            top = tuple(known[:k])
        out.append(TokenLogprob(token, _number(value), top))
    return tuple(out)


def _token_id(name: Any) -> int | None:
    if isinstance(name, str) and name.startswith("token_id:"):
        try:
            return int(name.removeprefix("token_id:"))
        except ValueError:
            return None
    return None


def _number(value: Any) -> float:
    """A log-probability as a float (``-inf`` for what is missing or not a number)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        return number if not math.isnan(number) else -math.inf
    return -math.inf


__all__ = ["ALL_FIELDS", "SUPPORT", "native_logprobs", "openai_logprobs", "sampling_fields"]
