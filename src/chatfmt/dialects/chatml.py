"""ChatML (``<|im_start|>role\\n…<|im_end|>``) and its Qwen2.5 preset.

Tool calls follow the Hermes / Qwen2.5 convention: ``<tool_call>\\n{"name": …, "arguments": …}
\\n</tool_call>`` after the assistant's text. :class:`Qwen25` reproduces the official Qwen2.5 chat
template byte for byte (default system prompt, ``# Tools`` section, tool results merged into one
``user`` turn of ``<tool_response>`` blocks).

The stream parser accepts the three shapes small Qwen models actually write: tagged calls, a bare
``{"name": …, "arguments": …}`` object, and the same object in a ```` ```json ```` fence.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..errors import ValidationError
from ..events import (
    Event,
    Finish,
    ParseResult,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from ..messages import Conversation, Message, Tool, ToolCall, new_call_id
from ..segments import Block, Control, Segment, Text
from ..tokenizers.base import Piece
from ..validation import check_not_empty, check_tool_calls_only_on_assistant, check_tool_pairing
from .base import Dialect, StreamParser, finish_reason_for

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ENDOFTEXT = "<|endoftext|>"
TOOL_CALL = "<tool_call>"
TOOL_CALL_END = "</tool_call>"

QWEN25_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
_TOOLS_HEAD = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
_TOOLS_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)
#: Longest number accepted in tool arguments (json.loads rejects ints past 4,300 digits).
_MAX_NUMBER_CHARS = 4000
_START = Control(IM_START)
_END = Control(IM_END)
_NEWLINE = Text("\n")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_TAG_SPLIT = re.compile("(<tool_call>|</tool_call>)")
# A name is pasted between quotes by the template, so it must not need JSON escaping.
_BAD_NAME = re.compile(r'["\\\x00-\x1f]')


def _tojson(arguments: str) -> str:
    """The template's ``tool_call.arguments | tojson`` for arguments given as an object."""
    text = json.dumps(json.loads(arguments), ensure_ascii=False)
    # A lone surrogate (from a "\ud800" escape) is not text a tokenizer can take: keep it escaped.
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class _Builder:
    """Collects segments; adjacent text is merged so that each run between two control tokens is
    one :class:`Text`, exactly as a Hugging Face tokenizer splits a string at added tokens."""

    __slots__ = ("_segments", "_text")

    def __init__(self) -> None:
        self._segments: list[Segment] = []
        self._text: list[str] = []

    def text(self, text: str) -> None:
        if text:
            self._text.append(text)

    def control(self, token: str, *, required: bool = True) -> None:
        self._flush()
        self._segments.append(Control(token, required))

    def tagged(self, text: str) -> None:
        """Template text (or a call's raw model text): tool-call tags in it are control tokens,
        because the reference tokenizer turns those strings into their ids."""
        for part in _TAG_SPLIT.split(text):
            if part == TOOL_CALL or part == TOOL_CALL_END:
                self.control(part, required=False)
            else:
                self.text(part)

    def block(self, messages: Sequence[int] = ()) -> Block:
        self._flush()
        block = Block(tuple(self._segments), tuple(messages))
        self._segments = []
        return block

    def _flush(self) -> None:
        if self._text:
            self._segments.append(Text("".join(self._text)))
            self._text = []


class ChatML(Dialect):
    """Plain ChatML: ``<|im_start|>{role}[ {metadata}]\\n{content}<|im_end|>\\n`` per message.

    Tool results (``tool`` or ``observation``) render as ``tool`` turns; tools, when given, are
    described in the system turn in the Hermes format and calls are written in ``<tool_call>``
    tags (plain text on vocabularies without that token). A message's ``name`` is not rendered;
    put ``name=...`` in ``metadata`` for the original ChatML header.
    """

    name = "chatml"
    controls = (IM_START, IM_END, ENDOFTEXT, TOOL_CALL, TOOL_CALL_END)
    stop_controls = (IM_END, ENDOFTEXT)
    turns_render_independently = True
    #: System prompt used when the conversation has none (``None``: no system turn then, unless
    #: tools must be described).
    default_system: str | None = None

    # ==== Validation ====

    def validate(self, conversation: Conversation, *, strict: bool = True) -> None:
        check_not_empty(conversation)
        check_tool_calls_only_on_assistant(conversation)
        check_tool_pairing(conversation, strict=strict)
        if not strict:
            return
        for i, m in enumerate(conversation.messages):
            for call in m.tool_calls or ():
                if not call.name or _BAD_NAME.search(call.name):
                    raise ValidationError(
                        f"tool call name {call.name!r} is empty or holds quotes, backslashes or "
                        "control characters, which break the call's JSON; use a plain "
                        "identifier such as 'get_weather'",
                        index=i,
                        rule="tool-call-name",
                    )
            self._check_message(i, m)

    def _check_message(self, index: int, message: Message) -> None:
        """Dialect-specific rules for one message (strict mode)."""

    # ==== Rendering ====

    def render_blocks(
        self, conversation: Conversation, *, add_generation_prompt: bool = True
    ) -> list[Block]:
        msgs = conversation.messages
        b = _Builder()
        blocks: list[Block] = []
        first_system = bool(msgs) and msgs[0].role == "system"
        start = 0
        if first_system or conversation.tools or self.default_system is not None:
            system = msgs[0].text if first_system else self.default_system
            b.control(IM_START)
            meta = msgs[0].metadata if first_system else None
            b.text(self._header("system", meta) + "\n")
            if conversation.tools:
                b.text(system + "\n\n" if system is not None else "")
                # Tool definitions are caller text: only the template's own tags are controls.
                b.text(self._tools_section(conversation.tools))
                b.tagged(_TOOLS_TAIL)
            else:
                b.text(system or "")
            b.control(IM_END)
            b.text("\n")
            blocks.append(b.block((0,) if first_system else ()))
            start = 1 if first_system else 0
        i = start
        n = len(msgs)
        while i < n:
            m = msgs[i]
            if m.role in ("tool", "observation"):
                i = self._render_results(b, msgs, i, blocks)
                continue
            if m.role == "assistant" and m.tool_calls:
                self._render_calls(b, m)
                blocks.append(b.block((i,)))
            else:
                # The common turn, built directly: this loop is the hot path of a long chat.
                head = f"{m.role} {m.metadata}\n" if m.metadata else m.role + "\n"
                blocks.append(Block((_START, Text(head + m.text), _END, _NEWLINE), (i,)))
            i += 1
        if add_generation_prompt:
            b.control(IM_START)
            b.text("assistant\n")
            blocks.append(b.block())
        return blocks

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """The opening of a tagged call, up to the arguments when the tool is named."""
        if name is None:
            return (Control(TOOL_CALL, False), Text("\n"))
        opening = '\n{"name": ' + json.dumps(name, ensure_ascii=False) + ', "arguments": '
        return (Control(TOOL_CALL, False), Text(opening))

    def _header(self, role: str, metadata: str | None) -> str:
        return f"{role} {metadata}" if metadata else role

    def _tools_section(self, tools: Sequence[Tool]) -> str:
        """The ``# Tools`` head and one JSON line per tool (the tail with its tags is apart)."""
        return _TOOLS_HEAD + "".join(
            "\n" + json.dumps(t.definition, ensure_ascii=False) for t in tools
        )

    def _render_calls(self, b: _Builder, m: Message) -> None:
        b.control(IM_START)
        b.text(self._header("assistant", m.metadata))
        if m.content:
            b.text("\n" + m.content)
        for call in m.tool_calls or ():
            b.text("\n")
            if call.raw is not None:
                # History re-renders to the tokens the model produced.
                b.tagged(call.raw)
            else:
                b.control(TOOL_CALL, required=False)
                b.text(f'\n{{"name": "{call.name}", "arguments": {_tojson(call.arguments)}}}\n')
                b.control(TOOL_CALL_END, required=False)
        b.control(IM_END)
        b.text("\n")

    def _render_results(
        self, b: _Builder, msgs: Sequence[Message], i: int, blocks: list[Block]
    ) -> int:
        """Render the tool result at ``i``; return the index of the next message."""
        m = msgs[i]
        b.control(IM_START)
        b.text(self._header("tool", m.metadata) + "\n" + m.text)
        b.control(IM_END)
        b.text("\n")
        blocks.append(b.block((i,)))
        return i + 1

    # ==== Parsing ====

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> ChatMLStreamParser:
        """A fresh parser; ``id_factory`` makes tool call ids (deterministic ones in tests)."""
        return ChatMLStreamParser(id_factory=id_factory, stop_controls=self.stop_controls)


class Qwen25(ChatML):
    """The Qwen2.5 preset: byte-exact with the official Qwen2.5 chat template."""

    name = "qwen2.5"
    default_system = QWEN25_DEFAULT_SYSTEM

    def _check_message(self, index: int, message: Message) -> None:
        if message.content is None and not (message.role == "assistant" and message.tool_calls):
            # The template fails on a missing content here, or prints "None".
            raise ValidationError(
                f"a {message.role} message needs content for the Qwen2.5 template; "
                'set content to a string (it may be "")',
                index=index,
                rule="content",
            )
        if message.metadata:
            raise ValidationError(
                "the Qwen2.5 template has no header metadata and would drop it; remove "
                "'metadata' (or render with dialect 'chatml')",
                index=index,
                rule="metadata",
            )

    def _header(self, role: str, metadata: str | None) -> str:
        return role  # the template writes no metadata

    def _render_results(
        self, b: _Builder, msgs: Sequence[Message], i: int, blocks: list[Block]
    ) -> int:
        # Consecutive results share one user turn, one <tool_response> block each.
        j = i
        b.control(IM_START)
        b.text("user")
        while j < len(msgs) and msgs[j].role in ("tool", "observation"):
            b.text("\n<tool_response>\n" + msgs[j].text + "\n</tool_response>")
            j += 1
        b.control(IM_END)
        b.text("\n")
        blocks.append(b.block(range(i, j)))
        return j


# ==== Parsing ====

_WS = " \t\r\n"
_NON_WS = re.compile(r"[^ \t\r\n]")
_STR_RUN = re.compile(r'[^"\\\x00-\x1f]+')
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z")
_NUM_CHARS = frozenset("0123456789+-.eE")
_HEX = frozenset("0123456789abcdefABCDEF")
_ESCAPES = frozenset('"\\/bfnrtu')
_FENCE_INFO = ("", "json")
_MAX_FENCE_INFO = 32
# Deeper arguments are refused: json.loads (used to check a finished call) recurses per level.
_MAX_DEPTH = 128
_ARG_KEYS = ("arguments", "parameters")

# JSON scanner states.
_VALUE, _VALUE_OR_CLOSE, _KEY_OR_CLOSE, _KEY, _COLON, _AFTER = range(6)
_STRING, _ESCAPE, _UNICODE, _NUMBER_ST, _LITERAL = range(6, 11)
_LITERALS = {"t": "rue", "f": "alse", "n": "ull"}


def _is_ws(text: str) -> bool:
    return not text.strip(_WS)


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``."""
    start = text.find(marker[0], max(0, len(text) - len(marker) + 1))
    if start < 0:  # the common case: no tag can start in the tail
        return 0
    for k in range(min(len(text) - start, len(marker) - 1), 0, -1):
        if text.endswith(marker[:k]):
            return k
    return 0


class _CallScanner:
    """An incremental, strict JSON checker for one candidate call object.

    It validates as it goes (so a malformed object is detected at the first bad character),
    records the top-level ``name`` and the ``arguments`` (or ``parameters``) value, and keeps the
    raw arguments text, marking how much of it is *safe*: a valid JSON prefix that appending
    closers (and a quote) turns into a valid object. Only safe text is streamed, so a call that
    is cut off can still be closed with valid arguments.
    """

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.state = _VALUE
        self.done = False
        self.error: str | None = None
        self.name: str | None = None
        self.name_invalid = False
        self.saw_name_key = False
        self.args_state: Literal["none", "object", "string", "done", "null", "invalid"] = "none"
        self.args_error: str | None = None
        self._args_base = 0
        self._pending: list[str] = []
        self._pending_len = 0
        self._safe_len = 0
        self._safe_in_string = False
        self._key: str | None = None  # the current top-level key
        self._capture: list[str] | None = None  # raw text of a top-level string being kept
        self._capture_kind = ""  # "key" | "name" | "args"
        self._str_is_key = False
        self._number: list[str] = []
        self._literal = ""
        self._unicode_left = 0

    # -- arguments text --

    def take_safe(self) -> str:
        """The safe arguments text not yet taken."""
        if self._safe_len == 0:
            return ""
        if self._safe_len == self._pending_len:
            out = self._pending[0] if len(self._pending) == 1 else "".join(self._pending)
            self._pending = []
            self._pending_len = self._safe_len = 0
            return out
        text = "".join(self._pending)
        out, rest = text[: self._safe_len], text[self._safe_len :]
        self._pending = [rest] if rest else []
        self._pending_len = len(rest)
        self._safe_len = 0
        return out

    def completion(self) -> str:
        """What turns the taken safe text into a complete JSON object."""
        closers = "".join("}" if c == "{" else "]" for c in reversed(self.stack[self._args_base :]))
        return ('"' if self._safe_in_string else "") + closers

    def _args_add(self, text: str) -> None:
        self._pending.append(text)
        self._pending_len += len(text)

    # -- scanning --

    def feed(self, text: str) -> int:
        """Scan ``text``; return how many characters were consumed. Stops after the closing
        ``}`` of the object (``done``) or at a bad character (``error``)."""
        i = 0
        n = len(text)
        while i < n:
            st = self.state
            in_args = self.args_state == "object"
            if st == _STRING:
                m = _STR_RUN.match(text, i)
                if m is not None:
                    run = m.group()
                    if self._capture is not None:
                        self._capture.append(run)
                    if in_args:
                        self._args_add(run)
                        if not self._str_is_key:
                            self._mark_safe(in_string=True)
                    i = m.end()
                    continue
            c = text[i]
            if not self._step(c):
                return i
            i += 1
            if in_args:
                # The char belongs to the arguments if they were open before it (the closing
                # brace included); the opening brace is added by _start_value.
                self._args_add(c)
            if self.args_state == "object":
                st = self.state
                if st in (_AFTER, _KEY_OR_CLOSE, _VALUE_OR_CLOSE):
                    self._mark_safe(in_string=False)
                elif st == _STRING and not self._str_is_key:
                    self._mark_safe(in_string=True)
            elif in_args:  # the arguments object just closed
                self._safe_len = self._pending_len
                self._safe_in_string = False
            if self.done:
                return i
        return i

    def _mark_safe(self, *, in_string: bool) -> None:
        self._safe_len = self._pending_len
        self._safe_in_string = in_string

    def _fail(self, message: str) -> bool:
        self.error = message
        return False

    def _step(self, c: str) -> bool:
        """Advance by one character; False (with ``error``) if it cannot continue the JSON."""
        st = self.state
        if st == _STRING:
            if c == '"':
                self._end_string()
            elif c == "\\":
                self.state = _ESCAPE
            else:  # a control character (the fast path took everything else)
                return self._fail(f"control character {c!r} in a JSON string")
            if self._capture is not None:
                self._capture.append(c)
            return True
        if st == _ESCAPE:
            if c not in _ESCAPES:
                return self._fail(f"invalid escape '\\{c}' in a JSON string")
            self.state = _UNICODE if c == "u" else _STRING
            self._unicode_left = 4
            if self._capture is not None:
                self._capture.append(c)
            return True
        if st == _UNICODE:
            if c not in _HEX:
                return self._fail(f"invalid \\u escape digit {c!r}")
            self._unicode_left -= 1
            if self._unicode_left == 0:
                self.state = _STRING
            if self._capture is not None:
                self._capture.append(c)
            return True
        if st == _NUMBER_ST:
            if c in _NUM_CHARS:
                self._number.append(c)
                return True
            number = "".join(self._number)
            if not _NUMBER.match(number):
                return self._fail(f"invalid number {number[:40]!r}")
            if len(number) > _MAX_NUMBER_CHARS:
                # Python's json refuses to read such integers back; stop before streaming it.
                return self._fail(f"a number of {len(number)} characters is too long")
            self._end_value()
            return self._step(c)
        if st == _LITERAL:
            if c != self._literal[0]:
                return self._fail(f"unexpected {c!r} in a JSON literal")
            self._literal = self._literal[1:]
            if not self._literal:
                self._end_value()
            return True
        if c in _WS:
            return True
        if st == _VALUE or st == _VALUE_OR_CLOSE:
            if c == "]" and st == _VALUE_OR_CLOSE:
                return self._close(c)
            return self._start_value(c)
        if st == _KEY_OR_CLOSE or st == _KEY:
            if c == "}" and st == _KEY_OR_CLOSE:
                return self._close(c)
            if c != '"':
                return self._fail(f"expected a string key, got {c!r}")
            self.state = _STRING
            self._str_is_key = True
            if len(self.stack) == 1:
                self._capture = ['"']
                self._capture_kind = "key"
            return True
        if st == _COLON:
            if c != ":":
                return self._fail(f"expected ':', got {c!r}")
            self.state = _VALUE
            return True
        # _AFTER: a value ended
        if c == ",":
            self.state = _KEY if self.stack[-1] == "{" else _VALUE
            return True
        if c == "}" or c == "]":
            return self._close(c)
        return self._fail(f"expected ',' or a closing bracket, got {c!r}")

    def _start_value(self, c: str) -> bool:
        top = len(self.stack) == 1
        key = self._key if top else None
        is_args = top and key in _ARG_KEYS and self.args_state == "none"
        if top and key == "name" and c != '"':
            self.name_invalid = True
        if c == "{" or c == "[":
            if len(self.stack) >= _MAX_DEPTH:
                return self._fail(f"JSON nested deeper than {_MAX_DEPTH} levels")
            if is_args:
                if c == "{":
                    self.args_state = "object"
                    self._args_base = len(self.stack)
                    self._args_add(c)
                else:
                    self._invalid_args("arguments is an array, not an object")
            self.stack.append(c)
            self.state = _KEY_OR_CLOSE if c == "{" else _VALUE_OR_CLOSE
            if is_args and c == "{":
                self._mark_safe(in_string=False)
            return True
        if c == '"':
            self.state = _STRING
            self._str_is_key = False
            if top and (key == "name" or is_args):
                self._capture = ['"']
                self._capture_kind = "name" if key == "name" else "args"
                if is_args:
                    self.args_state = "string"
            return True
        if c == "-" or (c.isdigit() and c.isascii()):
            self.state = _NUMBER_ST
            self._number = [c]
            if is_args:
                self._invalid_args("arguments is a number, not an object")
            return True
        rest = _LITERALS.get(c)
        if rest is not None:
            self.state = _LITERAL
            self._literal = rest
            if is_args:
                if c == "n":
                    self.args_state = "null"
                else:
                    self._invalid_args("arguments is a boolean, not an object")
            return True
        return self._fail(f"expected a JSON value, got {c!r}")

    def _invalid_args(self, problem: str) -> None:
        self.args_state = "invalid"
        self.args_error = problem

    def _end_string(self) -> None:
        if self._str_is_key:
            self.state = _COLON
            if self._capture is not None:
                self._capture.append('"')
                self._key = json.loads("".join(self._capture))
                if self._key == "name":
                    self.saw_name_key = True
                self._capture = None
            return
        if self._capture is not None:
            self._capture.append('"')
            value = json.loads("".join(self._capture))
            kind = self._capture_kind
            self._capture = None
            if kind == "name":
                if value and self.name is None:
                    self.name = value
                elif not value:
                    self.name_invalid = True
            elif kind == "args":
                self._decode_string_args(value)
        self._end_value()

    def _decode_string_args(self, value: str) -> None:
        # Some models write the arguments as a JSON string holding the object.
        try:
            decoded = json.loads(value)
        except (ValueError, RecursionError):
            decoded = None
        if isinstance(decoded, dict):
            self.args_state = "done"
            self._pending = [value]
            self._pending_len = self._safe_len = len(value)
        else:
            self._invalid_args("arguments is a string that does not hold a JSON object")

    def _end_value(self) -> None:
        self.state = _AFTER
        if not self.stack:
            self.done = True

    def _close(self, c: str) -> bool:
        want = "{" if c == "}" else "["
        if not self.stack or self.stack[-1] != want:
            return self._fail(f"unexpected {c!r}")
        self.stack.pop()
        if self.args_state == "object" and len(self.stack) == self._args_base:
            self.args_state = "done"
        self._end_value()
        return True


@dataclass
class _OpenCall:
    index: int
    id: str
    name: str
    arguments: list[str] = field(default_factory=list)
    ended: bool = False


# Parser modes.
_LEAD, _TEXT, _TAG_OPEN, _FENCE_OPEN, _FENCE_PRE, _JSON, _TAG_TAIL, _FENCE_TAIL = range(8)


class ChatMLStreamParser(StreamParser):
    """Incremental parser of one ChatML assistant turn (text plus Hermes-style tool calls).

    Every decision depends only on the characters seen, never on how they were chunked, so any
    chunking yields the same events (up to how deltas are split) and the same result. Work per
    feed is proportional to the new text: text is searched with ``str.find`` and only a suffix
    shorter than a tag is ever held back; a candidate call object is scanned once, incrementally.
    """

    def __init__(
        self,
        *,
        id_factory: Callable[[], str] | None = None,
        stop_controls: Sequence[str] = (IM_END, ENDOFTEXT),
    ) -> None:
        self._new_id = id_factory or new_call_id
        self._stops = frozenset(stop_controls)
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
        self._scan: _CallScanner | None = None
        self._call: _OpenCall | None = None
        self._tail_junk = False
        self._events: list[Event] = []
        self._content: list[str] = []
        self._calls: list[ToolCall] = []
        self._ncalls = 0
        self._warnings: list[str] = []
        self._stopped = False
        self._finish: Literal["stop", "length"] | None = None

    # ==== Public interface ====

    def feed(self, piece: Piece) -> list[Event]:
        if self._stopped or self._finish is not None:
            return []
        if isinstance(piece, Control):
            if piece.token in self._stops:
                self._stopped = True  # the turn is over; anything after it is not ours
                return []
            # Tags arrive as control tokens or as plain text; both parse the same way.
            text = piece.token
        else:
            text = piece
        self._process(text)
        self._flush_args()
        out, self._events = self._events, []
        return out

    def finish(self, reason: Literal["stop", "length"] = "stop") -> list[Event]:
        if self._finish is not None:
            return []
        self._finish = reason
        mode = self._mode
        if mode == _TEXT:
            hold, self._hold = self._hold, ""
            self._emit_text(hold)
        elif mode == _LEAD:
            if self._first and self._lead:
                self._out_text(self._lead)
        elif mode == _JSON and self._call is not None:
            what = "was cut off" if reason == "length" else "is unterminated"
            self._break_call(f"tool call {self._call.index} {what}")
            self._end_call()
        elif mode in (_TAG_OPEN, _FENCE_OPEN, _FENCE_PRE, _JSON):
            warn = self._kind == "tag" or (self._scan is not None and self._scan.saw_name_key)
            self._degrade("an unterminated tool call was kept as text", warn=warn)
        elif mode == _TAG_TAIL or mode == _FENCE_TAIL:
            self._raw.append(self._hold)
            self._hold = ""
            self._end_call()
        self._drop_ws = ""
        self._events.append(Finish(finish_reason_for(bool(self._calls), reason)))
        out, self._events = self._events, []
        return out

    def result(self) -> ParseResult:
        content = "".join(self._content)
        calls = tuple(self._calls)
        # One ChatML turn is one assistant message: text and calls together, as it re-renders.
        messages = [Message(role="assistant", content=content or None, tool_calls=calls or None)]
        reason = finish_reason_for(bool(calls), self._finish or "stop")
        return ParseResult(messages=messages, finish_reason=reason, warnings=list(self._warnings))

    # ==== Output ====

    def _out_text(self, text: str) -> None:
        if text:
            self._content.append(text)
            self._events.append(TextDelta(text))

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
        self._out_text(text)

    def _flush_args(self) -> None:
        call, scan = self._call, self._scan
        if call is None or scan is None or call.ended:
            return
        text = scan.take_safe()
        if text:
            call.arguments.append(text)
            self._events.append(ToolCallDelta(call.index, text))

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
        if c == "{" or c == "`":
            self._prefix = ws
            self._raw = []
            if c == "{":
                self._kind = "bare"
                self._scan = _CallScanner()
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
        i = buf.find(TOOL_CALL)
        if i < 0:
            end = len(buf) - _partial_suffix(buf, TOOL_CALL)
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
            self._out_text(before)
        self._kind = "tag"
        self._raw = [TOOL_CALL]
        self._mode = _TAG_OPEN
        return buf[i + len(TOOL_CALL) :]

    def _on_open(self, text: str) -> str:
        m = _NON_WS.search(text)
        if m is None:
            self._raw.append(text)
            return ""
        j = m.start()
        self._raw.append(text[:j])
        if text[j] != "{":
            where = "<tool_call>" if self._mode == _TAG_OPEN else "the ```json fence"
            self._degrade(
                f"{where} is not followed by a JSON object; kept as text",
                warn=self._mode == _TAG_OPEN,
            )
            return text[j:]
        self._scan = _CallScanner()
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
                info = self._fence[3:].strip(_WS).lower()
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
        if self._kind == "tag" and self._call is None and scan.name is not None:
            self._commit(scan.name)  # a tagged call streams as soon as its name is known
        if scan.error is not None:
            if self._call is not None:
                self._break_call(f"tool call {self._call.index} has malformed JSON ({scan.error})")
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
            if self._call is None:
                self._degrade("<tool_call> holds no call name; kept as text", warn=True)
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
        i = buf.find(TOOL_CALL_END)
        k = buf.find(TOOL_CALL)
        if i >= 0 and (k < 0 or i < k):
            self._tail(buf[:i])
            self._raw.append(TOOL_CALL_END)
            self._end_call()
            return buf[i + len(TOOL_CALL_END) :]
        if k >= 0:
            # The next call began without closing this one.
            self._tail(buf[:k])
            self._warnings.append(f"tool call {self._ncalls - 1} has no </tool_call>")
            self._end_call()
            return buf[k:]
        keep = max(_partial_suffix(buf, TOOL_CALL_END), _partial_suffix(buf, TOOL_CALL))
        self._tail(buf[: len(buf) - keep])
        self._hold = buf[len(buf) - keep :]
        return ""

    def _tail(self, text: str) -> None:
        if text:
            self._raw.append(text)
            if not self._tail_junk and not _is_ws(text):
                self._tail_junk = True
                self._warnings.append(
                    f"text after the JSON of tool call {self._ncalls - 1} was ignored"
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
        self._call = _OpenCall(self._ncalls, self._new_id(), name)
        self._ncalls += 1
        self._tail_junk = False
        self._prefix = ""  # the separator before a call is not content
        self._events.append(ToolCallStart(self._call.index, self._call.id, name))

    def _close_args(self) -> None:
        """The object closed: emit what is left of the arguments and end the call."""
        call, scan = self._call, self._scan
        assert call is not None and scan is not None
        self._flush_args()
        if not call.arguments:
            if scan.args_state == "invalid":
                self._warnings.append(
                    f"tool call {call.index}: {scan.args_error}; used empty arguments"
                )
            call.arguments.append("{}")
            self._events.append(ToolCallDelta(call.index, "{}"))
        call.ended = True
        self._events.append(ToolCallEnd(call.index))

    def _break_call(self, reason: str) -> None:
        """A committed call cannot be completed: close its arguments validly and say so."""
        call, scan = self._call, self._scan
        assert call is not None and scan is not None
        if call.ended:
            self._warnings.append(reason)
            return
        self._flush_args()
        if scan.args_state == "object":
            fix = scan.completion()
            call.arguments.append(fix)
            self._events.append(ToolCallDelta(call.index, fix))
            shown = fix if len(fix) <= 16 else fix[:16] + "…"
            reason += f"; its arguments were closed with {shown!r}"
        self._warnings.append(reason)
        if scan.args_state == "object":
            scan.args_state = "done"
        self._close_args()

    def _end_call(self) -> None:
        call = self._call
        assert call is not None
        raw = "".join(self._raw)
        arguments = "".join(call.arguments)
        try:
            tc = ToolCall(id=call.id, name=call.name, arguments=arguments, raw=raw)
        except (ValueError, RecursionError):  # unreachable: the scanner checks the JSON
            tc = ToolCall(id=call.id, name=call.name, arguments="{}", raw=raw)
            self._warnings.append(f"tool call {call.index} arguments were invalid")
        self._calls.append(tc)
        self._call = None
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
