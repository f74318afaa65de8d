"""The GLM family's shared half: role tokens, :class:`GLMDialect` and its rules.

ChatGLM3 and GLM-4 write an assistant turn as ``<|assistant|>`` segments with a metadata line;
their parser is :class:`~.parsers.glm.SegmentParser`, configured here from class attributes.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ValidationError
from ..grammar import CallRules, Grammar, ToolLike, Trigger
from ..grammar.gbnf import literal
from ..messages import Tool, ToolCall
from ..segments import Segment, Text
from .base import Dialect
from .fingerprint import Fingerprint
from .parsers.glm import CallDecoder, SegmentParser, fenced_code

__all__ = ["CallDecoder", "GLMDialect", "SegmentParser", "early_glm", "fenced_code"]

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


#: The role tokens a GLM model ends its reply with: the next turn's (a user's, or a tool's
#: result after a call).
NEXT_ROLES = (USER, OBSERVATION)
#: The markup of GLM templates: the prefix and the role tokens.
GLM_MARKUP = frozenset(
    {"[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"}
)
#: What only GLM-4.5 and later templates write (calls as ``<tool_call>`` with
#: ``<arg_key>``/``<arg_value>``, and thinking).
LATER_GLM_MARKUP = ("<tool_call>", "<arg_key>", "<think>")


def early_glm(description: str, prefix: str, precedence: int) -> Fingerprint:
    """How ChatGLM3's and GLM-4's templates are recognised: their ``prefix``, the GLM markup,
    and none of the later templates' markup."""
    return Fingerprint(
        description,
        requires=(prefix,),
        tokens=GLM_MARKUP,
        excludes=LATER_GLM_MARKUP,
        precedence=precedence,
    )


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

    @staticmethod
    def check_call_name(call: ToolCall, index: int) -> None:
        """A call's name is the header metadata: one non-empty line."""
        if not call.name or "\n" in call.name or "\r" in call.name:
            raise ValidationError(
                f"tool call name {call.name!r} must be one non-empty line (it is the header "
                "metadata); fix the tool name",
                index=index,
                rule="tool-call-name",
            )
