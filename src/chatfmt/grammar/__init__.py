"""Constrained decoding: GBNF grammars for JSON replies and for each dialect's tool calls.

- :func:`json_grammar` — a reply that is one JSON value of a schema (``response_format``).
- :meth:`Dialect.call_grammar <chatfmt.dialects.base.Dialect.call_grammar>` — calls of the
  declared tools in that dialect's syntax; lazy (free text until a call starts) or required.
- :class:`Grammar` — the GBNF text, its triggers, and the control tokens it spells; what an
  engine needs (llama.cpp's ``grammar`` / ``grammar_lazy`` / ``grammar_triggers``).
"""

from ..errors import SchemaError
from .calls import ANY_OBJECT, WORDS, CallRules, ToolLike, json_grammar, thought_first
from .gbnf import Grammar, Rules, Trigger
from .schema import SchemaConverter

__all__ = [
    "ANY_OBJECT",
    "WORDS",
    "CallRules",
    "Grammar",
    "Rules",
    "SchemaConverter",
    "SchemaError",
    "ToolLike",
    "Trigger",
    "json_grammar",
    "thought_first",
]
