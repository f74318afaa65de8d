"""GLM-4.5+'s call syntax: ``<tool_call>name`` with ``<arg_key>`` / ``<arg_value>`` pairs.

GLM-4.5 and 4.6 write each call on lines of its own, GLM-4.7 writes it compact::

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    </tool_call>

    <tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>

One parser reads both: whitespace between the elements of a call is layout. The name is bare
(up to the next tag; whitespace, quotes, angle brackets or backslashes make it none, so JSON
in the tags is text). A value is raw text (the templates write a string as it is and anything
else as JSON), typed by the tool's schema (:func:`~.values.typed_value`). The text around
calls is the message's content, which the templates write stripped (``content.strip()``).
The parser, grammar and renderer are the engine's (:mod:`chatfmt.dialects.xmlsyntax`), from
:data:`GLM46_XML` and :data:`GLM47_XML`.
"""

from __future__ import annotations

from dataclasses import replace

from ..xmlsyntax import NameRule, XMLSyntax
from .deepseek import valid_name

#: The tags of a call: control tokens of the GLM-4.5+ vocabulary.
CALL_TAGS = (
    "<tool_call>",
    "</tool_call>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
)

GLM47_XML = XMLSyntax(
    block="<tool_call>{call}</tool_call>",
    call="{name}{arguments}",
    argument="<arg_key>{key}</arg_key><arg_value>{value}</arg_value>",
    controls=CALL_TAGS,
    scalars="json",
    # A name is a bare word; a key keeps its whitespace and may hold ">".
    name_rule=NameRule(forbidden="", valid=valid_name),
    key_rule=NameRule(forbidden="<\n", strip=False),
    space=None,  # the templates strip with Python's str.strip()
    trim=True,
    rule="glm",
    words=("argument", "argument key"),
)
#: GLM-4.5 and 4.6: the same calls with a newline after each element.
GLM46_XML = replace(
    GLM47_XML,
    call="{name}\n{arguments}",
    argument="<arg_key>{key}</arg_key>\n<arg_value>{value}</arg_value>\n",
)

__all__ = ["CALL_TAGS", "GLM46_XML", "GLM47_XML"]
