"""The Hermes tool-call parser: assistant text with calls as JSON objects in tags.

Qwen2.5 and other ChatML models write calls as ``<tool_call>\\n{"name": …, "arguments": …}
\\n</tool_call>`` after their text. Small models often drop the tags and write the same object
bare, or in a ```` ```json ```` fence: :class:`HermesParser` accepts all three. A dialect
configures it with its tags; the JSON is checked as it streams by
:class:`~chatfmt.jsonscan.CallScanner`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Literal

from ...events import Event, Finish
from ...jsonscan import WS, CallScanner
from ...markup import TOOL_CALL, TOOL_CALL_END, held_suffix
from ..base import StreamParser, finish_reason_for
from .calls import CallStream, cut_problem
from .turn import TurnOutput

_NON_WS = re.compile(r"[^ \t\r\n]")
_FENCE_INFO = ("", "json")
_MAX_FENCE_INFO = 32


def _is_ws(text: str) -> bool:
    return not text.strip(WS)


# Parser modes.
_LEAD, _TEXT, _TAG_OPEN, _FENCE_OPEN, _FENCE_PRE, _JSON, _TAG_TAIL, _FENCE_TAIL = range(8)


class HermesParser(TurnOutput, StreamParser):
    """Incremental parser of one assistant turn: text plus Hermes-style tool calls.

    ``open_tag`` / ``close_tag`` are the dialect's call tags (arriving as control tokens or as
    text, they parse the same way), or ``None`` for a format without tags; bare and fenced JSON
    calls need no configuration. ``separator``: a character the format writes between calls
    (Llama 3's ``;``), skipped after a call when another call follows.

    Every decision depends only on the characters seen, never on how they were chunked, so any
    chunking yields the same events (up to how deltas are split) and the same result. Work per
    feed is proportional to the new text: text is searched with ``str.find`` and only a suffix
    shorter than a tag is ever held back; a candidate call object is scanned once, incrementally.
    """

    def __init__(
        self,
        *,
        id_factory: Callable[[], str] | None = None,
        stop_controls: Sequence[str] = (),
        open_tag: str | None = TOOL_CALL,
        close_tag: str | None = TOOL_CALL_END,
        separator: str | None = None,
    ) -> None:
        super().__init__(id_factory=id_factory, stop_controls=stop_controls)
        self._separator = separator
        if (open_tag is None) != (close_tag is None) or open_tag == "" or close_tag == "":
            raise ValueError("HermesParser needs non-empty open_tag and close_tag, or neither")
        # No tags (Llama 3): only bare and fenced calls, at the start or after a call.
        self._open_tag = open_tag or ""
        self._close_tag = close_tag or ""
        self._tag_markers = (open_tag,) if open_tag else ()
        self._mode = _LEAD
        self._first = True  # before anything but whitespace
        self._lead = ""  # whitespace seen in _LEAD
        self._hold = ""  # undecided suffix (a possible tag start, a separator newline)
        self._drop_ws = ""  # whitespace after a call, dropped unless text follows
        self._droppable = False
        self._prefix = ""  # text before the candidate call, restored if it is not a call
        self._raw: list[str] = []  # exact text of the candidate call
        self._kind = ""  # "tag" | "bare" | "fence"
        self._fence = ""  # backticks and info string of an opening fence
        self._scan: CallScanner | None = None
        self._tail_junk = False
        self._seen_separator = False  # a separator after the last call, in _LEAD
        self._events: list[Event] = []
        self._content: list[str] = []
        self._calls = CallStream(self._new_id, self._events_append, self._warnings)

    def _events_append(self, event: Event) -> None:
        self._events.append(event)

    # ==== Public interface ====

    def on_text(self, text: str) -> list[Event]:
        self._process(text)
        self._flush_args()
        out, self._events = self._events, []  # inline: once per chunk
        return out

    def on_finish(self, reason: Literal["stop", "length"]) -> list[Event]:
        mode = self._mode
        if mode == _TEXT:
            hold, self._hold = self._hold, ""
            self._emit_text(hold)
        elif mode == _LEAD:
            if self._first and self._lead:
                self._out(self._lead)
        elif mode == _JSON and self._calls.open is not None:
            self._break_call(cut_problem(reason))
            self._end_call()
        elif mode in (_TAG_OPEN, _FENCE_OPEN, _FENCE_PRE, _JSON):
            warn = self._kind == "tag" or (self._scan is not None and self._scan.saw_name_key)
            self._degrade("an unterminated tool call was kept as text", warn=warn)
        elif mode == _TAG_TAIL or mode == _FENCE_TAIL:
            self._raw.append(self._hold)
            self._hold = ""
            self._end_call()
        self._drop_ws = ""
        self._events.append(Finish(finish_reason_for(bool(self._calls.complete), reason)))
        out, self._events = self._events, []  # inline: once per chunk
        return out

    # ==== Output ====

    def _emit_text(self, text: str) -> None:
        """Visible text; after a call, whitespace alone is only a separator and is held."""
        if not text:
            return
        if self._droppable:
            if _is_ws(text):
                self._drop_ws += text
                return
            text = self._drop_ws + text
            self._drop_ws = ""
            self._droppable = False
        self._out(text)

    def _flush_args(self) -> None:
        if self._scan is not None:
            self._calls.flush(self._scan)

    # ==== Modes ====

    def _process(self, text: str) -> None:
        while text:
            mode = self._mode
            if mode == _TEXT:
                text = self._on_text(text)
            elif mode == _LEAD:
                text = self._on_lead(text)
            elif mode == _JSON:
                text = self._on_json(text)
            elif mode == _TAG_OPEN or mode == _FENCE_PRE:
                text = self._on_open(text)
            elif mode == _FENCE_OPEN:
                text = self._on_fence_open(text)
            elif mode == _TAG_TAIL:
                text = self._on_tag_tail(text)
            else:
                text = self._on_fence_tail(text)

    def _on_lead(self, text: str) -> str:
        m = _NON_WS.search(text)
        if m is None:
            self._lead += text
            return ""
        j = m.start()
        ws = self._lead + text[:j]
        self._lead = ""
        first, self._first = self._first, False
        c = text[j]
        if c == self._separator and self._calls.count and not self._seen_separator:
            # Between calls: held with the whitespace, it is content only if text follows.
            self._seen_separator = True
            self._lead = ws + c
            return text[j + 1 :]
        self._seen_separator = False
        if c == "{" or c == "`":
            self._prefix = ws
            self._raw = []
            if c == "{":
                self._kind = "bare"
                self._scan = CallScanner()
                self._mode = _JSON
            else:
                self._kind = "fence"
                self._fence = ""
                self._mode = _FENCE_OPEN
            return text[j:]
        self._mode = _TEXT
        if first:
            return ws + text[j:]
        self._droppable = True
        self._drop_ws += ws
        return text[j:]

    def _on_text(self, text: str) -> str:
        buf = self._hold + text
        self._hold = ""
        open_tag = self._open_tag
        i = buf.find(open_tag) if open_tag else -1
        if i < 0:
            end = len(buf) - held_suffix(buf, self._tag_markers)
            if end > 0 and buf[end - 1] == "\n":
                end -= 1  # may be the separator before a call: decide later
            self._emit_text(buf[:end])
            self._hold = buf[end:]
            return ""
        before = buf[:i]
        self._prefix = ""
        if self._droppable:
            before = self._drop_ws + before
            self._drop_ws = ""
            if _is_ws(before):
                self._prefix = before
                before = ""
            else:
                self._droppable = False
        if before:
            # The template writes "\n" before each call: that newline is not content.
            if before.endswith("\n"):
                self._prefix = "\n"
                before = before[:-1]
            else:
                self._prefix = ""
            self._out(before)
        self._kind = "tag"
        self._raw = [open_tag]
        self._mode = _TAG_OPEN
        return buf[i + len(open_tag) :]

    def _on_open(self, text: str) -> str:
        m = _NON_WS.search(text)
        if m is None:
            self._raw.append(text)
            return ""
        j = m.start()
        self._raw.append(text[:j])
        if text[j] != "{":
            where = self._open_tag if self._mode == _TAG_OPEN else "the ```json fence"
            self._degrade(
                f"{where} is not followed by a JSON object; kept as text",
                warn=self._mode == _TAG_OPEN,
            )
            return text[j:]
        self._scan = CallScanner()
        self._mode = _JSON
        return text[j:]

    def _on_fence_open(self, text: str) -> str:
        for j, c in enumerate(text):
            if len(self._fence) < 3:
                if c != "`":
                    self._raw.append(text[:j])
                    self._degrade("", warn=False)
                    return text[j:]
                self._fence += c
            elif c == "\n":
                self._raw.append(text[: j + 1])
                info = self._fence[3:].strip(WS).lower()
                if info in _FENCE_INFO:
                    self._mode = _FENCE_PRE
                else:
                    self._degrade("", warn=False)  # some other code block
                return text[j + 1 :]
            else:
                self._fence += c
                if len(self._fence) > 3 + _MAX_FENCE_INFO:
                    self._raw.append(text[: j + 1])
                    self._degrade("", warn=False)
                    return text[j + 1 :]
        self._raw.append(text)
        return ""

    def _on_json(self, text: str) -> str:
        scan = self._scan
        assert scan is not None
        n = scan.feed(text)
        self._raw.append(text[:n])
        if self._kind == "tag" and self._calls.open is None and scan.name is not None:
            self._commit(scan.name)  # a tagged call streams as soon as its name is known
        if scan.error is not None:
            if self._calls.open is not None:
                self._break_call(f"has malformed JSON ({scan.error})")
                self._mode = _TAG_TAIL
            else:
                self._degrade(
                    f"malformed tool call JSON ({scan.error}); kept as text",
                    warn=self._kind == "tag" or scan.saw_name_key,
                )
            return text[n:]
        if scan.done:
            self._object_closed()
        return text[n:]

    def _object_closed(self) -> None:
        scan = self._scan
        assert scan is not None
        if self._kind == "tag":
            if self._calls.open is None:
                self._degrade(f"{self._open_tag} holds no call name; kept as text", warn=True)
                return
            self._close_args()
            self._mode = _TAG_TAIL
            return
        problem = None
        if scan.name is None or scan.name_invalid:
            problem = "no string 'name'"
        elif scan.args_state == "none":
            problem = "no 'arguments'"
        elif scan.args_state == "invalid":
            problem = scan.args_error
        if problem is not None:
            self._degrade(
                f"JSON object is not a tool call ({problem}); kept as text",
                warn=scan.saw_name_key,
            )
            return
        assert scan.name is not None
        self._commit(scan.name)
        self._flush_args()
        self._close_args()
        if self._kind == "bare":
            self._end_call()
        else:
            self._mode = _FENCE_TAIL

    def _on_tag_tail(self, text: str) -> str:
        buf = self._hold + text
        self._hold = ""
        open_tag, close_tag = self._open_tag, self._close_tag
        i = buf.find(close_tag)
        k = buf.find(open_tag)
        if i >= 0 and (k < 0 or i < k):
            self._tail(buf[:i])
            self._raw.append(close_tag)
            self._end_call()
            return buf[i + len(close_tag) :]
        if k >= 0:
            # The next call began without closing this one.
            self._tail(buf[:k])
            self._warnings.append(f"tool call {self._calls.count - 1} has no {self._close_tag}")
            self._end_call()
            return buf[k:]
        keep = held_suffix(buf, (close_tag, open_tag))
        self._tail(buf[: len(buf) - keep])
        self._hold = buf[len(buf) - keep :]
        return ""

    def _tail(self, text: str) -> None:
        if text:
            self._raw.append(text)
            if not self._tail_junk and not _is_ws(text):
                self._tail_junk = True
                self._warnings.append(
                    f"text after the JSON of tool call {self._calls.count - 1} was ignored"
                )

    def _on_fence_tail(self, text: str) -> str:
        buf = self._hold + text
        self._hold = ""
        m = _NON_WS.search(buf)
        if m is None:
            self._hold = buf
            return ""
        rest = buf[m.start() :]
        if rest.startswith("```"):
            self._raw.append(buf[: m.start() + 3])
            self._end_call()
            return buf[m.start() + 3 :]
        if rest in ("`", "``"):
            self._hold = buf  # maybe the start of the closing fence
            return ""
        self._end_call()  # no closing fence; what follows is ordinary output
        return buf

    # ==== Calls ====

    def _commit(self, name: str) -> None:
        self._calls.start(name)
        self._tail_junk = False
        self._prefix = ""  # the separator before a call is not content

    def _close_args(self) -> None:
        """The object closed: emit what is left of the arguments and end the call."""
        scan = self._scan
        assert self._calls.open is not None and scan is not None
        self._calls.close(scan)

    def _break_call(self, problem: str) -> None:
        """A committed call did not close: it ends incomplete, its arguments as streamed."""
        self._flush_args()
        self._calls.cut(problem)

    def _end_call(self) -> None:
        self._calls.record("".join(self._raw))
        self._scan = None
        self._raw = []
        self._hold = ""
        self._mode = _LEAD

    def _degrade(self, reason: str, *, warn: bool) -> None:
        """The candidate is not a call: its text (and the separator before it) is content."""
        if warn and reason:
            self._warnings.append(reason)
        text = self._prefix + "".join(self._raw)
        self._prefix = ""
        self._raw = []
        self._scan = None
        self._mode = _TEXT
        self._first = False
        if not _is_ws(text):
            self._droppable = False
            self._drop_ws = ""
        self._emit_text(text)
