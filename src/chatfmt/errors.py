"""Exceptions raised by chatfmt.

Every error says what is wrong and what to do about it. The tree::

    ChatFmtError
    ├── ValidationError        a conversation breaks a rule of its dialect (index, rule, fix)
    ├── TokenizerError         unknown tokenizer name, unreadable file, missing control token
    ├── ContextOverflowError   the prompt does not fit the context window (with the numbers)
    ├── ParseError             strict parsing of model output failed (lenient parsing never raises)
    ├── ToolError              a tool could not be registered or called
    ├── InterpreterError       the code interpreter could not run code
    └── EngineError            the model runtime or remote engine failed
    MissingDependencyError (ImportError)  an optional extra is not installed
"""

from __future__ import annotations


class ChatFmtError(Exception):
    """Base class of every error chatfmt raises on purpose."""


class ValidationError(ChatFmtError):
    """A conversation breaks a rule of the dialect it is rendered with.

    ``index`` is the position of the offending message (``None`` for the whole conversation).
    """

    def __init__(self, message: str, *, index: int | None = None, rule: str = "") -> None:
        self.index = index
        self.rule = rule
        prefix = f"message {index}: " if index is not None else ""
        super().__init__(prefix + message)


class TokenizerError(ChatFmtError):
    """A tokenizer could not be found, loaded, or lacks a control token a dialect needs."""


class ContextOverflowError(ChatFmtError):
    """The conversation does not fit the context window even after dropping old turns."""

    def __init__(self, message: str, *, prompt_tokens: int, context: int, reserve: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.context = context
        self.reserve = reserve
        super().__init__(message)


class ParseError(ChatFmtError):
    """Model output could not be parsed in strict mode."""


class ToolError(ChatFmtError):
    """A tool could not be registered, described, or called."""


class InterpreterError(ChatFmtError):
    """The code interpreter could not start or run code."""


class EngineError(ChatFmtError):
    """The model runtime or remote engine failed or is unreachable."""


class MissingDependencyError(ImportError):
    """An optional dependency is missing; the message names the extra to install."""
