"""The parser of a control token followed by a JSON list of calls (Mistral's ``[TOOL_CALLS]``).

``text [TOOL_CALLS] [{"name": …, "arguments": {…}}, …]``: text streams as it comes; after the
control, each object is checked as it streams by :class:`~chatfmt.jsonscan.CallScanner`, starts
a call as soon as its name is known and streams its arguments. A single object without the list
brackets is accepted too. Text after the list is content again. A call that does not close is
incomplete (:mod:`.calls`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from ...events import Event, Finish
from ...jsonscan import WS, CallScanner
from ..base import StreamParser, finish_reason_for
from .calls import CallStream, cut_problem, feed_arguments
from .turn import TurnOutput

# Modes: text; after the control; before an element; in an object; after an object; after the
# list (whitespace dropped); after a broken call (ignored).
_TEXT, _OPEN, _ELEM, _JSON, _SEP, _AFTER, _SKIP = range(7)


#: The most characters a call's name may take (with the whitespace around it) before the text
#: is no call: names are at most 64 characters under OpenAI's rule.
_MAX_NAME = 256


class _Streams(TurnOutput):
    """Output shared by both parsers: text, calls, the safe part of an open call's arguments."""

    _scan: CallScanner | None

    def _flush_args(self) -> None:
        if self._scan is not None:
            self._calls.flush(self._scan)

    def _record(self) -> None:
        """Keep the open call's text (as a call, or an incomplete one) and reset for the next."""
        raise NotImplementedError

    def _break(self, problem: str) -> None:
        """The open call did not close: it ends incomplete, its arguments as streamed."""
        self._flush_args()
        self._calls.cut(problem)
        self._record()


class ToolCallsParser(_Streams, StreamParser):
    """One assistant turn: text, then ``calls_control`` and a JSON array of call objects (and
    ``close_control`` after the array, where the format closes it with a tag).

    Output that does not parse degrades to text with a warning; a call already started when its
    JSON breaks ends incomplete, and what follows it is ignored. Every decision
    depends only on the characters seen, so any chunking gives the same events and result.
    """

    def __init__(
        self,
        *,
        id_factory: Callable[[], str] | None = None,
        stop_controls: Sequence[str] = (),
        calls_control: str = "[TOOL_CALLS]",
        close_control: str | None = None,
    ) -> None:
        super().__init__(id_factory=id_factory, stop_controls=stop_controls)
        self._control = calls_control
        # A tag that ends the list (Nemotron Nano v2's "</TOOLCALL>"): consumed after it.
        self._close = close_control
        self._mode = _TEXT
        self._single = False  # a bare object after the control, not a list
        self._raw: list[str] = []  # text since the control or the last call, kept for degrading
        self._in_list = 0  # calls of the current list
        self._scan: CallScanner | None = None
        self._obj: list[str] = []  # the open call object's text
        self._events: list[Event] = []
        self._content: list[str] = []
        self._calls = CallStream(self._new_id, self._emit, self._warnings, raw_in_calls=False)

    # ==== Input ====

    def on_control(self, token: str) -> list[Event]:
        if token == self._control and self._mode in (_TEXT, _AFTER, _SKIP):
            self._mode, self._raw, self._in_list, self._single = _OPEN, [token], 0, False
            return []
        if token == self._close and self._mode == _AFTER:
            return []  # whitespace after it is dropped as after the list
        return self.on_text(token)

    def on_text(self, text: str) -> list[Event]:
        while text:
            mode = self._mode
            if mode == _TEXT:
                self._out(text)
                break
            if mode == _SKIP:
                break
            if mode == _JSON:
                text = self._on_json(text)
                continue
            j = len(text) - len(text.lstrip(WS))
            if mode != _AFTER:
                self._raw.append(text[:j])
            text = text[j:]
            if not text:
                break
            c = text[0]
            if mode == _AFTER:
                self._mode = _TEXT
            elif (mode == _OPEN and c == "[") or (mode == _SEP and c == ","):
                self._raw.append(c)
                self._mode, text = _ELEM, text[1:]
            elif c == "{" and mode in (_OPEN, _ELEM):
                self._single = mode == _OPEN
                self._scan, self._mode, self._obj = CallScanner(), _JSON, []
            elif c == "]" and (mode == _SEP or (mode == _ELEM and not self._in_list)):
                self._mode, self._raw, text = _AFTER, [], text[1:]
            else:
                self._degrade(f"expected a tool call object, got {c!r}")
        out, self._events = self._events, []  # inline: once per chunk
        return out

    def _on_json(self, text: str) -> str:
        scan = self._scan
        assert scan is not None
        n = scan.feed(text)
        self._raw.append(text[:n])
        self._obj.append(text[:n])
        if self._calls.open is None and scan.name is not None:
            self._calls.start(scan.name)
        if scan.error is not None:
            if self._calls.open is None:
                self._degrade(f"malformed tool call JSON ({scan.error})")
                return text[n:]
            self._break(f"has malformed JSON ({scan.error})")
            self._warnings.append("the output after it was ignored")
            self._mode = _SKIP
            return ""
        self._flush_args()
        if scan.done:
            if self._calls.open is None:
                self._degrade("a tool call object has no string 'name'")
                return text[n:]
            self._end_call()
            self._mode = _AFTER if self._single else _SEP
        return text[n:]

    # ==== Output ====

    def _end_call(self) -> None:
        scan = self._scan
        assert self._calls.open is not None and scan is not None
        self._calls.close(scan)
        self._record()
        self._in_list += 1

    def _record(self) -> None:
        self._calls.record("".join(self._obj))
        self._scan, self._raw, self._obj = None, [], []

    def _degrade(self, reason: str) -> None:
        """What followed the control (or the last call) is not a call: it is text."""
        self._warnings.append(f"{reason}; kept as text")
        text = "".join(self._raw)
        self._raw, self._scan, self._mode = [], None, _TEXT
        self._out(text)

    # ==== End ====

    def on_finish(self, reason: Literal["stop", "length"]) -> list[Event]:
        mode = self._mode
        cut = cut_problem(reason)
        if mode == _JSON and self._calls.open is not None:
            self._break(cut)
        elif mode == _JSON or (mode in (_OPEN, _ELEM) and not self._in_list):
            self._degrade(f"the tool call list {cut}")
        elif mode in (_ELEM, _SEP):
            self._warnings.append(f"the tool call list {cut}")
        self._events.append(Finish(finish_reason_for(bool(self._calls.complete), reason)))
        out, self._events = self._events, []  # inline: once per chunk
        return out


# Modes of a named call: its name; its id (after ``[CALL_ID]``); its arguments (after
# ``[ARGS]``); after them (whitespace only until the next call).
_NAME_MODE, _ID_MODE, _ARGS_MODE, _DONE_MODE = range(10, 14)


class NamedCallsParser(_Streams, StreamParser):
    """Mistral v11's calls, one control-delimited call after another:
    ``text [TOOL_CALLS]name[CALL_ID]id[ARGS]{…}`` (``[CALL_ID]`` and the id optional, as models
    write calls without them). Text streams as it comes; a call starts when its name is whole
    and its arguments begin as an object, and its arguments stream; one that does not close is
    incomplete (:mod:`.calls`). Output that does not parse degrades to text with a warning;
    never raises on model output."""

    def __init__(
        self,
        *,
        id_factory: Callable[[], str] | None = None,
        stop_controls: Sequence[str] = (),
        controls: tuple[str, str, str] = ("[TOOL_CALLS]", "[CALL_ID]", "[ARGS]"),
        valid_name: Callable[[str], bool] = bool,
        valid_id: Callable[[str], bool] = bool,
    ) -> None:
        super().__init__(id_factory=id_factory, stop_controls=stop_controls)
        self._calls_control, self._id_control, self._args_control = controls
        self._valid_name, self._valid_id = valid_name, valid_id
        self._mode = _TEXT
        self._raw: list[str] = []  # the call's text so far, kept for degrading
        self._name: list[str] = []
        self._name_chars = 0  # characters written where the name goes (bounded)
        self._id: list[str] = []
        self._scan: CallScanner | None = None
        self._fed = 0  # characters of the arguments fed to the scanner
        self._noted_tail = self._noted_skip = self._had_id = False
        self._events: list[Event] = []
        self._content: list[str] = []
        self._calls = CallStream(self._new_id, self._emit, self._warnings, raw_in_calls=False)

    # ==== Input ====

    def on_control(self, token: str) -> list[Event]:
        mode = self._mode
        if token == self._calls_control and mode == _ARGS_MODE and self._calls.open is not None:
            # The next call begins: the open one was cut short.
            self._break("is unterminated")
            mode = _DONE_MODE
        if token == self._calls_control and mode in (_TEXT, _DONE_MODE, _SKIP):
            self._mode, self._raw, self._name, self._id = _NAME_MODE, [token], [], []
            self._had_id = False
            self._name_chars = 0
        elif token == self._id_control and mode == _NAME_MODE:
            self._mode, self._had_id = _ID_MODE, True
            self._raw.append(token)
        elif token == self._args_control and mode in (_NAME_MODE, _ID_MODE):
            self._raw.append(token)
            name = "".join(self._name).strip(WS)
            if self._valid_name(name):
                self._mode, self._scan, self._fed = _ARGS_MODE, None, 0
            else:
                self._degrade(f"tool call name {name!r} is not a function name")
        else:
            return self.on_text(token)
        out, self._events = self._events, []  # inline: once per chunk
        return out

    def on_text(self, text: str) -> list[Event]:
        mode = self._mode
        if mode == _TEXT:
            self._out(text)
        elif mode in (_NAME_MODE, _ID_MODE):
            self._raw.append(text)
            (self._name if mode == _NAME_MODE else self._id).append(text)
            if mode == _NAME_MODE:
                # The name is joined only while it is short (a run of spaces would otherwise
                # be re-joined at every chunk); past the bound it is judged once, as a whole,
                # so any chunking reaches the same verdict.
                self._name_chars += len(text)
                name = "".join(self._name).strip(WS)
                if name and not self._valid_name(name):
                    # Every prefix of a name is a name: this will not become one.
                    self._degrade("the text after [TOOL_CALLS] is not a function name")
                elif self._name_chars > _MAX_NAME:
                    self._degrade(
                        f"the text after [TOOL_CALLS] runs past {_MAX_NAME} characters "
                        "without a function name ending"
                    )
        elif mode == _ARGS_MODE:
            self._on_args(text)
        elif mode == _DONE_MODE:
            self._tail(text)
        elif mode == _SKIP and text.strip(WS) and not self._noted_skip:
            self._noted_skip = True
            self._warnings.append("the output after the malformed call was ignored")
        out, self._events = self._events, []  # inline: once per chunk
        return out

    def _tail(self, text: str) -> None:
        if text.strip(WS) and not self._noted_tail:
            self._noted_tail = True
            self._warnings.append("text after a tool call's arguments was ignored")

    def _on_args(self, text: str) -> None:
        if self._scan is None:
            stripped = text.lstrip(WS)
            if not stripped or stripped[0] != "{":
                self._raw.append(text)
                if stripped:
                    self._degrade("a tool call's arguments are not a JSON object")
                return
            self._raw.append(text[: len(text) - len(stripped)])
            text = stripped
            self._scan = CallScanner()
            self._scan.feed('{"arguments": ')
            name = "".join(self._name).strip(WS)
            self._calls.start(name, self._call_id("".join(self._id).strip(WS)))
        scan = self._scan
        fed, self._fed = self._fed, self._fed + len(text)
        state, used = feed_arguments(scan, self._calls, text, fed)
        self._raw.append(text[:used])
        if state == "done":
            self._end_call()
            self._mode = _DONE_MODE
            self._tail(text[used:])
        elif state == "error":
            # The character that broke it is already output that is dropped.
            self._break(f"has malformed JSON ({scan.error})")
            self._warnings.append("the output after the malformed call was ignored")
            self._mode, self._noted_skip = _SKIP, True

    def _call_id(self, given: str) -> str:
        """The id the model wrote, unless it is malformed or already used in this turn (a
        duplicate could not be answered apart): then a fresh one, and a warning."""
        if not self._had_id:
            return self._new_id()  # no [CALL_ID]: how these models usually write calls
        index = self._calls.count
        if not self._valid_id(given):
            self._warnings.append(
                f"tool call {index}: id {given!r} is malformed; a new one is used"
            )
        elif given in {c.id for c in self._calls.complete} | {c.id for c in self._calls.incomplete}:
            self._warnings.append(f"tool call {index}: id {given!r} repeats; a new one is used")
        else:
            return given
        return self._new_id()

    # ==== Output ====

    def _end_call(self) -> None:
        self._calls.end()
        self._record()

    def _record(self) -> None:
        self._calls.record("".join(self._raw))
        self._scan, self._raw = None, []

    def _degrade(self, reason: str) -> None:
        """What followed the control is not a call: it is text."""
        self._warnings.append(f"{reason}; kept as text")
        text = "".join(self._raw)
        self._raw, self._mode = [], _TEXT
        self._out(text)

    # ==== End ====

    def on_finish(self, reason: Literal["stop", "length"]) -> list[Event]:
        cut = cut_problem(reason)
        if self._mode == _ARGS_MODE and self._calls.open is not None:
            self._break(cut)
        elif self._mode in (_NAME_MODE, _ID_MODE, _ARGS_MODE):
            self._degrade(f"the tool call {cut}")
        self._events.append(Finish(finish_reason_for(bool(self._calls.complete), reason)))
        out, self._events = self._events, []  # inline: once per chunk
        return out
