"""Rules every dialect shares; dialect modules add their own on top.

Each check raises :class:`~chatfmt.errors.ValidationError` naming the message index, the rule
and the fix.
"""

from __future__ import annotations

from typing import NoReturn

from .errors import ValidationError
from .messages import Conversation


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
