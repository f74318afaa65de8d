"""The kit's stream parsers, configured by the dialect modules one folder up.

- :mod:`.hermes`: text plus JSON calls in tags, bare, or fenced (ChatML/Qwen, Llama 3);
- :mod:`.glm`: ``<|assistant|>`` segments with a metadata line (ChatGLM3, GLM-4);
- :mod:`.mistral`: ``[TOOL_CALLS]`` and a JSON list, or v11's control-delimited calls;
- :mod:`.harmony`: gpt-oss's channel messages and calls by recipient;
- :mod:`.plain`: formats without a call syntax;
- :mod:`.calls`: what every parser that streams calls shares, the cut-off call rule included.
"""

from .calls import CallStream, cut_problem
from .glm import SegmentParser
from .harmony import HarmonyParser
from .hermes import HermesParser
from .mistral import NamedCallsParser, ToolCallsParser
from .plain import PlainParser

__all__ = [
    "CallStream",
    "HarmonyParser",
    "HermesParser",
    "NamedCallsParser",
    "PlainParser",
    "SegmentParser",
    "ToolCallsParser",
    "cut_problem",
]
