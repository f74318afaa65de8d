"""The calls of one turn as a parser streams them, and the one rule for calls that do not close.

Every parser that streams calls (:class:`~.hermes.HermesParser`, the Mistral parsers,
:class:`~.harmony.HarmonyParser`, the GLM family's interpreter segments) announces, streams and
ends them through :class:`CallStream`, so the rule is written once:

- a call is *announced* by :class:`~chatfmt.events.ToolCallStart`; its
  :class:`~chatfmt.events.ToolCallDelta` events carry only text the model wrote (for JSON, the
  safe-to-stream prefix :class:`~chatfmt.jsonscan.CallScanner` gives);
- a call that closed ends with ``ToolCallEnd(index)`` and is a :class:`~chatfmt.ToolCall` of the
  message;
- a call that did not close (cut by ``length``, the turn ended inside it, its JSON broke) ends
  with ``ToolCallEnd(index, complete=False)`` and becomes an
  :class:`~chatfmt.events.IncompleteCall`: chatfmt never adds text to its arguments, it is in no
  message, so nothing that runs a parsed message's calls can run it, and a warning says so;
- a candidate that was never announced is not a call: the parser keeps its text as content.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from ...events import Event, IncompleteCall, ToolCallDelta, ToolCallEnd, ToolCallStart
from ...jsonscan import CallScanner
from ...messages import ToolCall

#: A tool or argument name longer than this is no name (names are at most 64 characters under
#: OpenAI's rule): what a parser reads as one is bounded.
MAX_NAME = 256


def cut_problem(reason: Literal["stop", "length"]) -> str:
    """How a call the output ended inside it is described in warnings."""
    return "was cut off" if reason == "length" else "is unterminated"


@dataclass
class OpenCall:
    """The call being streamed: announced, its arguments so far, whether it has ended."""

    index: int
    id: str
    name: str
    arguments: list[str] = field(default_factory=list)
    ended: bool = False  # ToolCallEnd was emitted
    complete: bool = False


class CallStream:
    """Announces a turn's calls, streams their arguments and ends them, complete or not.

    ``emit`` receives each event as it is made (in order with the parser's text events);
    ``warnings`` is the parser's list. ``raw_in_calls``: whether a complete call keeps its raw
    text in :attr:`ToolCall.raw <chatfmt.ToolCall.raw>` (dialects that re-render calls from it).
    """

    def __init__(
        self,
        new_id: Callable[[], str],
        emit: Callable[[Event], None],
        warnings: list[str],
        *,
        raw_in_calls: bool = True,
    ) -> None:
        self._new_id = new_id
        self._emit = emit
        self._warnings = warnings
        self._raw_in_calls = raw_in_calls
        self.open: OpenCall | None = None
        #: Calls that closed, in order: the message's calls.
        self.complete: list[ToolCall] = []
        #: Calls that did not close: never runnable.
        self.incomplete: list[IncompleteCall] = []
        #: Calls announced so far (the next call's index).
        self.count = 0

    def start(self, name: str, call_id: str | None = None) -> OpenCall:
        """Announce a call whose name is known (a fresh id unless the model wrote one)."""
        call = OpenCall(self.count, call_id or self._new_id(), name)
        self.count += 1
        self.open = call
        self._emit(ToolCallStart(call.index, call.id, name))
        return call

    def stream(self, text: str) -> None:
        """More of the open call's arguments, exactly as the model wrote them."""
        call = self.open
        if text and call is not None and not call.ended:
            call.arguments.append(text)
            self._emit(ToolCallDelta(call.index, text))

    def flush(self, scan: CallScanner) -> None:
        """Stream what ``scan`` says is safe of the open call's arguments."""
        if self.open is not None and not self.open.ended:
            self.stream(scan.take_safe())

    @property
    def streamed(self) -> bool:
        """Whether the open call has any arguments text yet."""
        return self.open is not None and bool(self.open.arguments)

    def end(self) -> None:
        """The open call closed: its arguments are complete (stream ``{}`` first if the model
        wrote none)."""
        call = self.open
        assert call is not None and not call.ended
        # The syntax closed, but what it holds must be a call a client can run: arguments that
        # are one JSON object of finite numbers, within the nesting a reader can take. A parser
        # that assembles JSON itself (XML, DSML values) is checked here like the scanner's JSON.
        problem = _invalid_arguments(call.name, "".join(call.arguments))
        if problem is not None:
            call.ended = True
            self._emit(ToolCallEnd(call.index, complete=False))
            self._warnings.append(
                f"tool call {call.index} has {problem}; it is incomplete and not runnable"
            )
            return
        call.ended = call.complete = True
        self._emit(ToolCallEnd(call.index))

    def close(self, scan: CallScanner) -> None:
        """The open call's object closed (``scan`` read it): stream the rest of its arguments
        and end it. A call that wrote no arguments gets ``{}`` (a tool without parameters);
        one whose arguments are not a JSON object is incomplete: chatfmt never puts arguments
        of its own in their place."""
        self.flush(scan)
        if not self.streamed:
            if scan.args_state == "invalid":
                self.cut(f"has arguments that are not a JSON object ({scan.args_error})")
                return
            self.stream("{}")
        self.end()

    def cut(self, problem: str) -> None:
        """The open call did not close (``problem``: "was cut off", "is unterminated", "has
        malformed JSON (…)"): end it as incomplete, its arguments as they are."""
        call = self.open
        assert call is not None
        if call.ended:  # its arguments closed; what follows them is the problem
            self._warnings.append(f"tool call {call.index} {problem}")
            return
        call.ended = True
        self._emit(ToolCallEnd(call.index, complete=False))
        self._warnings.append(
            f"tool call {call.index} {problem}; it is incomplete and not runnable"
        )

    def record(self, raw: str) -> None:
        """The open call's text is over (``raw``, exactly as written): keep it as a call if it
        closed, as an :class:`~chatfmt.events.IncompleteCall` if not."""
        call = self.open
        assert call is not None and call.ended
        self.open = None
        arguments = "".join(call.arguments)
        if not call.complete:
            self.incomplete.append(IncompleteCall(call.index, call.id, call.name, arguments, raw))
            return
        kept_raw = raw if self._raw_in_calls else None
        # end() checked these arguments: this cannot fail short of a deeper stack here.
        try:
            tc = ToolCall(id=call.id, name=call.name, arguments=arguments, raw=kept_raw)
        except (ValueError, RecursionError):
            self.incomplete.append(IncompleteCall(call.index, call.id, call.name, arguments, raw))
            self._warnings.append(f"tool call {call.index} arguments could not be read back")
            return
        self.complete.append(tc)


def feed_arguments(
    scan: CallScanner, calls: CallStream, text: str, fed: int
) -> tuple[Literal["more", "done", "error"], int]:
    """Read ``text`` of the open call's JSON arguments (``fed`` characters of them came
    before) and stream what is safe. Returns how it stands and how much of ``text`` is the
    call's: ``"done"`` (the scanner reads on past the object: what it read there is after the
    call), ``"error"`` (up to the character that broke it) or ``"more"`` (all of it)."""
    n = scan.feed(text)
    calls.flush(scan)
    if scan.args_state == "done":
        call = calls.open
        assert call is not None
        return "done", sum(map(len, call.arguments)) - fed
    if scan.error is not None:
        return "error", n
    return "more", len(text)


def _invalid_arguments(name: str, arguments: str) -> str | None:
    """Why ``arguments`` cannot be a runnable call's (``None``: they can)."""
    try:
        ToolCall(id="check", name=name or "f", arguments=arguments)
    except RecursionError:
        return "arguments nested too deeply to read"
    except ValueError as exc:
        return f"arguments that are not a valid JSON object ({str(exc).splitlines()[0][:120]})"
    return None
