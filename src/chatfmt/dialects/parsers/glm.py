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
from collections.abc import Callable, Iterable
from typing import Any, Literal

from ...errors import ParseError
from ...events import Event, Finish, FinishReason, ParseResult, SegmentEnd, TextDelta
from ...messages import INTERPRETER, Message
from ..base import StreamParser, finish_reason_for
from .calls import CallStream, cut_problem

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
    could still turn out to be the closing fence is held back. After :meth:`finish`,
    :attr:`fenced` says whether a fence opened and :attr:`closed` whether it closed.
    """

    def __init__(self) -> None:
        self._phase = 0  # 0: deciding whether a fence opens; 1: in the fence line; 2: code
        self._head = ""
        self._held = ""
        self._skip = False  # drop the newline that ends the fence line
        self.parts: list[str] = []
        self.fenced = False
        self.closed = False

    def feed(self, s: str) -> str:
        if self._phase == 0:
            head = self._head + s
            if len(head) < len(_FENCE) and _FENCE.startswith(head):
                self._head = head
                return ""
            self._head = ""
            if head.startswith(_FENCE):
                self._phase, s = 1, head[len(_FENCE) :]
                self.fenced = True
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
            # The start of a fence the output ended inside is no code.
            self.fenced = bool(self._head)
            self._phase = 2
            out = self._code(self._head)
        elif self._phase == 1:
            return ""
        else:
            out = ""
        held, self._held = self._held, ""
        if held.startswith("\n" + _FENCE):
            self.closed = True
        else:
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


class SegmentParser(StreamParser):
    """Incremental parser of one GLM-family assistant turn (see the module docstring).

    Text segments stream :class:`TextDelta`; interpreter segments stream their code as JSON
    argument fragments, and one whose code did not close (a fence left open, or cut by
    ``length``) is incomplete (:mod:`.calls`); tool-call segments emit their arguments once the
    segment is complete (it is only then known whether the call parses; if not, it becomes
    text with a warning).

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
        self._events: list[Event] = []
        self._calls = CallStream(self._new_id, self._events.append, self._warnings)
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
        events = self._end_segment(reason)
        self._seg = self._new_segment()
        self._reason = finish_reason_for(bool(self._calls.complete), reason)
        events.append(Finish(self._reason))
        return events

    def result(self) -> ParseResult:
        return ParseResult(
            list(self._messages), self._reason, list(self._warnings), list(self._calls.incomplete)
        )

    def _take(self, events: list[Event]) -> list[Event]:
        """``events`` with what the call stream emitted appended (in the order it came)."""
        events += self._events
        self._events.clear()  # (the call stream appends to this very list)
        return events

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
                self._calls.stream(_json_fragment(code))
                return self._take(events)
        return events

    def _start(self, seg: _Segment, meta: str) -> list[Event]:
        seg.meta = meta
        name = meta.strip()
        if not name:
            seg.kind = "text"
            return []
        if name == self._interpreter:
            seg.kind = "interpreter"
            self._calls.start(name)
            self._calls.stream('{"code": "')
            return self._take([])
        seg.kind = "call"
        return []

    def _end_segment(self, reason: Literal["stop", "length"] = "stop") -> list[Event]:
        """The segment ended: by the next ``<|assistant|>`` or a stop (``stop``), or cut by
        ``length``."""
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
            self._end_code(seg, meta, body, reason)
            events = self._take(events)
        elif seg.kind == "call":
            events += self._end_call(seg, meta, body)
        else:
            self._end_text(seg, meta, events)
        ended = meta if seg.kind == "interpreter" else self._messages[-1].metadata
        events.append(SegmentEnd(ended or ""))
        return events

    def _end_code(
        self, seg: _Segment, meta: str, body: str, reason: Literal["stop", "length"]
    ) -> None:
        """An interpreter segment ended: its code closed if its fence did (or, unfenced, if
        the segment ended with code in it and was not cut by ``length``)."""
        calls = self._calls
        calls.stream(_json_fragment(seg.code.finish()))
        if seg.code.fenced:
            # Cut output proves nothing about a fence that closed at its very end: the code
            # may hold a fence line of its own (a markdown string). The segment is whole only
            # when the turn went on past it or ended at a stop token.
            closed = seg.code.closed and reason != "length"
            problem = "is unterminated (its code fence is open)"
            if reason == "length":
                problem = cut_problem(reason)
        else:
            closed, problem = reason != "length" and bool(seg.code.code), cut_problem(reason)
        if not closed:
            calls.cut(problem)
            calls.record(body)
            return
        # The code is the arguments' one string: closing it is the JSON chatfmt wraps it in.
        calls.stream('"}')
        self._close_call(meta, body)

    def _close_call(self, meta: str, body: str) -> None:
        """End the open call and keep it as the segment's message when it is runnable (its
        arguments are one JSON object a client can read: ``CallStream.end`` checks them, and
        code holding a lone surrogate, say, is not)."""
        calls = self._calls
        calls.end()
        call = calls.open
        complete = call is not None and call.complete
        calls.record(body)
        if complete:
            self._messages.append(
                Message(role="assistant", metadata=meta, tool_calls=(calls.complete[-1],))
            )

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
        calls = self._calls
        calls.start(name)
        calls.stream(json.dumps(arguments, ensure_ascii=False))
        self._close_call(meta, body)
        return self._take([])

    def _end_text(
        self, seg: _Segment, meta: str, events: list[Event], body: str | None = None
    ) -> None:
        delta = seg.text.feed(body) if body is not None else ""
        delta += seg.text.finish()
        if delta:
            events.append(TextDelta(delta))
        self._messages.append(Message(role="assistant", metadata=meta, content=seg.text.text))
