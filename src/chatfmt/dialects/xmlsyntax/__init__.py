"""XML-ish tool calls, one engine for every family that writes them.

A family declares its syntax once (:class:`XMLSyntax`: the layouts its chat template writes,
its control tags, how values are written); from it come the streaming parser
(:class:`XMLSyntaxParser`), the call grammar (:func:`call_grammar`) and the renderer
(:meth:`XMLSyntax.pieces`), so the three cannot disagree. Each family's syntax
is declared in its own module: ``qwen3_coder.QWEN_XML`` (Qwen3-Coder, Qwen3.5, Nemotron 3),
``minimax.MINIMAX_XML`` (MiniMax-M2), ``glm45.GLM46_XML`` / ``GLM47_XML`` (GLM-4.5 to 4.7).
"""

from .grammar import call_grammar, value_rule
from .parser import XMLSyntaxParser
from .spec import MAX_NAME, NameRule, XMLSyntax

__all__ = [
    "MAX_NAME",
    "NameRule",
    "XMLSyntax",
    "XMLSyntaxParser",
    "call_grammar",
    "value_rule",
]
