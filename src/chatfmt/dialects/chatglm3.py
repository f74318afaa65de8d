"""ChatGLM3: ``[gMASK]sop`` then ``<|role|>{metadata}\\n{content}`` turns, no separators.

Rendering reproduces the official ``build_chat_input`` of ``tokenization_chatglm.py`` id for id:
each turn is the role's control id, then ``encode(metadata + "\\n")`` and ``encode(content)`` as
two separate SentencePiece calls (so each gets its own dummy-prefix space). A system message
carries the tools as ``"\\n" + json.dumps(functions, indent=4, ensure_ascii=False)``.

An assistant turn may hold several ``<|assistant|>`` segments: text (empty metadata), a tool
call (metadata = tool name, content = a fenced ``tool_call(k=v, ...)``) or code for the
interpreter (metadata ``interpreter``). The parser turns each segment back into one message.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..errors import ValidationError
from ..grammar import CallRules
from ..grammar.gbnf import literal
from ..messages import INTERPRETER, Conversation, Message, Tool, ToolCall
from ..pycall import format_tool_call, parse_tool_call
from ..segments import Block, BlockBuilder, Control, Segment, Text
from ..validation import check_not_empty, check_tool_calls_only_on_assistant, check_tool_pairing
from .base import EndRule, results_end
from .glm import (
    ASSISTANT,
    NEXT_ROLES,
    OBSERVATION,
    ROLE_CONTROL,
    ROLE_TOKENS,
    SYSTEM,
    USER,
    GLMDialect,
    early_glm,
    fenced_code,
)

#: The official system prompt for tool use (PROMPT.md), used when tools come without a system
#: message.
TOOL_PROMPT = (
    "Answer the following questions as best as you can. You have access to the following tools:"
)

_PREFIX = (Control("[gMASK]"), Control("sop"))
_FENCE = "```"


def call_content(call: ToolCall) -> str:
    """The segment content that renders ``call``: its raw text, or the fenced call."""
    if call.raw is not None:
        return call.raw
    args = call.arguments_dict()
    if call.name == INTERPRETER:
        return f"{_FENCE}python\n{_interpreter_code(args)}\n{_FENCE}"
    return f"{_FENCE}python\n{format_tool_call(args)}\n{_FENCE}"


def _decode_call(body: str) -> dict[str, Any]:
    """A call segment's body: a fenced ``tool_call(k=v, ...)``, read with ``ast`` (literals)."""
    return parse_tool_call(fenced_code(body))


def _interpreter_code(args: dict[str, object]) -> str:
    code = args.get("code")
    if set(args) != {"code"} or not isinstance(code, str):
        raise ValueError(
            'interpreter calls take exactly {"code": "<python source>"}; '
            "rename the tool if it is not the code interpreter"
        )
    return code


class ChatGLM3(GLMDialect):
    """The ChatGLM3 chat format (THUDM/chatglm3-6b)."""

    name = "chatglm3"
    #: The model ends a reply by writing the next role token, or ``</s>`` after the last one
    #: (what the official fine-tuning code trains): no end is in the history.
    end_rule = EndRule(closing="</s>")
    fingerprint = early_glm(
        "ChatGLM3 ([gMASK]sop, role tokens, tool_call(…) segments)", "[gMASK]sop", 10
    )
    controls = ("[MASK]", "[gMASK]", "[sMASK]", "sop", "eop", *ROLE_TOKENS)
    stop_controls = (*NEXT_ROLES, "</s>")
    #: In text output only role tokens are split out: ``sop``, ``eop`` and the mask tokens are
    #: never generated, and as text they are ordinary words (``isopropyl`` contains ``sop``).
    text_controls = ROLE_TOKENS
    turns_render_independently = True
    interpreter = INTERPRETER
    fenced_code_runs = False  # its interpreter segment is a code block already
    strip_dummy_prefix = True
    decode_call = staticmethod(_decode_call)

    def call_body(self, c: CallRules, tool: Tool) -> str:
        """A fenced ``tool_call(k=v, …)`` with Python-literal arguments."""
        opening, closing = literal(f"{_FENCE}python\ntool_call("), literal(f")\n{_FENCE}")
        return f"{opening} {c.keyword_arguments(tool)} {closing}"

    # ==== Validation ====

    def validate(self, conversation: Conversation, *, strict: bool = True) -> None:
        """Raise :class:`ValidationError` for a conversation ChatGLM3 cannot take.

        Always: tool calls only on assistant messages, and each call must be writable
        (a one-line tool name; literal arguments with identifier names, or ``raw`` text).
        Strict adds the order rules of PROMPT.md and tool-call/result pairing.
        """
        check_tool_calls_only_on_assistant(conversation)
        for i, m in enumerate(conversation.messages):
            for call in m.tool_calls or ():
                _check_call(call, i)
        if not strict:
            return
        check_not_empty(conversation)
        _check_order(conversation.messages)
        check_tool_pairing(conversation, strict=True)

    # ==== Rendering ====

    def write(
        self, b: BlockBuilder, conversation: Conversation, add_generation_prompt: bool
    ) -> None:
        """Prefix, one block per turn (interleaving several calls with their results), and
        the bare ``<|assistant|>`` generation prompt."""
        msgs = conversation.messages
        tools_json = (
            json.dumps([t.function for t in conversation.tools], indent=4, ensure_ascii=False)
            if conversation.tools
            else None
        )
        tools_at = next((i for i, m in enumerate(msgs) if m.role == "system"), None)
        b.add(Block(_PREFIX))
        if tools_json is not None and tools_at is None:
            b.add(Block(_turn(SYSTEM, "", f"{TOOL_PROMPT}\n{tools_json}")))
        parts: list[tuple[int, tuple[Segment, ...]]] = []
        i = 0
        while i < len(msgs):
            m = msgs[i]
            if m.role == "assistant" and m.tool_calls and len(m.tool_calls) > 1:
                j = results_end(msgs, i + 1)
                parts.extend(_interleave(msgs, i, range(i + 1, j)))
                i = j
                continue
            extra = tools_json if i == tools_at else None
            parts.append((i, _message_segments(m, extra)))
            i += 1
        # Consecutive parts of one message share a block (the unit of caching).
        for index, segs in parts:
            last = b.blocks[-1]
            if len(b.blocks) > 1 and last.messages == (index,):
                b.blocks[-1] = Block(last.segments + segs, (index,))
            else:
                b.add(Block(segs, (index,)))
        if add_generation_prompt:
            b.add(Block((Control(ASSISTANT),)))

    # ==== Parsing ====

    def interpreter_observation(self, output: str) -> str:
        """ChatGLM3 reads interpreter results in a ```result block (PROMPT.md)."""
        return f"```result\n{output}\n```"

    def stop_strings(self) -> list[str]:
        """``<|user|>`` and ``<|observation|>``; eos has no text form."""
        return [USER, OBSERVATION]


def _turn(role: str, metadata: str, content: str) -> tuple[Segment, ...]:
    # Two Text segments: the reference encodes the header line and the content separately.
    return (Control(role), Text(metadata + "\n"), Text(content))


def _message_segments(m: Message, tools_json: str | None) -> tuple[Segment, ...]:
    role = ROLE_CONTROL[m.role]
    if m.role != "assistant" or not m.tool_calls:
        content = m.text if tools_json is None else f"{m.text}\n{tools_json}"
        return _turn(role, m.metadata or "", content)
    segs: list[Segment] = []
    if m.content:
        segs.extend(_turn(ASSISTANT, "", m.content))
    for call in m.tool_calls:
        segs.extend(_call_segments(m, call))
    return tuple(segs)


def _call_segments(m: Message, call: ToolCall) -> tuple[Segment, ...]:
    # Explicit metadata on a single-call message is what the model wrote: keep it verbatim.
    explicit = m.metadata is not None and not m.content and len(m.tool_calls or ()) == 1
    metadata = m.metadata if explicit and m.metadata is not None else call.name
    return _turn(ASSISTANT, metadata, call_content(call))


def _interleave(
    msgs: Sequence[Message], at: int, results: range
) -> list[tuple[int, tuple[Segment, ...]]]:
    """Each call followed by its result(s), matched by ``tool_call_id`` (else in order)."""
    m = msgs[at]
    calls = m.tool_calls or ()
    by_id = {c.id: k for k, c in enumerate(calls)}
    answers: list[list[int]] = [[] for _ in calls]
    unmatched: list[int] = []
    for r in results:
        k = by_id.get(msgs[r].tool_call_id or "")
        if k is not None and not answers[k]:
            answers[k].append(r)
        else:
            unmatched.append(r)
    extras: list[int] = []
    for r in unmatched:
        k = next((k for k, a in enumerate(answers) if not a), None)
        if k is None:
            extras.append(r)
        else:
            answers[k].append(r)
    out: list[tuple[int, tuple[Segment, ...]]] = []
    if m.content:
        out.append((at, _turn(ASSISTANT, "", m.content)))
    for call, answered_by in zip(calls, answers, strict=True):
        out.append((at, _call_segments(m, call)))
        out.extend((r, _message_segments(msgs[r], None)) for r in answered_by)
    out.extend((r, _message_segments(msgs[r], None)) for r in extras)
    return out


def _check_call(call: ToolCall, index: int) -> None:
    GLMDialect.check_call_name(call, index)
    if call.raw is not None:
        return
    try:
        call_content(call)
    except ValueError as exc:
        raise ValidationError(
            f"tool call {call.name!r} cannot be written as ChatGLM3 expects: {exc}",
            index=index,
            rule="tool-call-arguments",
        ) from None


def _check_order(msgs: Sequence[Message]) -> None:
    """The role order of PROMPT.md."""
    seen_user = False
    prev: str | None = None
    open_calls = 0  # calls of the previous assistant turn not yet answered
    for i, m in enumerate(msgs):
        role = "observation" if m.role == "tool" else m.role
        if role == "system" and i != 0:
            raise ValidationError(
                "a system message can only come first; move it to the start or merge it into "
                "the first system message",
                index=i,
                rule="system-first",
            )
        if role == "user" and prev == "user":
            raise ValidationError(
                "two user messages in a row; merge them into one message or put the "
                "assistant's reply between them",
                index=i,
                rule="user-repeat",
            )
        if role == "assistant" and not seen_user:
            raise ValidationError(
                "an assistant message before any user message; add the user message it answers "
                "first",
                index=i,
                rule="assistant-after-user",
            )
        if role == "observation":
            if prev not in ("assistant", "observation") or open_calls == 0:
                raise ValidationError(
                    "a tool result must directly follow the assistant message that called the "
                    "tool (tool_calls, or metadata naming the tool or 'interpreter'), one result "
                    "per call; add that call or remove the result",
                    index=i,
                    rule="observation-order",
                )
            open_calls -= 1
        elif role == "assistant":
            calls = len(m.tool_calls or ())
            if not calls and (m.metadata or "").strip():
                calls = 1  # history form: metadata names the tool, content holds the call
            open_calls = calls
        else:
            open_calls = 0
        seen_user = seen_user or role == "user"
        prev = role
