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
import re
from collections.abc import Callable, Sequence
from typing import Literal

from ..errors import ValidationError
from ..events import (
    Event,
    FinishReason,
    ParseResult,
    SegmentEnd,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from ..events import Finish as FinishEvent
from ..messages import INTERPRETER, Conversation, Message, ToolCall, new_call_id
from ..pycall import PyCallError, format_tool_call, parse_tool_call
from ..segments import Block, Control, Segment, Text
from ..tokenizers.base import Piece, Tokenizer
from ..validation import check_not_empty, check_tool_calls_only_on_assistant, check_tool_pairing
from .base import ControlSplitter, Dialect, StreamParser, finish_reason_for

#: The official system prompt for tool use (PROMPT.md), used when tools come without a system
#: message.
TOOL_PROMPT = (
    "Answer the following questions as best as you can. You have access to the following tools:"
)

SYSTEM, USER, ASSISTANT, OBSERVATION = "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"
ROLE_TOKENS = (SYSTEM, USER, ASSISTANT, OBSERVATION)
_ROLE_CONTROL = {
    "system": SYSTEM,
    "user": USER,
    "assistant": ASSISTANT,
    "observation": OBSERVATION,
    "tool": OBSERVATION,
}
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


def _interpreter_code(args: dict[str, object]) -> str:
    code = args.get("code")
    if set(args) != {"code"} or not isinstance(code, str):
        raise ValueError(
            'interpreter calls take exactly {"code": "<python source>"}; '
            "rename the tool if it is not the code interpreter"
        )
    return code


class ChatGLM3(Dialect):
    """The ChatGLM3 chat format (THUDM/chatglm3-6b)."""

    name = "chatglm3"
    controls = ("[MASK]", "[gMASK]", "[sMASK]", "sop", "eop", *ROLE_TOKENS)
    stop_controls = (USER, OBSERVATION, "</s>")
    turns_render_independently = True

    def __init__(self, *, id_factory: Callable[[], str] | None = None) -> None:
        self._id_factory = id_factory

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

    def render_blocks(
        self, conversation: Conversation, *, add_generation_prompt: bool = True
    ) -> list[Block]:
        """Prefix, one block per turn (interleaving several calls with their results), and
        the bare ``<|assistant|>`` generation prompt."""
        msgs = conversation.messages
        tools_json = (
            json.dumps([t.function for t in conversation.tools], indent=4, ensure_ascii=False)
            if conversation.tools
            else None
        )
        tools_at = next((i for i, m in enumerate(msgs) if m.role == "system"), None)
        blocks = [Block(_PREFIX)]
        if tools_json is not None and tools_at is None:
            blocks.append(Block(_turn(SYSTEM, "", f"{TOOL_PROMPT}\n{tools_json}")))
        parts: list[tuple[int, tuple[Segment, ...]]] = []
        i = 0
        while i < len(msgs):
            m = msgs[i]
            if m.role == "assistant" and m.tool_calls and len(m.tool_calls) > 1:
                j = i + 1
                while j < len(msgs) and msgs[j].role in ("tool", "observation"):
                    j += 1
                parts.extend(_interleave(msgs, i, range(i + 1, j)))
                i = j
                continue
            extra = tools_json if i == tools_at else None
            parts.append((i, _message_segments(m, extra)))
            i += 1
        # Consecutive parts of one message share a block (the unit of caching).
        for index, segs in parts:
            last = blocks[-1]
            if len(blocks) > 1 and last.messages == (index,):
                blocks[-1] = Block(last.segments + segs, (index,))
            else:
                blocks.append(Block(segs, (index,)))
        if add_generation_prompt:
            blocks.append(Block((Control(ASSISTANT),)))
        return blocks

    # ==== Parsing ====

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> StreamParser:
        """A parser for the output that follows the ``<|assistant|>`` generation prompt."""
        return ChatGLM3StreamParser(id_factory=id_factory or self._id_factory)

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """A named call is forced by writing its metadata line (the tool name); which tool to
        call cannot be left to the model once the line is written, so ``None`` forces nothing."""
        if name is None or "\n" in name:
            return ()
        return (Text(name + "\n"),)

    def interpreter_observation(self, output: str) -> str:
        """ChatGLM3 reads interpreter results in a ```result block (PROMPT.md)."""
        return f"```result\n{output}\n```"

    def stop_strings(self) -> list[str]:
        """``<|user|>`` and ``<|observation|>``; eos has no text form."""
        return [USER, OBSERVATION]

    def pieces(self, output: str | Sequence[int], tokenizer: Tokenizer | None) -> list[Piece]:
        """Output as text runs and control tokens; in text only role tokens are split out.

        ``sop``, ``eop`` and the mask tokens are never generated, and as text they are
        ordinary words (``"isopropyl"`` contains ``sop``).
        """
        if isinstance(output, str):
            splitter = ControlSplitter(ROLE_TOKENS)
            return [*splitter.feed(output), *splitter.flush()]
        return super().pieces(output, tokenizer)


def _turn(role: str, metadata: str, content: str) -> tuple[Segment, ...]:
    # Two Text segments: the reference encodes the header line and the content separately.
    return (Control(role), Text(metadata + "\n"), Text(content))


def _message_segments(m: Message, tools_json: str | None) -> tuple[Segment, ...]:
    role = _ROLE_CONTROL[m.role]
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
    if not call.name or "\n" in call.name or "\r" in call.name:
        raise ValidationError(
            f"tool call name {call.name!r} must be one non-empty line (it is the header "
            "metadata); fix the tool name",
            index=index,
            rule="tool-call-name",
        )
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


# ==== Stream parsing ====

_ROLE_SET = frozenset(ROLE_TOKENS)
_ROLE_PREFIXES = frozenset(t[:n] for t in ROLE_TOKENS for n in range(1, len(t)))


class _RoleStripper:
    """Removes role-token strings from text, as the official ``postprocess_text`` does.

    Removal repeats until none is left (``"<|us<|user|>er|>"`` loses both), computed with a
    stack of partial matches so a stream and the whole text give the same result.
    """

    def __init__(self) -> None:
        self._stack: list[str] = []  # partial matches, each a proper prefix of a role token

    def feed(self, s: str) -> str:
        stack = self._stack
        if not stack and "<" not in s:
            return s
        out: list[str] = []
        i, n = 0, len(s)
        while i < n:
            if not stack:
                j = s.find("<", i)
                if j < 0:
                    out.append(s[i:])
                    break
                out.append(s[i:j])
                stack.append("<")
                i = j + 1
                continue
            ch = s[i]
            i += 1
            if ch == "<":
                stack.append("<")
                continue
            candidate = stack[-1] + ch
            if candidate in _ROLE_SET:
                stack.pop()
            elif candidate in _ROLE_PREFIXES:
                stack[-1] = candidate
            else:
                # The newest partial match is dead, so none below it can complete either.
                out.extend(stack)
                out.append(ch)
                stack.clear()
        return "".join(out)

    def flush(self) -> str:
        rest = "".join(self._stack)
        self._stack.clear()
        return rest


class _TextStage:
    """Display text of a segment: role strings removed, then stripped (``content.strip()``).

    Leading whitespace is dropped; trailing whitespace is held back until more text follows.
    """

    def __init__(self) -> None:
        self._roles = _RoleStripper()
        self._started = False
        self._ws = ""
        self.parts: list[str] = []

    def feed(self, s: str) -> str:
        return self._strip(self._roles.feed(s))

    def finish(self) -> str:
        out = self._strip(self._roles.flush())
        self._ws = ""
        return out

    def _strip(self, s: str) -> str:
        if self._started and not self._ws and s and not s[-1].isspace():
            self.parts.append(s)  # the common case: nothing to strip or hold
            return s
        if not self._started:
            s = s.lstrip()
            if not s:
                return ""
            self._started = True
        body = s.rstrip()
        if not body:
            self._ws += s
            return ""
        out = self._ws + body
        self._ws = s[len(body) :]
        self.parts.append(out)
        return out

    @property
    def text(self) -> str:
        return "".join(self.parts)


class _CodeStage:
    """Code of a fenced block, streamed as it arrives, without its fences.

    The body may open with a fence line (```` ```python ````); the code then runs to the last
    ``\\n```\u0060`` that only whitespace follows (the closing fence), or to the end. Text that
    could still turn out to be the closing fence is held back.
    """

    def __init__(self) -> None:
        self._phase = 0  # 0: deciding whether a fence opens; 1: in the fence line; 2: code
        self._head = ""
        self._held = ""
        self._skip = False  # drop the newline that ends the fence line
        self.parts: list[str] = []

    def feed(self, s: str) -> str:
        if self._phase == 0:
            head = self._head + s
            if len(head) < len(_FENCE) and _FENCE.startswith(head):
                self._head = head
                return ""
            self._head = ""
            if head.startswith(_FENCE):
                self._phase, s = 1, head[len(_FENCE) :]
            else:
                self._phase, s = 2, head
        if self._phase == 1:
            j = s.find("\n")
            if j < 0:
                return ""
            self._phase, self._skip, s = 2, True, s[j:]
        return self._code(s)

    def _code(self, s: str) -> str:
        held = self._held
        if not held and "\n" not in s:
            return self._emit(s)  # a closing fence starts with a newline
        if held.startswith("\n" + _FENCE) and (not s or s.isspace()):
            self._held = held + s
            return ""
        text = held + s
        cut = len(text)
        k = text.rfind("\n" + _FENCE, max(0, len(held) - 3))
        if k >= 0 and (k + 4 == len(text) or text[k + 4 :].isspace()):
            cut = k
        else:
            j = text.rfind("\n", max(0, len(text) - 3))
            if j >= 0 and text[j:] in ("\n", "\n`", "\n``"):
                cut = j
        self._held = text[cut:]
        return self._emit(text[:cut])

    def _emit(self, s: str) -> str:
        if self._skip and s:
            self._skip = False
            s = s[1:]
        if s:
            self.parts.append(s)
        return s

    def finish(self) -> str:
        if self._phase == 0:
            self._phase = 2
            out = self._code(self._head)
        elif self._phase == 1:
            return ""
        else:
            out = ""
        held, self._held = self._held, ""
        if not held.startswith("\n" + _FENCE):
            out += self._emit(held)
        return out

    @property
    def code(self) -> str:
        return "".join(self.parts)


def fenced_code(body: str) -> str:
    """The code inside a ```` ```python ```` block (or the whole body if it has no fence)."""
    stage = _CodeStage()
    stage.feed(body)
    stage.finish()
    return stage.code


_JSON_ESCAPED = re.compile(r'[\x00-\x1f"\\]')


def _json_fragment(s: str) -> str:
    # JSON escaping is per character, so fragments concatenate to the whole string's escape.
    if _JSON_ESCAPED.search(s) is None:
        return s
    return json.dumps(s, ensure_ascii=False)[1:-1]


class _Segment:
    """State of one ``<|assistant|>`` segment."""

    def __init__(self) -> None:
        self.seen = False  # any text at all (an empty segment renders nothing)
        self.meta_parts: list[str] = []
        self.meta: str | None = None
        self.kind: Literal["text", "interpreter", "call"] = "text"
        self.content_started = False
        self.body: list[str] = []
        self.text = _TextStage()
        self.code = _CodeStage()
        self.call_index = -1
        self.call_id = ""


class ChatGLM3StreamParser(StreamParser):
    """Incremental parser of one ChatGLM3 assistant turn (see the module docstring).

    Text segments stream :class:`TextDelta`; interpreter segments stream their code as JSON
    argument fragments; tool-call segments emit their arguments once the segment is complete
    (it is only then known whether the call parses; if not, it becomes text with a warning).
    """

    def __init__(self, *, id_factory: Callable[[], str] | None = None) -> None:
        self._new_id = id_factory or new_call_id
        self._seg = _Segment()
        self._messages: list[Message] = []
        self._warnings: list[str] = []
        self._calls = 0
        self._stopped = False
        self._finished = False
        self._reason: FinishReason = "stop"

    def feed(self, piece: Piece) -> list[Event]:
        if self._stopped:
            return []
        if isinstance(piece, Control):
            if piece.token == ASSISTANT:
                events = self._end_segment()
                self._seg = _Segment()
                return events
            if piece.token in ChatGLM3.stop_controls:
                self._stopped = True
            # Other control tokens carry no text; they are dropped.
            return []
        return self._feed_text(piece) if piece else []

    def finish(self, reason: Literal["stop", "length"] = "stop") -> list[Event]:
        if self._finished:
            return []
        events = self._end_segment()
        self._seg = _Segment()
        self._stopped = self._finished = True
        has_calls = any(m.tool_calls for m in self._messages)
        self._reason = finish_reason_for(has_calls, reason)
        events.append(FinishEvent(self._reason))
        return events

    def result(self) -> ParseResult:
        return ParseResult(list(self._messages), self._reason, list(self._warnings))

    # ---- segments ----

    def _feed_text(self, s: str) -> list[Event]:
        seg = self._seg
        seg.seen = True
        events: list[Event] = []
        if seg.meta is None:
            j = s.find("\n")
            if j < 0:
                seg.meta_parts.append(s)
                return events
            seg.meta_parts.append(s[:j])
            events.extend(self._start(seg, "".join(seg.meta_parts)))
            s = s[j + 1 :]
        if not s:
            return events
        if not seg.content_started:
            seg.content_started = True
            # Each segment's content was its own SentencePiece call: drop its dummy-prefix space.
            if s[0] == " ":
                s = s[1:]
        if seg.kind == "text":
            delta = seg.text.feed(s)
            if delta:
                events.append(TextDelta(delta))
            return events
        seg.body.append(s)  # call text is kept whole: it becomes ToolCall.raw
        if seg.kind == "interpreter":
            code = seg.code.feed(s)
            if code:
                events.append(ToolCallDelta(seg.call_index, _json_fragment(code)))
        return events

    def _start(self, seg: _Segment, meta: str) -> list[Event]:
        seg.meta = meta
        name = meta.strip()
        if not name:
            seg.kind = "text"
            return []
        if name == INTERPRETER:
            seg.kind = "interpreter"
            seg.call_index, seg.call_id = self._calls, self._new_id()
            self._calls += 1
            return [
                ToolCallStart(seg.call_index, seg.call_id, INTERPRETER),
                ToolCallDelta(seg.call_index, '{"code": "'),
            ]
        seg.kind = "call"
        return []

    def _end_segment(self) -> list[Event]:
        seg = self._seg
        if not seg.seen:
            return []
        events: list[Event] = []
        if seg.meta is None:
            # No newline: the official parser reads it all as content with empty metadata.
            seg.meta, seg.kind = "", "text"
            seg.body = ["".join(seg.meta_parts)]
            delta = seg.text.feed(seg.body[0])
            if delta:
                events.append(TextDelta(delta))
        meta = seg.meta.replace("\r", "")  # a header line cannot hold "\r" (Message rule)
        body = "".join(seg.body)
        if seg.kind == "interpreter":
            code = seg.code.finish()
            if code:
                events.append(ToolCallDelta(seg.call_index, _json_fragment(code)))
            events += [ToolCallDelta(seg.call_index, '"}'), ToolCallEnd(seg.call_index)]
            arguments = json.dumps({"code": seg.code.code}, ensure_ascii=False)
            call = ToolCall(id=seg.call_id, name=INTERPRETER, arguments=arguments, raw=body)
            self._messages.append(Message(role="assistant", metadata=meta, tool_calls=(call,)))
        elif seg.kind == "call":
            events += self._end_call(seg, meta, body)
        else:
            self._end_text(seg, meta, events)
        events.append(SegmentEnd(self._messages[-1].metadata or ""))
        return events

    def _end_call(self, seg: _Segment, meta: str, body: str) -> list[Event]:
        name = meta.strip()
        try:
            if any(c.isspace() for c in name) or name.startswith("`"):
                raise PyCallError(f"metadata {name!r} is not a tool name")
            arguments = parse_tool_call(fenced_code(body))
        except PyCallError as exc:
            self._warnings.append(
                f"segment {len(self._messages)}: call of {name!r} kept as text: {exc.reason}"
            )
            # As text, the header line is part of what the model said.
            events: list[Event] = []
            self._end_text(seg, "", events, f"{seg.meta}\n{body}")
            return events
        index = self._calls
        self._calls += 1
        args_json = json.dumps(arguments, ensure_ascii=False)
        call = ToolCall(id=self._new_id(), name=name, arguments=args_json, raw=body)
        self._messages.append(Message(role="assistant", metadata=meta, tool_calls=(call,)))
        return [
            ToolCallStart(index, call.id, name),
            ToolCallDelta(index, args_json),
            ToolCallEnd(index),
        ]

    def _end_text(
        self, seg: _Segment, meta: str, events: list[Event], body: str | None = None
    ) -> None:
        delta = seg.text.feed(body) if body is not None else ""
        delta += seg.text.finish()
        if delta:
            events.append(TextDelta(delta))
        self._messages.append(Message(role="assistant", metadata=meta, content=seg.text.text))
