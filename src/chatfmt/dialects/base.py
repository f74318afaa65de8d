"""The dialect interface: render a conversation to blocks, parse model output back.

A dialect is one module: it knows its layout, its control tokens and its output parser, and
declares the rest as class attributes — the validation rules it lists, how it reasons, the
fingerprint of its chat template (detection), and how its turns end in training data — so a
dialect from another package is validated, detected and trained on exactly like a built-in one.
Everything else (encoding, caching, counting, streaming from ids) is shared and lives here.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..decoding import decode_turn, split_controls
from ..errors import ReasoningOptionError
from ..events import Event, FinishReason, IncompleteCall, ParseResult
from ..grammar import WORDS, Grammar, ToolLike
from ..messages import Conversation, Message, Tool, ToolCall, as_conversation, new_call_id
from ..segments import Block, BlockBuilder, BlockEncoder, Control, RenderedPrompt, Segment
from ..tokenizers.base import Piece, Tokenizer
from ..validation import MessageRule, check_common, check_messages
from .fingerprint import Fingerprint

ConversationLike = Conversation | Sequence[Message | Mapping[str, Any]]
ToolsLike = Sequence[Tool | Mapping[str, Any]] | None
#: How a family reasons: ``never``; ``always`` (every reply thinks first); ``switch`` (thinking
#: is turned on or off per request, as the template's ``enable_thinking`` / ``thinking`` does).
ReasoningMode = Literal["never", "always", "switch"]


@dataclass(frozen=True, slots=True)
class EndRule:
    """How a family's assistant turn ends in training data, where "the reply carries its own
    stop token" does not hold (see :mod:`chatfmt.training.rules`).

    ``closing``: the stop token appended (and trained) after the last trained reply when that
    reply holds no stop token (``None``: the generic choice, the last stop token the tokenizer
    has). ``history_end``/``served_end``: the history writes ``history_end`` where the model
    emitted ``served_end``; the last reply is trained with ``served_end`` in its place, an
    earlier one keeps ``history_end`` (what a later turn's prompt shows) without loss on it.
    """

    closing: str | None = None
    history_end: str | None = None
    served_end: str | None = None


class StreamParser(ABC):
    """Parses one assistant turn incrementally, piece by piece: the skeleton a dialect's parser
    fills in.

    ``feed`` never raises on model output: output that does not parse degrades to text and the
    reason is recorded in :attr:`ParseResult.warnings`. Feeding the whole output in one piece
    and feeding it in any chunking produce the same events' concatenation and the same result.

    The skeleton keeps what every parser shares: the stop set (a stop control ends the turn,
    whatever follows is not ours), finishing once, call ids and warnings. A parser implements
    :meth:`on_text`, :meth:`on_finish` and :meth:`result`, and :meth:`on_control` when control
    tokens mean more than their text.
    """

    #: Set when the text itself ended the turn (a run request's closing fence, see
    #: ``parsers/fence.py``): the decoder stops there, as at a stop token.
    turn_over: bool = False

    def __init__(
        self,
        *,
        id_factory: Callable[[], str] | None = None,
        stop_controls: Iterable[str] = (),
    ) -> None:
        self._new_id = id_factory or new_call_id
        self._stops = frozenset(stop_controls)
        self._live = True  # neither stopped nor finished
        self._finish: Literal["stop", "length"] | None = None
        self._warnings: list[str] = []

    def feed(self, piece: Piece) -> list[Event]:
        """Consume text or a control token; return the events it completes."""
        if type(piece) is str:  # the hot path: one call per generated token
            return self.on_text(piece) if piece and self._live else []
        if not self._live:
            return []
        if not isinstance(piece, Control):
            return self.on_text(str(piece)) if piece else []  # a str subclass
        if piece.token in self._stops:
            self._live = False  # the turn is over; anything after it is not ours
            return []
        return self.on_control(piece.token)

    def finish(self, reason: Literal["stop", "length"] = "stop") -> list[Event]:
        """End of output (a stop token, or ``length`` when cut by max_tokens)."""
        if self._finish is not None:
            return []
        self._finish = reason
        self._live = False
        return self.on_finish(reason)

    @abstractmethod
    def on_text(self, text: str) -> list[Event]:
        """Consume generated text (never empty)."""

    @property
    def in_thought(self) -> bool | None:
        """Where the reply stands with its thought: ``True`` inside an open one, ``False`` once
        the answer began (or for a format without reasoning), ``None`` while undecided (the
        reply's start, before a thought opens or the answer begins). The generation driver
        counts a thinking budget with it (:class:`chatfmt.driver.ThoughtBudget`)."""
        return False

    def on_control(self, token: str) -> list[Event]:
        """Consume a control token that is not a stop; by default it reads as its own text
        (as the reference decoders write it), so ids and text parse alike."""
        return self.on_text(token)

    @abstractmethod
    def on_finish(self, reason: Literal["stop", "length"]) -> list[Event]:
        """Flush what is held, close what is open; the last event is :class:`Finish`."""

    @abstractmethod
    def result(self) -> ParseResult:
        """The parsed turn; call after :meth:`finish`."""


class Dialect(ABC):
    """A chat format: layout, control tokens, validation and output parsing."""

    #: Registry name (``"chatml"``, ``"qwen2.5"``, ``"chatglm3"``).
    name: str = ""
    #: Control tokens the dialect renders or recognises in output.
    controls: tuple[str, ...] = ()
    #: Control tokens that end the assistant's turn.
    stop_controls: tuple[str, ...] = ()
    #: Control tokens the reference template writes inside its own text (see
    #: :meth:`BlockBuilder.tagged`).
    inline_controls: tuple[str, ...] = ()
    #: Whether a run of tool results is one turn (one of :meth:`_turns`, written by one
    #: :meth:`_render_results` call, kept in one block) or each result a turn of its own.
    results_together: bool = True
    #: The markup of the family's chat template, by which :func:`~chatfmt.detect_dialect`
    #: recognises its models (``None``: never detected, only chosen by name).
    fingerprint: Fingerprint | None = None
    #: How a turn ends in training data (see :class:`EndRule`; most families need none).
    #: Inherited, unlike :attr:`fingerprint`: a subclass writes its parent's turns unless it
    #: says otherwise, while detecting it for its parent's models would serve it wrongly.
    end_rule: EndRule = EndRule()
    #: Whether a reply is plain text and calls, so that an answer in words is a reply that
    #: opens with a word (:meth:`answer_grammar`).
    reply_in_words: bool = False
    #: Per-message rules of strict validation (shared ones from :mod:`chatfmt.validation`).
    rules: tuple[MessageRule, ...] = ()

    @property
    def text_controls(self) -> tuple[str, ...]:
        """Control tokens split out of output that arrives as text: :attr:`controls` unless a
        dialect leaves out those that are also ordinary words, such as ChatGLM3's ``sop`` (the
        model never generates it, but ``isopropyl`` contains it)."""
        return self.controls

    #: Whether a turn (a user message and what follows it) renders the same whatever turns came
    #: before it, given the same leading system messages and tools. Lets :class:`~chatfmt.Budget`
    #: re-render only the end of a growing chat; leave it False for formats that move text
    #: between turns (such as a system prompt folded into the last user message).
    turns_render_independently: bool = False

    def renders_turns_independently(self, conversation: Conversation) -> bool:
        """Whether :attr:`turns_render_independently` holds for this conversation (a dialect
        may lose the property for some histories)."""
        return self.turns_render_independently

    #: Whether, in interpreter mode, a fenced Python block in the reply is a run request
    #: (``parsers/fence.py``). False where the format has its own interpreter turn (ChatGLM3).
    fenced_code_runs: bool = True

    #: How this family reasons (see :data:`ReasoningMode`).
    reasoning: ReasoningMode = "never"
    #: Effort levels the format itself renders (gpt-oss's ``Reasoning: high``); empty: none.
    reasoning_efforts: tuple[str, ...] = ()
    #: Whether replies think first (for ``switch`` families: the template's default, on).
    thinking: bool = False

    def with_reasoning(self, *, enabled: bool | None = None, effort: str | None = None) -> Dialect:
        """This dialect for a request's reasoning controls: ``enabled`` turns thinking on or
        off (``None``: the default), ``effort`` asks for a level (``"none"`` means off).

        A family with effort levels renders the level; a family that can only switch thinking
        takes any other level as "on" (clients such as agent CLIs send an effort to every
        model). What the family cannot do raises :class:`ReasoningOptionError`, which names
        what it can: thinking on for a model that never reasons, off for one that always does,
        a level outside :attr:`reasoning_efforts`.
        """
        if effort is not None and effort != "none" and self.reasoning_efforts:
            if effort not in self.reasoning_efforts:
                raise ReasoningOptionError(
                    f"{self.name} knows the reasoning efforts {', '.join(self.reasoning_efforts)};"
                    f" {effort!r} is not one of them",
                    option="effort",
                )
        if effort == "none":
            if enabled is True:
                raise ReasoningOptionError(
                    "reasoning effort 'none' turns thinking off, but thinking was asked for; "
                    "send one of the two",
                    option="effort",
                )
            enabled = False
        elif effort is not None and enabled is None:
            enabled = True
        if enabled is None or (enabled == self.thinking and not self.reasoning_efforts):
            return self
        if enabled and self.reasoning == "never":
            raise ReasoningOptionError(
                f"the {self.name} format has no reasoning: its model answers without thinking "
                "first; remove the reasoning controls (reasoning_effort, enable_thinking, "
                "reasoning)",
                option="effort" if effort is not None else "thinking",
            )
        if not enabled and self.reasoning == "always":
            raise ReasoningOptionError(
                f"the {self.name} model always thinks before it answers and has no switch to "
                "turn that off; remove the request's 'thinking off' control"
                + (
                    f" (or lower the effort to {self.reasoning_efforts[0]!r})"
                    if self.reasoning_efforts
                    else ""
                ),
                option="effort" if effort is not None else "thinking",
            )
        if self.reasoning == "never":
            return self  # off, as it always is
        configured = copy.copy(self)
        configured.thinking = enabled
        if effort is not None and effort in self.reasoning_efforts:
            configured._set_effort(effort)
        return configured

    def after_thought(self, grammar: Grammar) -> Grammar:
        """``grammar``, a whole-reply one (a required call, a JSON reply, an answer in words),
        as this dialect's reply must take it: a thinking model writes its thought first (or
        closes the one its prompt opened). Formats without reasoning return it as it is."""
        return grammar

    def close_thought(self) -> tuple[Segment, ...] | None:
        """What closes an open thought, exactly as this family writes it after its reasoning
        (Qwen3's ``\\n</think>\\n\\n``, harmony's switch to the ``final`` channel): the
        segments a thinking budget appends when the reply reaches it, before the model
        answers. ``None``: the format has no thought to close, or (a plugin that reasons) does
        not say how, and a thinking budget is refused for it."""
        return None

    def with_tools(self, tools: Sequence[ToolLike]) -> Dialect:
        """This dialect for a request that offers ``tools``: a format whose calls carry
        untyped text (Qwen3-Coder's XML parameters) reads each value by its tool's schema.
        Most formats write JSON and need nothing: they return ``self``."""
        return self

    def for_reply_to(self, conversation: Conversation) -> Dialect:
        """This dialect for parsing the reply to ``conversation``: a format whose generation
        prompt opens the thought in some conversations but not in others (DeepSeek R1 and
        V3.1 write none after tool results) says so here. Most return ``self``."""
        return self

    def _set_effort(self, effort: str) -> None:
        """Render ``effort`` (one of :attr:`reasoning_efforts`) from now on: a dialect that
        lists efforts implements this."""
        raise NotImplementedError(
            f"{type(self).__name__} lists reasoning efforts but cannot set one"
        )

    # ==== Rendering ====

    def validate(self, conversation: Conversation, *, strict: bool = True) -> None:
        """Raise :class:`~chatfmt.errors.ValidationError` if the conversation breaks a rule.

        ``strict=False`` (training data) checks only what rendering itself needs. By default:
        the rules every format shares, then (strict) the dialect's :attr:`rules`; a dialect
        with rules of a whole conversation adds them after ``super().validate``.
        """
        check_common(conversation, strict=strict)
        if strict:
            check_messages(self.name, conversation, self.rules)

    def render_blocks(
        self, conversation: Conversation, *, add_generation_prompt: bool = True
    ) -> list[Block]:
        """The conversation as blocks of control tokens and text (no validation): what
        :meth:`write` writes into a fresh :class:`BlockBuilder`."""
        b = self._builder()
        self.write(b, conversation, add_generation_prompt)
        return b.blocks

    def write(
        self, b: BlockBuilder, conversation: Conversation, add_generation_prompt: bool
    ) -> None:
        """The layout: write the conversation into ``b``, one block per turn (or per run of
        turns the cache should keep together), each naming the messages it renders. (Not
        abstract: a dialect written before this method overrides :meth:`render_blocks`.)"""
        raise NotImplementedError(
            f"dialect {self.name!r} implements neither write nor render_blocks"
        )

    def _builder(self) -> BlockBuilder:
        return BlockBuilder(inline_controls=self.inline_controls)

    def _turns(self, msgs: Sequence[Message], start: int = 0) -> Iterator[tuple[int, int]]:
        """The turns of ``msgs[start:]`` as index ranges ``(i, j)``: a run of tool results is
        one turn when :attr:`results_together`, any other message a turn of its own."""
        i, n, together = start, len(msgs), self.results_together
        while i < n:
            j = results_end(msgs, i) if together else i
            j = max(j, i + 1)
            yield i, j
            i = j

    def _render_results(self, b: BlockBuilder, results: Sequence[Message]) -> None:
        """The turn of a run of tool results (one of :meth:`_turns`), for a layout that
        writes results through it."""
        raise NotImplementedError(f"dialect {self.name!r} does not write tool results")

    def render(
        self,
        conversation: ConversationLike,
        tokenizer: Tokenizer,
        *,
        tools: ToolsLike = None,
        add_generation_prompt: bool = True,
        strict: bool = True,
        encoder: BlockEncoder | None = None,
    ) -> RenderedPrompt:
        """Validate, render and encode: the exact prompt ids for ``tokenizer``.

        Pass a long-lived ``encoder`` (a :class:`BlockEncoder` on the same tokenizer) to reuse
        the ids of blocks already encoded, so a growing chat pays only for its new turns.
        """
        conv = as_conversation(conversation, tools)
        self.validate(conv, strict=strict)
        blocks = self.render_blocks(conv, add_generation_prompt=add_generation_prompt)
        return (encoder or BlockEncoder(tokenizer, max_entries=0)).encode(blocks)

    def render_text(
        self,
        conversation: ConversationLike,
        *,
        tools: ToolsLike = None,
        add_generation_prompt: bool = True,
        strict: bool = True,
    ) -> str:
        """The prompt as text, control tokens written out (for reading, not for tokenizing)."""
        conv = as_conversation(conversation, tools)
        self.validate(conv, strict=strict)
        blocks = self.render_blocks(conv, add_generation_prompt=add_generation_prompt)
        return "".join(b.text for b in blocks)

    # ==== Parsing ====

    @abstractmethod
    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> StreamParser:
        """A fresh parser for one assistant turn (what follows the generation prompt);
        ``id_factory`` makes its tool call ids (deterministic ones in tests), else the
        dialect's own kind of id."""

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """Segments to put after the generation prompt so that the model's reply is a call of
        tool ``name`` (``None``: of some tool). Empty when the dialect cannot force one; the
        reply then starts fresh. The parser must be fed these segments first."""
        return ()

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar | None:
        """A grammar for calls of ``tools`` in this dialect's syntax (``None``: it has none).

        ``required``: the whole reply must be calls (``tool_choice`` "required" or named);
        otherwise the grammar is lazy, switched on when the model starts a call, and a reply
        in plain text is left alone. ``single``: exactly one call (``parallel_tool_calls:
        false``). Tool names are limited to ``tools`` and arguments follow each tool's
        ``parameters`` schema; :class:`~chatfmt.grammar.SchemaError` for a ``strict`` tool
        whose schema asks for what a grammar cannot enforce.
        """
        return None

    def answer_grammar(self) -> Grammar | None:
        """A grammar for a reply in words only (no call, no JSON, no code), for a turn that
        must answer rather than call: a reply that opens with a word where the format's reply
        is plain text (:attr:`reply_in_words`); ``None`` where the reply has a structure of its
        own (a metadata line, channels) that such a grammar would break."""
        return WORDS if self.reply_in_words else None

    def interpreter_observation(self, output: str) -> str:
        """The observation text for code-interpreter output (as the model was trained to read
        it); plain text unless the dialect has a convention."""
        return output

    def stop_ids(self, tokenizer: Tokenizer) -> list[int]:
        """Ids that end the assistant's turn, for this tokenizer."""
        return [tokenizer.control_id(t) for t in self.stop_controls if tokenizer.has_control(t)]

    def stop_strings(self) -> list[str]:
        """Stop sequences as text, for engines that only accept strings."""
        return list(self.stop_controls)

    def parse(
        self,
        output: str | Sequence[int],
        tokenizer: Tokenizer | None = None,
        *,
        finish_reason: Literal["stop", "length"] = "stop",
    ) -> ParseResult:
        """Parse a complete assistant output, given as token ids or as text.

        Ids need the ``tokenizer``; text has control tokens written out. A trailing stop token
        is allowed. Never raises on malformed output. This is :func:`chatfmt.decoding.decode_turn`:
        the same pipeline that streams.
        """
        return decode_turn(self, output, tokenizer, finish_reason=finish_reason)

    def pieces(self, output: str | Sequence[int], tokenizer: Tokenizer | None) -> list[Piece]:
        """Output as text runs and control tokens (text: only :attr:`text_controls` split)."""
        if isinstance(output, str):
            return split_controls(output, self.text_controls)
        if tokenizer is None:
            raise TypeError("parsing token ids needs the tokenizer that produced them")
        return tokenizer.decode_pieces(output)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


#: The roles of a tool's result (``observation``: ChatGLM's name for it).
RESULT_ROLES = ("tool", "observation")


def is_result(m: Message) -> bool:
    return m.role in RESULT_ROLES


def results_end(msgs: Sequence[Message], i: int) -> int:
    """The index after the run of tool results that starts at ``i``."""
    j = i
    while j < len(msgs) and msgs[j].role in RESULT_ROLES:
        j += 1
    return j


def last_of(msgs: Sequence[Message], *roles: str) -> int:
    """The index of the last message with one of ``roles`` (-1: none): where the templates'
    history rules cut (reasoning kept only after the last user message)."""
    for i in range(len(msgs) - 1, -1, -1):
        if msgs[i].role in roles:
            return i
    return -1


def single_message_result(
    content: list[str],
    calls: list[ToolCall],
    finish: Literal["stop", "length"] | None,
    warnings: list[str],
    incomplete: Sequence[IncompleteCall] = (),
) -> ParseResult:
    """A turn that is one assistant message, text and calls together (as it re-renders);
    ``incomplete`` calls are reported beside it, never in it."""
    text = "".join(content)
    message = Message(role="assistant", content=text or None, tool_calls=tuple(calls) or None)
    reason = finish_reason_for(bool(calls), finish or "stop")
    return ParseResult(
        messages=[message],
        finish_reason=reason,
        warnings=list(warnings),
        incomplete_calls=list(incomplete),
    )


def finish_reason_for(result_has_calls: bool, reason: Literal["stop", "length"]) -> FinishReason:
    """OpenAI's finish reason: ``tool_calls`` when a completed turn ends in complete calls
    (an incomplete call never makes it ``tool_calls``)."""
    if reason == "length":
        return "length"
    return "tool_calls" if result_has_calls else "stop"
