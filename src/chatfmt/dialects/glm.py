"""The GLM family's turn parser: ``<|assistant|>`` segments with a metadata line.

ChatGLM3 (and GLM-4 after it) write an assistant turn as one or more segments, each opened by
the ``<|assistant|>`` control token: a header line (the *metadata*), then content. Empty
metadata is text; a tool name means the content is a call of that tool; ``interpreter`` means
the content is code for the code interpreter. Only the call body differs between versions
(ChatGLM3: a fenced ``tool_call(k=v, ...)``; GLM-4: JSON), so a dialect configures
:class:`SegmentParser` with its call decoder.
"""

from __future__ import annotations

import json
import re
from abc import abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from ..errors import ParseError, ValidationError
from ..events import (
    Event,
    Finish,
    FinishReason,
    ParseResult,
    SegmentEnd,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from ..grammar import CallRules, Grammar, ToolLike, Trigger
from ..grammar.gbnf import literal
from ..messages import INTERPRETER, Message, Tool, ToolCall
from ..segments import Segment, Text
from .base import Dialect, StreamParser, finish_reason_for

#: The GLM family's role tokens, and the one each chatfmt role is written with.
SYSTEM, USER, ASSISTANT, OBSERVATION = "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"
ROLE_TOKENS = (SYSTEM, USER, ASSISTANT, OBSERVATION)
NEWLINE = "\n"
ROLE_CONTROL = {
    "system": SYSTEM,
    "user": USER,
    "assistant": ASSISTANT,
    "tool": OBSERVATION,
    "observation": OBSERVATION,
}
_FENCE = "```"
#: Turns a call segment's body into its arguments; raises :class:`ParseError` (its message or
#: ``reason`` says why) when the body is not a call.
CallDecoder = Callable[[str], dict[str, Any]]


class _RoleStripper:
    """Removes role-token strings from text, as the official ``postprocess_text`` does.

    Removal repeats until none is left (``"<|us<|user|>er|>"`` loses both), computed with a
    stack of partial matches so a stream and the whole text give the same result.
    """

    def __init__(self, roles: frozenset[str], prefixes: frozenset[str]) -> None:
        self._roles = roles
        self._prefixes = prefixes
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
            if candidate in self._roles:
                stack.pop()
            elif candidate in self._prefixes:
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

    def __init__(self, roles: _RoleStripper) -> None:
        self._roles = roles
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

    def __init__(self, roles: _RoleStripper) -> None:
        self.seen = False  # any text at all (an empty segment renders nothing)
        self.meta_parts: list[str] = []
        self.meta: str | None = None
        self.kind: Literal["text", "interpreter", "call"] = "text"
        self.content_started = False
        self.body: list[str] = []
        self.text = _TextStage(roles)
        self.code = _CodeStage()
        self.call_index = -1
        self.call_id = ""


class SegmentParser(StreamParser):
    """Incremental parser of one GLM-family assistant turn (see the module docstring).

    Text segments stream :class:`TextDelta`; interpreter segments stream their code as JSON
    argument fragments; tool-call segments emit their arguments once the segment is complete
    (it is only then known whether the call parses; if not, it becomes text with a warning).

    Configured by the dialect: ``segment_control`` opens a segment, ``role_tokens`` are removed
    from text as the reference post-processing does, ``decode_call`` reads a call body,
    ``interpreter`` names the code-interpreter metadata (``None``: no interpreter), and
    ``strip_dummy_prefix`` drops the space a SentencePiece encoder puts before each content.
    """

    def __init__(
        self,
        *,
        segment_control: str,
        role_tokens: Iterable[str],
        decode_call: CallDecoder,
        interpreter: str | None = INTERPRETER,
        strip_dummy_prefix: bool = False,
        id_factory: Callable[[], str] | None = None,
        stop_controls: Iterable[str] = (),
    ) -> None:
        super().__init__(id_factory=id_factory, stop_controls=stop_controls)
        self._segment_control = segment_control
        roles = tuple(role_tokens)
        self._roles = frozenset(roles)
        self._role_prefixes = frozenset(t[:n] for t in roles for n in range(1, len(t)))
        self._decode_call = decode_call
        self._interpreter = interpreter
        self._strip_dummy_prefix = strip_dummy_prefix
        self._seg = self._new_segment()
        self._messages: list[Message] = []
        self._calls = 0
        self._reason: FinishReason = "stop"

    def _new_segment(self) -> _Segment:
        return _Segment(_RoleStripper(self._roles, self._role_prefixes))

    def on_control(self, token: str) -> list[Event]:
        if token == self._segment_control:
            events = self._end_segment()
            self._seg = self._new_segment()
            return events
        # Other control ids (ChatGLM3's sop, [gMASK]) are never part of a reply: dropped, as
        # ids. As text they are ordinary words and never reach here (Dialect.text_controls).
        return []

    def on_finish(self, reason: Literal["stop", "length"]) -> list[Event]:
        events = self._end_segment()
        self._seg = self._new_segment()
        has_calls = any(m.tool_calls for m in self._messages)
        self._reason = finish_reason_for(has_calls, reason)
        events.append(Finish(self._reason))
        return events

    def result(self) -> ParseResult:
        return ParseResult(list(self._messages), self._reason, list(self._warnings))

    # ---- segments ----

    def on_text(self, s: str) -> list[Event]:
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
            if s[0] == " " and self._strip_dummy_prefix:
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
        if name == self._interpreter:
            seg.kind = "interpreter"
            seg.call_index, seg.call_id = self._calls, self._new_id()
            self._calls += 1
            return [
                ToolCallStart(seg.call_index, seg.call_id, name),
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
            call = ToolCall(id=seg.call_id, name=meta.strip(), arguments=arguments, raw=body)
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
                raise ParseError(f"metadata {name!r} is not a tool name")
            arguments = self._decode_call(body)
        except (ParseError, ValueError, RecursionError) as exc:
            # A dialect's decoder may use json.loads: whatever it raises, the call is text.
            reason = getattr(exc, "reason", str(exc))
            self._warnings.append(
                f"segment {len(self._messages)}: call of {name!r} kept as text: {reason}"
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


class GLMDialect(Dialect):
    """The GLM family's shared half: the segment parser configured from class attributes, a
    named call forced by writing its metadata line, and the one-line tool-name rule. A
    dialect sets its tokens, :attr:`decode_call` and the rest, and writes its own layout."""

    role_tokens: tuple[str, ...] = ROLE_TOKENS
    #: The metadata that marks code for the interpreter (``None``: no interpreter segments).
    interpreter: str | None = None
    #: Whether each content was its own SentencePiece call (a dummy-prefix space to drop).
    strip_dummy_prefix = False

    def __init__(self, *, id_factory: Callable[[], str] | None = None) -> None:
        self._id_factory = id_factory

    @staticmethod
    @abstractmethod
    def decode_call(body: str) -> dict[str, Any]:
        """A call segment's body as arguments; raises :class:`ParseError` if it is none."""

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> SegmentParser:
        """A parser for the output that follows the ``<|assistant|>`` generation prompt."""
        return SegmentParser(
            segment_control=ASSISTANT,
            role_tokens=self.role_tokens,
            decode_call=self.decode_call,
            interpreter=self.interpreter,
            strip_dummy_prefix=self.strip_dummy_prefix,
            id_factory=id_factory or self._id_factory,
            stop_controls=self.stop_controls,
        )

    def call_body(self, c: CallRules, tool: Tool) -> str:
        """GBNF for the body of a call segment of ``tool`` (after its metadata line)."""
        return c.arguments(tool)

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        """Call segments: a declared tool's name as the metadata line, then its body; more
        segments follow their ``<|assistant|>``. When lazy, switched on by a reply whose
        first line is a declared tool's name."""
        c = CallRules(tools)
        segments = [
            c.rules.add(
                f"segment-{t.name}", f"{literal(t.name + NEWLINE)} {c.ws} {self.call_body(c, t)}"
            )
            for t in c.tools
        ]
        segment = c.rules.add("segment", " | ".join(segments))
        root = segment if single else f"{segment} ({literal(ASSISTANT)} {segment})*"
        if required:
            return c.grammar(root, preserved=(ASSISTANT,))
        # The first line of the reply, or of a later segment (after text).
        line = f"({c.names_pattern()}\n)"
        triggers = (
            Trigger("pattern_full", line + r"[\s\S]*"),
            Trigger("pattern", r"<\|assistant\|>" + line),
        )
        return c.grammar(root, triggers=triggers, preserved=(ASSISTANT,))

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """A named call is forced by writing its metadata line (the tool name); which tool to
        call cannot be left to the model once the line is written, so ``None`` forces nothing."""
        if name is None or "\n" in name:
            return ()
        return (Text(name + "\n"),)


def check_call_name(call: ToolCall, index: int) -> None:
    """A call's name is the header metadata: one non-empty line."""
    if not call.name or "\n" in call.name or "\r" in call.name:
        raise ValidationError(
            f"tool call name {call.name!r} must be one non-empty line (it is the header "
            "metadata); fix the tool name",
            index=index,
            rule="tool-call-name",
        )
