"""Mistral instruct v11 (Mistral Small 3.2, Magistral, Devstral): v7's layout with each call
written between controls instead of as a JSON list.

A reply with calls is ``text[TOOL_CALLS]name[CALL_ID]id[ARGS]{arguments}`` once per call, as
``mistral-common``'s ``InstructTokenizerV11`` encodes it (the arguments re-serialised by
``json.dumps(…, ensure_ascii=False)``, the id left out when it is ``"null"``). Models write calls
without ``[CALL_ID]`` too; the parser takes both. Everything else (system prompts in place,
``[TOOL_RESULTS]id[TOOL_CONTENT]result[/TOOL_RESULTS]``, tools before the last user turn) is
:class:`~chatfmt.dialects.mistral.MistralV7`'s. See ``docs/formats/mistral.md``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from ..grammar import CallRules, Grammar, ToolLike, Trigger
from ..grammar.gbnf import literal
from ..messages import ToolCall
from ..segments import BlockBuilder, Control, Segment, Text
from .base import StreamParser
from .fingerprint import Fingerprint
from .mistral import (
    CALL_ID_PATTERN,
    CALLS,
    FUNCTION_NAME,
    MISTRAL_MARKUP,
    MistralV7,
    dumps,
    new_mistral_call_id,
)
from .parsers.mistral import NamedCallsParser

CALL_ID, ARGS = "[CALL_ID]", "[ARGS]"


def _has_id(call_id: str) -> bool:
    return bool(call_id) and call_id != "null"


class MistralV11(MistralV7):
    """Instruct v11: byte-exact with ``mistral-common``'s ``InstructTokenizerV11``."""

    name = "mistral-v11"
    fingerprint = Fingerprint(
        "Mistral instruct v11 ([TOOL_CALLS]name[ARGS]… calls, [SYSTEM_PROMPT])",
        requires=("[INST]", "[/INST]", "[TOOL_CALLS]", "[ARGS]"),
        tokens=MISTRAL_MARKUP,
        excludes=("<<SYS>>",),
        precedence=100,
    )
    controls = (*MistralV7.controls, CALL_ID, ARGS)

    def _render_calls(self, b: BlockBuilder, calls: Sequence[ToolCall]) -> None:
        for call in calls:
            b.control(CALLS)
            b.text(call.name)
            if _has_id(call.id):
                b.control(CALL_ID)
                b.text(call.id)
            b.control(ARGS)
            b.text(dumps(json.loads(call.arguments or "{}")))

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> StreamParser:
        """A fresh parser; a call keeps the 9-character id the model wrote, else gets a new
        one (from ``id_factory`` when given)."""
        return NamedCallsParser(
            id_factory=id_factory or new_mistral_call_id,
            stop_controls=self.stop_controls,
            controls=(CALLS, CALL_ID, ARGS),
            valid_name=lambda name: bool(FUNCTION_NAME.match(name)),
            valid_id=lambda call_id: bool(CALL_ID_PATTERN.match(call_id)),
        )

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        """``[TOOL_CALLS]`` + a declared name (+ ``[CALL_ID]`` and 9 letters or digits) +
        ``[ARGS]`` + the arguments, once or more; when lazy, switched on by ``[TOOL_CALLS]``."""
        c = CallRules(tools)
        call_id = c.rules.add("call-id", f"({literal(CALL_ID)} [a-zA-Z0-9]{{9}})?")
        call = c.any_call(
            lambda t: (
                f"{literal(CALLS)} {literal(t.name)} {call_id} {literal(ARGS)} {c.arguments(t)}"
            )
        )
        body = c.many(call, single=single)
        triggers = () if required else (Trigger("word", CALLS),)
        return c.grammar(body, triggers=triggers, preserved=(CALLS, CALL_ID, ARGS))

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """``[TOOL_CALLS]``, and the name and ``[ARGS]`` when the call is named."""
        if name is None:
            return (Control(CALLS),)
        return (Control(CALLS), Text(name), Control(ARGS))
