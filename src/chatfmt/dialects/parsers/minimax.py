"""MiniMax-M2's call syntax: XML ``<invoke>`` elements in a ``<minimax:tool_call>`` block.

The model writes its calls after its text as one block::

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    <parameter name="days">3</parameter>
    </invoke>
    <invoke name="get_time">
    </invoke>
    </minimax:tool_call>

A parameter's value is raw text: the template writes a string as it is and any other value as
JSON, so a value gets its type from the tool's schema when the parser has it
(:func:`~.values.typed_value`). A call is complete at ``</invoke>``; one the output ended
inside, or that a block end or another ``<invoke`` interrupted, is incomplete. A block holds
several calls, so a call keeps no raw text of its own. The parser, grammar and renderer are
the engine's (:mod:`chatfmt.dialects.xmlsyntax`), from :data:`MINIMAX_XML`.
"""

from __future__ import annotations

from ..xmlsyntax import XMLSyntax
from .values import json_text

MINIMAX_XML = XMLSyntax(
    block="<minimax:tool_call>\n{calls}</minimax:tool_call>",
    call='<invoke name="{name}">\n{arguments}</invoke>\n',
    argument='<parameter name="{key}">{value}</parameter>\n',
    controls=("<minimax:tool_call>", "</minimax:tool_call>"),
    scalars="json",
    rule="minimax",
)

#: ``value`` as JSON (as the template's ``tojson`` writes it), lone surrogates escaped.
json_value_text = json_text


__all__ = ["MINIMAX_XML", "json_value_text"]
