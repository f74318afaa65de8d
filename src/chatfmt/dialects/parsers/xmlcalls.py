"""Qwen3-Coder's call syntax (also Qwen3.5's and Nemotron 3's): ``<function=…>``, ``<parameter=…>``.

Each call is a block of its own::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

A parameter's value is raw text: the templates write strings as they are, mappings and lists
as JSON and other scalars as Python writes them (``True``, ``None``), with a newline after the
opening tag and before the closing one; read back, a value gets its type from the tool's JSON
schema (:func:`~.values.typed_value`). A call is complete at ``</function>``; what stands
between it and ``</tool_call>`` is ignored, with a warning. The parser, grammar and renderer
are the engine's (:mod:`chatfmt.dialects.xmlsyntax`), from :data:`QWEN_XML`.
"""

from __future__ import annotations

from ..xmlsyntax import MAX_NAME, XMLSyntax

QWEN_XML = XMLSyntax(
    block="<tool_call>\n{call}</tool_call>",
    call="<function={name}>\n{arguments}</function>\n",
    argument="<parameter={key}>\n{value}\n</parameter>\n",
    controls=("<tool_call>", "</tool_call>"),
    scalars="python",
)

__all__ = ["MAX_NAME", "QWEN_XML"]
