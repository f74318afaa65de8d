"""chatfmt: chat formats of open models, rendered to exact token ids and parsed back safely.

>>> import chatfmt
>>> tok = chatfmt.load_tokenizer("cl100k_base")
>>> chatml = chatfmt.get_dialect("chatml")
>>> chatml.render([{"role": "user", "content": "Hello"}], tok).ids[:4]
[100264, 882, 198, 9906]
"""

from __future__ import annotations

from .context import Budget, FitResult
from .dialects import get_dialect, list_dialects
from .dialects.base import Dialect, StreamParser
from .errors import (
    ChatFmtError,
    ContextOverflowError,
    ParseError,
    TokenizerError,
    ValidationError,
)
from .events import ParseResult
from .messages import Conversation, Message, Tool, ToolCall, from_openai
from .segments import RenderedPrompt
from .tokenizers import Tokenizer, load_tokenizer

__version__ = "0.1.0"

__all__ = [
    "Budget",
    "ChatFmtError",
    "ContextOverflowError",
    "Conversation",
    "Dialect",
    "FitResult",
    "Message",
    "ParseError",
    "ParseResult",
    "RenderedPrompt",
    "StreamParser",
    "Tokenizer",
    "TokenizerError",
    "Tool",
    "ToolCall",
    "ValidationError",
    "__version__",
    "from_openai",
    "get_dialect",
    "list_dialects",
    "load_tokenizer",
]

# Reprs and docs say chatfmt.X, not the private module it is defined in.
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type):
        _obj.__module__ = "chatfmt"
del _name, _obj
