"""A request's thinking budget → the driver's :class:`~chatfmt.driver.ThoughtBudget`, or a 400
naming why it cannot be honoured.

The thought is closed as the family writes it (:meth:`Dialect.close_thought`), encoded here
once per request with the model's vocabulary. A format without reasoning meets any budget (its
replies hold no thought): the field is accepted and nothing is done. Refused: a reasoning
format that does not say how its thought closes (a plugin), and a budget together with a
whole-reply grammar (a forced call, ``response_format``), whose grammar would have to be
rebuilt for an answer that starts after a closed thought.
"""

from __future__ import annotations

from ...dialects.base import Dialect
from ...driver import ThoughtBudget
from ...errors import ChatFmtError
from ...grammar import Grammar
from ...segments import Block, BlockEncoder
from ...tokenizers.base import Tokenizer
from ..http.errors import ApiError

#: The request field the errors name (its aliases are llama.cpp's).
PARAM = "thinking_token_budget"


def thought_budget(
    cap: int | None,
    dialect: Dialect,
    tokenizer: Tokenizer,
    grammar: Grammar | None,
    *,
    stop_ids: frozenset[int],
) -> ThoughtBudget | None:
    """The budget to enforce for ``cap`` reasoning tokens (``None``: no cap, or nothing to
    enforce for a format without reasoning)."""
    if cap is None or dialect.reasoning == "never":
        return None
    segments = dialect.close_thought()
    if segments is None:
        raise ApiError(
            400,
            f"the {dialect.name} format does not say how its thought closes, so a thinking "
            f"budget cannot be enforced; leave {PARAM} out",
            param=PARAM,
            code="unsupported_parameter",
        )
    if grammar is not None and not grammar.lazy:
        raise ApiError(
            400,
            f"{PARAM} cannot be combined with a constrained whole reply (tool_choice "
            "'required' or a named function, or response_format) yet; leave one of them out",
            param=PARAM,
            code="unsupported_parameter",
        )
    try:
        ids = BlockEncoder(tokenizer, max_entries=0).encode_block(Block(segments))
    except ChatFmtError as exc:  # a control the model's vocabulary lacks
        raise ApiError(400, f"{PARAM}: {exc}", param=PARAM) from None
    # Never reached by a built-in family: its closing is not the end of the reply.
    if stop_ids.intersection(ids):
        raise ApiError(
            400,
            f"the {dialect.name} format's thought closes with a stop token, so a thinking "
            f"budget would end the reply; leave {PARAM} out",
            param=PARAM,
        )
    return ThoughtBudget(cap, tuple(ids))


__all__ = ["PARAM", "thought_budget"]
