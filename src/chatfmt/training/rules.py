"""How an assistant turn ends, per family: which token stops the reply the model generates.

The trained tokens of a turn are what the model produces after its generation prompt (see
:mod:`.render`). Most families write the token that stopped generation into their history
(ChatML's ``<|im_end|>``, Llama 3's ``<|eot_id|>``, Mistral's ``</s>``), so the reply carries it
and nothing here is needed. Two kinds of family do not, and this module says what to do there:

- the **GLM family** (``chatglm3``, ``glm4``, ``glm4.6``, ``glm4.7``) writes no end into an
  assistant turn: the model stops by writing the *next* role token (``<|user|>``,
  ``<|observation|>``), or its end-of-sequence token after the last turn. ChatGLM3's own
  fine-tuning code trains exactly those: the role token after an assistant turn, and
  ``</s>`` appended after the last one;
- **harmony** (gpt-oss) writes ``<|end|>`` into its history where the model emitted
  ``<|return|>`` (its final answer's stop), as the format's own rule for the history says.

Each family declares its exception on the dialect (``Dialect.end_rule``, an
:class:`~chatfmt.dialects.base.EndRule`), so a dialect from another package is trained by its
own rule; one that declares none gets the generic :func:`closing_token` (the last stop token its
tokenizer has).
"""

from __future__ import annotations

from ..dialects.base import Dialect, EndRule
from ..tokenizers.base import Tokenizer


def end_rule(dialect: Dialect) -> EndRule:
    """The :class:`EndRule` ``dialect`` declares (an empty one for most families)."""
    return dialect.end_rule


def stop_ids(dialect: Dialect, tokenizer: Tokenizer) -> frozenset[int]:
    """The ids that end an assistant turn, for this tokenizer."""
    return frozenset(dialect.stop_ids(tokenizer))


def closing_token(dialect: Dialect, tokenizer: Tokenizer) -> int | None:
    """The id appended after a last reply that holds no stop token: the family's own
    end-of-sequence token where its :class:`EndRule` names one, else the last of the dialect's
    stop tokens that the tokenizer has (formats list their end-of-sequence stop last);
    ``None`` when it has none."""
    rule = end_rule(dialect)
    if rule.closing is not None and tokenizer.has_control(rule.closing):
        return tokenizer.control_id(rule.closing)
    present = [t for t in dialect.stop_controls if tokenizer.has_control(t)]
    return tokenizer.control_id(present[-1]) if present else None
