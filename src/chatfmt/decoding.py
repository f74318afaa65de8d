"""The one decode pipeline: generated ids or text → pieces → stops → the dialect's parser → events.

Every consumer of model output (``Dialect.parse``, ``chatfmt parse``, the agent loop, the HTTP
server, the web chat) goes through :class:`TurnDecoder`, so a turn streamed id by id, streamed
as text chunks, or parsed whole gives the same message::

    ids ─ tokenizer.decoder() ─┐
                               ├─ pieces ─ stop ids / stop controls ─ stop strings ─ parser ─ events
    text ─ ControlSplitter ────┘

The "this text might be the start of a marker" hold-back that every stage needs is
:func:`chatfmt.markup.held_suffix`, written once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from .events import Event, Finish, FinishReason, ParseResult
from .markup import held_suffix, replace_lone_surrogates
from .segments import Control
from .tokenizers.base import Piece, Tokenizer

if TYPE_CHECKING:
    from .dialects.base import Dialect, StreamParser
    from .engines.base import GenerationChunk


class ControlSplitter:
    """Splits text that has control tokens written out into pieces, incrementally.

    Used when output arrives as text (``chatfmt parse`` of a file, engines that return text).
    Only the dialect's :attr:`~chatfmt.Dialect.text_controls` are split out: ChatGLM3's ``sop``
    is a control id, but as text it is part of ``isopropyl``.
    """

    def __init__(self, controls: Iterable[str]) -> None:
        self._controls = sorted(set(controls), key=len, reverse=True)
        self._firsts = frozenset(c[0] for c in self._controls)
        self._longest = len(self._controls[0]) if self._controls else 0
        self._buf = ""

    def feed(self, text: str) -> list[Piece]:
        """Pieces that are certain; text that may still become a control is held back."""
        return self._scan(self._buf + text, final=False)

    def flush(self) -> list[Piece]:
        """The end of the text: whatever is held back, split for good."""
        return self._scan(self._buf, final=True) if self._buf else []

    def _scan(self, buf: str, *, final: bool) -> list[Piece]:
        # Leftmost-longest, as a scan of the whole text would split it: at each position the
        # longest control that matches, unless the rest of the text could still grow into a
        # longer one (then everything from here on is held until more text comes).
        out: list[Piece] = []
        controls, firsts = self._controls, self._firsts
        start = i = 0
        n = len(buf)
        while i < n:
            if buf[i] not in firsts:
                i += 1
                continue
            rest = n - i
            if (
                not final
                and rest < self._longest
                and any(len(c) > rest and c.startswith(buf[i:]) for c in controls)
            ):
                break
            match = next((c for c in controls if buf.startswith(c, i)), None)
            if match is None:
                i += 1
                continue
            if i > start:
                out.append(buf[start:i])
            out.append(Control(match))
            i += len(match)
            start = i
        if i > start:
            out.append(buf[start:i])
        self._buf = buf[i:]
        return out


def split_controls(text: str, controls: Iterable[str]) -> list[Piece]:
    """``text`` as pieces: the ``controls`` written in it split out as control tokens."""
    splitter = ControlSplitter(controls)
    return [*splitter.feed(text), *splitter.flush()]


class StopStrings:
    """Finds OpenAI ``stop`` sequences in streamed text.

    Text that could be the start of a stop sequence is held back until decided, so a sequence
    split across chunks is still found and never shown.
    """

    def __init__(self, stops: Iterable[str]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._buf = ""
        #: The stop sequence that was hit (``None`` until one is): the one that starts first,
        #: the earliest given of those starting there (the Messages API reports it).
        self.matched: str | None = None

    def __bool__(self) -> bool:
        return bool(self._stops)

    def feed(self, text: str) -> tuple[str, bool]:
        """``(text safe to pass on, whether a stop sequence was hit)``."""
        return self._scan(self._buf + text, final=False)

    def flush(self) -> tuple[str, bool]:
        """The end of the text (or a control token): what was held back, and whether it
        holds a stop sequence after all."""
        return self._scan(self._buf, final=True) if self._buf else ("", False)

    def _scan(self, buf: str, *, final: bool) -> tuple[str, bool]:
        # As in the whole text, the stop sequence that *starts* first wins: a hit is final only
        # when no partial match starting before it could still complete.
        hits = [i for i in (buf.find(s) for s in self._stops) if i >= 0]
        first = min(hits) if hits else len(buf)
        pending = len(buf) - held_suffix(buf, self._stops) if not final else len(buf)
        if hits and first <= pending:
            self._buf = ""
            self.matched = next(s for s in self._stops if buf.startswith(s, first))
            return buf[:first], True
        self._buf = buf[pending:]
        return buf[:pending], False


StopKind = Literal["control", "string", "length", "end", "parser"]


class TurnDecoder:
    """Decodes one assistant turn: ids or text in, parser events out.

    - ids go through the tokenizer's stream decoder (split UTF-8 is buffered), text through the
      dialect's :class:`ControlSplitter`;
    - a stop id or stop control ends the turn and never reaches the parser;
    - ``stop_strings`` end it at the text before the match that starts first (as in the whole
      text), as a stop token would: a tool call already started at that point did not close,
      so the parser ends it incomplete (never runnable, see ``dialects/parsers/calls.py``), and
      the turn finishes with ``stop`` unless complete calls remain. Call text not yet
      recognised as a call (no name streamed yet, a ChatGLM3 call segment) stays text;
    - text output has lone surrogates (which no tokenizer produces, but a JSON ``\\ud800``
      escape from a text-only server can) replaced by U+FFFD;
    - after the end, everything fed is ignored (:attr:`done`).

    Feed with :meth:`feed_ids`, :meth:`feed_text` or :meth:`feed_chunk` (not mixed in one
    turn), then call :meth:`finish`; :meth:`result` is the parsed turn.
    """

    def __init__(
        self,
        dialect: Dialect,
        tokenizer: Tokenizer | None = None,
        *,
        stop_strings: Sequence[str] = (),
        parser: StreamParser | None = None,
    ) -> None:
        self.dialect = dialect
        self.parser = parser if parser is not None else dialect.stream_parser()
        self._decoder = tokenizer.decoder() if tokenizer is not None else None
        self._splitter: ControlSplitter | None = None
        self._stop_ids = frozenset(dialect.stop_ids(tokenizer)) if tokenizer is not None else ()
        self._stop_controls = frozenset(dialect.stop_controls)
        self._stops = StopStrings(stop_strings)
        #: What ended the turn (``None`` while it runs): a stop ``control`` (id or text), a
        #: stop ``string``, ``length``, or the ``end`` of the output.
        self.stopped_by: StopKind | None = None
        self._finish: FinishReason | None = None  # the turn's finish reason, once it ended

    @property
    def done(self) -> bool:
        """Whether the turn has ended."""
        return self.stopped_by is not None

    @property
    def stop_string(self) -> str | None:
        """The stop string that ended the turn (``stopped_by == "string"``), else ``None``."""
        return self._stops.matched if self.stopped_by == "string" else None

    # ==== Input ====

    def prefill(self, pieces: Iterable[Piece]) -> list[Event]:
        """What the prompt already wrote of the reply (a forced call's opening), parsed as if
        the model had written it; stop strings do not apply to it."""
        events: list[Event] = []
        for piece in pieces:
            events.extend(self.parser.feed(piece))
        return events

    def feed_ids(self, ids: Iterable[int]) -> list[Event]:
        """Generated token ids (needs the tokenizer)."""
        decoder = self._decoder
        if decoder is None:
            raise TypeError("decoding token ids needs the tokenizer that produced them")
        events: list[Event] = []
        if self.done:
            return events
        decode, stop_ids = decoder.feed, self._stop_ids
        feed = None if self._stops else self.parser.feed
        for token_id in ids:  # the hot loop of every streamed reply: kept lean
            if token_id in stop_ids:
                events += self._stop_control()
                break
            pieces = decode(token_id)
            if not pieces:
                continue
            if feed is not None and len(pieces) == 1 and type(pieces[0]) is str:
                events += feed(pieces[0])  # plain text, no stop strings: straight to the parser
                if self.parser.turn_over:
                    events += self._end("parser", "stop")
                    break
                continue
            events += self._pieces(pieces)
            if self.done:
                break
        return events

    def feed_chunk(self, chunk: GenerationChunk) -> list[Event]:
        """One chunk of an engine's stream: its ids, or its text when the engine only had text
        (:attr:`~chatfmt.engines.GenerationChunk.exact_ids`); a finish reason ends the turn."""
        if chunk.exact_ids:
            events = self.feed_ids(chunk.token_ids)
        else:
            events = self.feed_text(chunk.text or "")
        if chunk.finish_reason is not None and not self.done:
            events += self.finish(chunk.finish_reason)
        return events

    def feed_text(self, text: str) -> list[Event]:
        """Generated text with control tokens written out (as a text-only engine returns it)."""
        if self._splitter is None:
            self._splitter = ControlSplitter(self.dialect.text_controls)
        if not text or self.done:
            return []
        return self._pieces(self._splitter.feed(replace_lone_surrogates(text)))

    def finish(self, reason: Literal["stop", "length"] = "stop") -> list[Event]:
        """The output ended (``length``: cut by max_tokens); flush and finish the parse."""
        if self.done:
            return []
        tail: list[Piece] = []
        if self._decoder is not None:
            tail.extend(self._decoder.flush())
        if self._splitter is not None:
            tail.extend(self._splitter.flush())
        events = self._pieces(tail)
        if not self.done:
            events += self._stop_text(*self._stops.flush())
        if not self.done:
            events += self._end("length" if reason == "length" else "end", reason)
        return events

    # ==== Output ====

    def result(self) -> ParseResult:
        """The parsed turn (call after :meth:`finish`), its finish reason as the events said."""
        parsed = self.parser.result()
        if self._finish is not None and parsed.finish_reason != self._finish:
            return replace(parsed, finish_reason=self._finish)
        return parsed

    # ==== Internals ====

    def _pieces(self, pieces: Iterable[Piece]) -> list[Event]:
        events: list[Event] = []
        feed = self.parser.feed
        stops = self._stops
        for piece in pieces:
            if self.done:
                break
            if isinstance(piece, Control):
                if piece.token in self._stop_controls:
                    events += self._stop_control()
                    break
                if stops:
                    # A control token breaks any partial stop sequence: release the held text.
                    events += self._stop_text(*stops.flush())
                    if self.done:
                        break
                events += feed(piece)
            elif not stops:
                events += feed(piece)
            else:
                events += self._stop_text(*stops.feed(piece))
            if self.parser.turn_over and not self.done:
                events += self._end("parser", "stop")
        return events

    def _stop_text(self, text: str, hit: bool) -> list[Event]:
        """Text that passed the stop strings; ``hit``: a stop string came right after it."""
        events = self.parser.feed(text) if text else []
        if hit and not self.parser.turn_over:
            events += self._end("string", "stop")
        return events

    def _stop_control(self) -> list[Event]:
        """A stop id or stop control: the text held for stop strings is output after all."""
        events = self._stop_text(*self._stops.flush()) if self._stops else []
        if not self.done:
            events += self._end("control", "stop")
        return events

    def _end(self, kind: StopKind, reason: Literal["stop", "length"]) -> list[Event]:
        self.stopped_by = kind
        # Output that ended at a stop string (matched here, or by the engine: an output that
        # just ends while stop strings are set) did not end where the model ended its turn. A
        # call that closes only with the turn (Llama 3's <|python_tag|> code, a ChatGLM3
        # interpreter segment) was cut there: the parser reads the end as a cut.
        cut = kind == "string" or (kind == "end" and bool(self._stops))
        events = self.parser.finish("length" if cut else reason)
        final = next((e.reason for e in reversed(events) if isinstance(e, Finish)), None)
        if final is None:
            return events
        # The finish reason clients act on: "tool_calls" only for a turn whose calls are all
        # complete (a client runs every call of such a turn), "length" only for max_tokens.
        parsed = self.parser.result()
        if parsed.incomplete_calls and final == "tool_calls":
            final = "stop"
        elif cut and reason == "stop":
            final = "tool_calls" if parsed.tool_calls and not parsed.incomplete_calls else "stop"
        self._finish = final
        return [Finish(final) if isinstance(e, Finish) else e for e in events]


def decode_turn(
    dialect: Dialect,
    output: str | Sequence[int],
    tokenizer: Tokenizer | None = None,
    *,
    finish_reason: Literal["stop", "length"] = "stop",
    stop_strings: Sequence[str] = (),
) -> ParseResult:
    """Parse one complete assistant output, given as token ids or as text."""
    turn = TurnDecoder(dialect, tokenizer, stop_strings=stop_strings)
    if isinstance(output, str):
        turn.feed_text(output)
    else:
        turn.feed_ids(output)
    turn.finish(finish_reason)
    return turn.result()
