"""Exceptions raised by chatfmt.

Every error says what is wrong and what to do about it. The tree::

    ChatFmtError
    ├── ValidationError (ValueError)   a message, tool or conversation breaks a rule (index, rule)
    ├── UnknownDialectError (KeyError) no dialect has that name (the error lists the names)
    │   └── DialectPluginError         a dialect plugin failed to load, or takes a name in use
    ├── ReasoningOptionError (ValueError)  thinking or an effort the family cannot do (``option``)
    ├── TokenizerError                 unknown tokenizer, unreadable file, missing control token
    ├── ContextOverflowError           the prompt does not fit the context window (the numbers)
    ├── ParseError                     model output is not what a strict reader expects
    │   └── PyCallError                text is not a literal-only ``tool_call(...)`` (``reason``)
    ├── SchemaError (ValueError)       a JSON schema a grammar cannot enforce (strict) or read
    │   └── SchemaTooDeep              nested past the converter's depth limit
    ├── ToolError                      a tool could not be registered or called
    ├── InterpreterError               the code interpreter could not run code
    ├── EngineError                    the model runtime or remote engine failed
    │   ├── EngineUnavailableError     it cannot be reached or is not ready (retry later)
    │   └── RemoteHTTPError            a remote engine answered an HTTP error (``status_code``)
    └── StoreError                     the response store (``chatfmt.store``) refused or failed
        ├── StoreUnavailable           its file cannot be opened or migrated (``path``, ``reason``)
        ├── StoreFull                  past its size limit, and the writing key stores the most
        └── BrokenChain                an earlier response of the conversation is gone
    (in ``chatfmt.training``: TrainingError, a conversation that cannot be rendered for
    training as asked (``index``); RowError, a data-set row that cannot be read (``line``);
    both ChatFmtError and ValueError)
    MissingDependencyError (ImportError)  an optional extra is not installed

Lenient parsing of model output never raises: what does not parse is text, with a warning.
"""

from __future__ import annotations


class ChatFmtError(Exception):
    """Base class of every error chatfmt raises on purpose."""


class ValidationError(ChatFmtError, ValueError):
    """A conversation, message or tool breaks a rule (of the data model or of the dialect).

    Also a :class:`ValueError`, as bad input is.

    ``index`` is the position of the offending message (``None`` for the whole conversation).
    """

    def __init__(self, message: str, *, index: int | None = None, rule: str = "") -> None:
        self.index = index
        self.rule = rule
        prefix = f"message {index}: " if index is not None else ""
        super().__init__(prefix + message)


class UnknownDialectError(ChatFmtError, KeyError):
    """No dialect has this name."""

    def __str__(self) -> str:
        return str(self.args[0])  # KeyError would quote the message


class DialectPluginError(UnknownDialectError):
    """A dialect plugin (an entry point in ``chatfmt.dialects``) could not be loaded, or
    clashes with a name already registered."""


class ReasoningOptionError(ChatFmtError, ValueError):
    """A request asked a dialect for a reasoning mode its family does not have (thinking on
    for a model that never reasons, off for one that always does, an unknown effort level)."""

    def __init__(self, message: str, *, option: str) -> None:
        super().__init__(message)
        #: Which control was refused: ``"thinking"`` or ``"effort"``.
        self.option = option


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


class PyCallError(ParseError):
    """Text is not a literal-only ``tool_call(...)``; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class ToolError(ChatFmtError):
    """A tool could not be registered, described, or called."""


class InterpreterError(ChatFmtError):
    """The code interpreter could not start or run code."""


class EngineError(ChatFmtError):
    """The model runtime or remote engine failed or is unreachable."""


class EngineUnavailableError(EngineError):
    """The engine cannot be reached or is not ready; retrying later may succeed."""


class RemoteHTTPError(EngineError):
    """A remote engine answered with an HTTP error status."""

    def __init__(self, message: str, *, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


class StoreError(ChatFmtError):
    """The response store refused a request or failed (see :mod:`chatfmt.store`)."""


class StoreUnavailable(StoreError):
    """The store's file cannot be opened (or migrated); ``reason`` says why."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(
            f"cannot open the response store {path!r} ({reason}); give a writable path with "
            "--store, or --no-store to keep no responses"
        )
        self.path, self.reason = path, reason


class StoreFull(StoreError):
    """Keeping this would take the store past its size limit, and the key writing it already
    stores the most: it is not kept (the other keys' data is not evicted for it)."""


class BrokenChain(StoreError):
    """An earlier response of a conversation is gone (deleted, evicted, or past its age): the
    conversation cannot be continued, and a response continuing it is not kept."""


class MissingDependencyError(ImportError):
    """An optional dependency is missing; the message names the extra to install."""


class SchemaError(ChatFmtError, ValueError):
    """A JSON schema asks for something constrained decoding cannot guarantee (``strict``),
    or is not a schema. ``path`` says where in it (``""``: the root); ``subject`` whose
    schema it is (``"function 'add'"``), as OpenAI's messages say."""

    def __init__(self, message: str, *, path: str = "", subject: str = "") -> None:
        self.reason = message
        self.path = path
        self.subject = subject
        where = f"In context=({path})" if path else "At the root"
        head = f"Invalid schema for {subject}: " if subject else "Invalid schema: "
        super().__init__(f"{head}{where}, {message}")

    def of(self, subject: str) -> SchemaError:
        """The same error, saying whose schema it is."""
        return type(self)(self.reason, path=self.path, subject=subject)


class SchemaTooDeep(SchemaError):
    """A JSON schema nested deeper than any grammar is built for: refused wherever it comes
    from (a request that sends one gets a 400 naming the limit, never an unconstrained reply
    or a recursion crash)."""
