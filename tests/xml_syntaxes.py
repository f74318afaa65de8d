"""The XML call syntaxes the engine's tests run over: every family's, and a toy one declared
only here (what a new family amounts to: a spec, nothing else)."""

from __future__ import annotations

from chatfmt.dialects.glm45 import GLM46_XML, GLM47_XML
from chatfmt.dialects.minimax import MINIMAX_XML
from chatfmt.dialects.qwen3_coder import QWEN_XML
from chatfmt.dialects.xmlsyntax import XMLSyntax

#: A syntax no model writes.
TOY = XMLSyntax(
    block="<calls>\n{calls}</calls>",
    call='<call name="{name}">\n{arguments}</call>\n',
    argument="<arg:{key}>{value}</arg>\n",
    controls=("<calls>", "</calls>"),
    scalars="json",
    rule="toy",
)
SYNTAXES = {
    "qwen": QWEN_XML,
    "minimax": MINIMAX_XML,
    "glm4.6": GLM46_XML,
    "glm4.7": GLM47_XML,
    "toy": TOY,
}
