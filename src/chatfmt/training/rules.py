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

A dialect with neither property needs no entry; one whose history drops its stop token gets
the generic :func:`closing_token` (the last stop token its tokenizer has).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..dialects.base import Dialect
from ..tokenizers.base import Tokenizer


@dataclass(frozen=True, slots=True)
class EndRule:
    """A family's exception to "the reply carries its own stop token".

    ``closing``: the stop token appended (and trained) after the last trained reply when that
    reply holds no stop token (``None``: the generic choice of :func:`closing_token`).
    ``history_end``/``served_end``: the history writes ``history_end`` where the model emitted
    ``served_end``; the last reply is trained with ``served_end`` in its place, an earlier one
    keeps ``history_end`` (what a later turn's prompt shows) without loss on it.
    """

    closing: str | None = None
    history_end: str | None = None
    served_end: str | None = None


#: The families with an exception, by dialect name.
END_RULES: dict[str, EndRule] = {
    "chatglm3": EndRule(closing="</s>"),
    "glm4": EndRule(closing="<|endoftext|>"),
    "glm4.6": EndRule(closing="<|endoftext|>"),
    "glm4.7": EndRule(closing="<|endoftext|>"),
    "harmony": EndRule(history_end="<|end|>", served_end="<|return|>"),
}


def end_rule(dialect: Dialect) -> EndRule:
    """The :class:`EndRule` of ``dialect`` (an empty one for most families)."""
    return END_RULES.get(dialect.name, EndRule())


def stop_ids(dialect: Dialect, tokenizer: Tokenizer) -> frozenset[int]:
    """The ids that end an assistant turn, for this tokenizer."""
    return frozenset(dialect.stop_ids(tokenizer))


def closing_token(dialect: Dialect, tokenizer: Tokenizer) -> int | None:
    """The id appended after a last reply that holds no stop token: the family's own
    end-of-sequence token where :data:`END_RULES` names one, else the last of the dialect's
    stop tokens that the tokenizer has (formats list their end-of-sequence stop last);
    ``None`` when it has none."""
    rule = end_rule(dialect)
    if rule.closing is not None and tokenizer.has_control(rule.closing):
        return tokenizer.control_id(rule.closing)
    present = [t for t in dialect.stop_controls if tokenizer.has_control(t)]
    return tokenizer.control_id(present[-1]) if present else None
