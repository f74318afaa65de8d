"""chatfmt: chat formats of open models, rendered to exact token ids and parsed back safely.

>>> import chatfmt
>>> tok = chatfmt.load_tokenizer("cl100k_base")
>>> chatml = chatfmt.get_dialect("chatml")
>>> chatml.render([{"role": "user", "content": "Hello"}], tok).ids[:4]
[100264, 882, 198, 9906]

The data flow, one stage a module: messages → dialect (render) → segments → tokenizer → engine
→ decoding (:class:`TurnDecoder`: ids or text → the dialect's parser → events) → agent, server.
"""

from __future__ import annotations

from .context import Budget, FitResult
from .decoding import TurnDecoder
from .dialects import get_dialect, list_dialects, register_dialect
from .dialects.base import Dialect, StreamParser
from .errors import (
    ChatFmtError,
    ContextOverflowError,
    ParseError,
    TokenizerError,
    ValidationError,
)
from .events import (
    Event,
    Finish,
    IncompleteCall,
    ParseResult,
    ReasoningDelta,
    SegmentEnd,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from .messages import Conversation, Message, Tool, ToolCall, from_openai
from .segments import RenderedPrompt
from .tokenizers import Tokenizer, list_tokenizers, load_tokenizer

__version__ = "0.1.0"

__all__ = [
    "Budget",
    "ChatFmtError",
    "ContextOverflowError",
    "Conversation",
    "Dialect",
    "Event",
    "Finish",
    "FitResult",
    "IncompleteCall",
    "Message",
    "ParseError",
    "ParseResult",
    "ReasoningDelta",
    "RenderedPrompt",
    "SegmentEnd",
    "StreamParser",
    "TextDelta",
    "Tokenizer",
    "TokenizerError",
    "Tool",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallEnd",
    "ToolCallStart",
    "TurnDecoder",
    "ValidationError",
    "__version__",
    "from_openai",
    "get_dialect",
    "list_dialects",
    "list_tokenizers",
    "load_tokenizer",
    "register_dialect",
]
