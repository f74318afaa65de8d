"""Rules every dialect shares; dialect modules add their own on top.

Each check raises :class:`~chatfmt.errors.ValidationError` naming the message index, the rule
and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn, Protocol

from .errors import ValidationError
from .messages import Conversation, Message


def check_not_empty(conv: Conversation) -> None:
    """A conversation needs at least one message."""
    if not conv.messages:
        raise ValidationError(
            "the conversation has no messages; add at least one user message", rule="empty"
        )


def check_tool_pairing(conv: Conversation, *, strict: bool = True) -> None:
    """Every tool result answers a call made before it, and (strict) every call is answered
    before the next user or system message."""
    open_calls: dict[str, int] = {}
    for i, m in enumerate(conv.messages):
        if m.role == "assistant" and m.tool_calls:
            if strict and open_calls:
                _unanswered(open_calls, i, "new tool calls", "before the next assistant turn")
            for c in m.tool_calls:
                if c.id in open_calls and strict:
                    raise ValidationError(
                        f"two tool calls share the id {c.id!r}; give each call its own id",
                        index=i,
                        rule="tool-pairing",
                    )
                open_calls[c.id] = i
        elif m.role in ("tool", "observation"):
            if m.tool_call_id is not None:
                if m.tool_call_id in open_calls:
                    del open_calls[m.tool_call_id]
                elif strict:
                    raise ValidationError(
                        f"tool result for unknown call id {m.tool_call_id!r}; set tool_call_id "
                        "to the id of a call made by an earlier assistant message",
                        index=i,
                        rule="tool-pairing",
                    )
            elif open_calls:
                # Results without ids answer the oldest open call, as ChatGLM3 history does.
                del open_calls[next(iter(open_calls))]
            elif strict and not _follows_history_call(conv, i):
                raise ValidationError(
                    f"{m.role} result without a tool call to answer; a result must follow an "
                    "assistant message that calls a tool",
                    index=i,
                    rule="tool-pairing",
                )
        elif m.role in ("user", "system") and open_calls and strict:
            _unanswered(open_calls, i, f"{m.role} message", "first")


def _unanswered(open_calls: dict[str, int], index: int, what: str, when: str) -> NoReturn:
    pending = ", ".join(sorted(open_calls))
    raise ValidationError(
        f"{what} while tool calls {pending} have no result; "
        f"add a tool message with each call's result {when}",
        index=index,
        rule="tool-pairing",
    )


def _follows_history_call(conv: Conversation, index: int) -> bool:
    """Whether the results before ``index`` follow an assistant turn written as a call in
    ChatGLM3's history form (metadata = tool name or ``interpreter``, the call in the text)."""
    j = index - 1
    while j >= 0 and conv.messages[j].role in ("tool", "observation"):
        j -= 1
    return j >= 0 and conv.messages[j].role == "assistant" and bool(conv.messages[j].metadata)


def check_tool_calls_only_on_assistant(conv: Conversation) -> None:
    """Only assistant messages carry ``tool_calls``; only tool results carry ``tool_call_id``."""
    for i, m in enumerate(conv.messages):
        if m.tool_calls and m.role != "assistant":
            raise ValidationError(
                f"a {m.role} message has tool_calls; only assistant messages can call tools",
                index=i,
                rule="tool-calls-role",
            )


def check_common(conv: Conversation, *, strict: bool = True) -> None:
    """The rules every dialect shares: not empty, calls only on assistant messages, tool
    results paired with calls."""
    check_not_empty(conv)
    check_tool_calls_only_on_assistant(conv)
    check_tool_pairing(conv, strict=strict)


# ==== Rules a dialect lists ====
#
# A dialect declares the per-message rules of its format (``Dialect.rules``) instead of writing
# them out again: each is checked on every message of a strict validation, in the order listed.
# A rule loops over the messages itself: one call per rule, not one per message (validation
# runs on every request).


class MessageRule(Protocol):
    """A check of each message: raises :class:`ValidationError` naming the first message
    that breaks this rule. Rules run one after the other, so with two problems in a
    conversation the first rule's is reported. ``dialect`` is the dialect's name, for the
    message."""

    def __call__(self, dialect: str, messages: Sequence[Message]) -> None: ...


@dataclass(frozen=True, slots=True)
class NoMetadata:
    """The format's headers have no place for ``metadata`` (ChatGLM3's header line): the
    template would drop it, so it is refused rather than lost. ``hint`` ends the fix."""

    hint: str = ""

    def __call__(self, dialect: str, messages: Sequence[Message]) -> None:
        for index, message in enumerate(messages):
            if message.metadata:
                raise ValidationError(
                    f"the {dialect} format has no header metadata and would drop it; remove "
                    f"'metadata'{self.hint}",
                    index=index,
                    rule="metadata",
                )


@dataclass(frozen=True, slots=True)
class CallNames:
    """Each call's name must be writable in the format's call syntax: ``bad(name)`` says it
    is not; with ``bad_key``, each argument name is checked too. ``holds`` says what breaks a
    name and ``breaks`` what it would break, for the message."""

    bad: Callable[[str], bool]
    holds: str
    breaks: str
    bad_key: Callable[[str], bool] | None = None

    def __call__(self, dialect: str, messages: Sequence[Message]) -> None:
        what = "tool call name" if self.bad_key is None else "tool call name or argument"
        for index, message in enumerate(messages):
            for call in message.tool_calls or ():
                wrong = [call.name] if self.bad(call.name) else []
                if self.bad_key is not None:
                    wrong += [k for k in call.arguments_dict() if self.bad_key(k)]
                if wrong:
                    raise ValidationError(
                        f"{what} {wrong[0]!r} is empty or holds {self.holds}, which break "
                        f"{self.breaks}; use a plain identifier such as 'get_weather'",
                        index=index,
                        rule="tool-call-name",
                    )


@dataclass(frozen=True, slots=True)
class NeedsContent:
    """A message needs ``content`` (the template fails on a missing one, or prints "None"),
    except an assistant message — with ``calls_only``, only one that calls tools."""

    calls_only: bool = False

    def __call__(self, dialect: str, messages: Sequence[Message]) -> None:
        for index, message in enumerate(messages):
            if message.content is None and not (
                message.role == "assistant" and (message.tool_calls or not self.calls_only)
            ):
                raise ValidationError(
                    f"a {message.role} message needs content for the {dialect} template; set "
                    'content to a string (it may be "")',
                    index=index,
                    rule="content",
                )


@dataclass(frozen=True, slots=True)
class SystemOnlyFirst:
    """The template writes a system message only as the first message."""

    def __call__(self, dialect: str, messages: Sequence[Message]) -> None:
        index = next((i for i, m in enumerate(messages) if i and m.role == "system"), 0)
        if index:
            raise ValidationError(
                f"the {dialect} template takes a system message only at the beginning and drops "
                "a system message that is not first; move it first or merge it into the first "
                "one",
                index=index,
                rule="system-position",
            )


#: A name the templates paste between quotes: it must need no JSON escaping.
JSON_BAD_NAME = re.compile(r'["\\\x00-\x1f]')


def json_name_is_bad(name: str) -> bool:
    """Whether a call name would need JSON escaping (or is empty)."""
    return not name or JSON_BAD_NAME.search(name) is not None


#: The call-name rule of formats that write the name as a JSON string.
JSON_CALL_NAMES = CallNames(
    json_name_is_bad, "quotes, backslashes or control characters", "the call's JSON"
)


def check_messages(dialect: str, conv: Conversation, rules: Sequence[MessageRule]) -> None:
    """Every rule on the conversation's messages, rule by rule."""
    for rule in rules:
        rule(dialect, conv.messages)
