"""The Messages API's ``thinking``: the request's switch (onto the dialect's reasoning switch,
as chat completions' ``enable_thinking``), and the ``signature`` of the thinking blocks chatfmt
writes.

- ``{"type": "enabled", "budget_tokens": N}``: thinking on (a model that cannot think answers
  400, as for chat completions), with at most N reasoning tokens: chatfmt closes the thought
  at the budget as the family writes it and the model answers (chat completions'
  ``thinking_token_budget``); ``max_tokens`` still bounds thought and answer together.
- ``{"type": "disabled"}``: thinking off (400 for a model that always thinks).
- ``{"type": "adaptive"}``: the model decides; chatfmt leaves the format's default (a model
  that cannot think answers without thinking).
- ``display``: ``"summarized"`` (the default) shows the thinking (chatfmt writes no summaries:
  it is the whole thought), ``"omitted"`` leaves the blocks' text empty; the thought is in the
  signature either way, so a client that sends the block back loses nothing.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from ..http.errors import ApiError

_DISPLAYS = ("summarized", "omitted")


def budget_of(config: dict[str, Any] | None) -> int | None:
    """The reasoning budget of a checked ``thinking`` (:func:`thinking_of` first)."""
    if config is None or config.get("type") != "enabled":
        return None
    budget = config.get("budget_tokens")
    return budget if type(budget) is int else None


def thinking_of(config: dict[str, Any] | None) -> tuple[bool | None, bool]:
    """``(thinking on, off or the default (None), whether the reply shows it)``."""
    if config is None:
        return None, True
    kind = config.get("type")
    keys = {"type", "budget_tokens", "display"} if kind == "enabled" else {"type", "display"}
    if kind == "disabled":
        keys = {"type"}
    extra = sorted(set(config) - keys)
    if extra:
        raise ApiError(400, f"unknown thinking field {extra[0]!r}", param=f"thinking.{extra[0]}")
    display = config.get("display")
    if display is not None and display not in _DISPLAYS:
        raise ApiError(
            400, 'thinking.display must be "summarized" or "omitted"', param="thinking.display"
        )
    shown = display != "omitted"
    if kind == "enabled":
        budget = config.get("budget_tokens")
        if type(budget) is not int or budget < 1:
            raise ApiError(
                400,
                'thinking of type "enabled" needs budget_tokens, a positive integer',
                param="thinking.budget_tokens",
            )
        return True, shown
    if kind == "disabled":
        return False, True
    if kind == "adaptive":
        return None, shown
    raise ApiError(
        400, 'thinking type must be "enabled", "adaptive" or "disabled"', param="thinking.type"
    )


#: What chatfmt's signatures start with. Not a cryptographic signature: the thought itself,
#: in one opaque string, so that a thinking block sent back renders its thought even when
#: its text was not shown.
_SIGNATURE_PREFIX = "chatfmt-thinking-v1:"


def signature_of(thinking: str) -> str:
    """The ``signature`` of a thinking block chatfmt writes."""
    return _SIGNATURE_PREFIX + base64.urlsafe_b64encode(thinking.encode()).decode()


def thinking_of_signature(signature: str) -> str:
    """The thought in one of :func:`signature_of`'s strings; ``""`` for another server's
    (Anthropic's signatures are encrypted: there is nothing chatfmt could render)."""
    if not signature.startswith(_SIGNATURE_PREFIX):
        return ""
    try:
        return base64.urlsafe_b64decode(signature[len(_SIGNATURE_PREFIX) :]).decode()
    except (binascii.Error, ValueError):
        return ""
