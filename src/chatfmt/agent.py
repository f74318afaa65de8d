"""The agent loop: render → engine → parse (streaming) → run tools / interpreter → repeat.

The loop stops at a turn without tool calls (the final answer) or after ``max_steps`` model
turns. Tool failures become observations the model can read; they never end the loop. What the
loop does is reported as events, for terminals and web UIs.

A turn's reasoning (``ReasoningDelta``, from dialects that have a reasoning channel) streams as
a :class:`ModelEvent` like its text, and stays on the turn's messages (``Message.reasoning``)
in the conversation the loop carries on with: when the next turn is rendered, the dialect
decides what of earlier reasoning the model reads again; the loop never drops it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Protocol

from .context import Budget
from .decoding import TurnDecoder
from .dialects.base import ConversationLike, Dialect, StreamParser
from .dialects.parsers.fence import FencedRuns
from .driver import TurnDriver
from .engines.base import Engine, SamplingParams
from .events import Event, ParseResult, ReasoningDelta, TextDelta
from .grammar import Grammar, SchemaError
from .interpreter.runner import CodeRunner as CodeRunner  # re-exported from its home
from .messages import INTERPRETER, Conversation, Message, Tool, ToolCall, as_conversation
from .prompts import INTERPRETER_PROMPT, TOOLS_PROMPT
from .segments import BlockEncoder

log = logging.getLogger("chatfmt.agent")


class ToolRunner(Protocol):
    """What the loop needs from a tool registry."""

    def openai_tools(self) -> list[dict[str, Any]]: ...

    async def acall(
        self, name: str, arguments: str | Mapping[str, Any], *, timeout: float | None = None
    ) -> Any: ...


# ==== Events ====


@dataclass(frozen=True, slots=True)
class ModelEvent:
    """A parser event of the current model turn (text or reasoning delta, tool-call
    start/delta, ...)."""

    event: Event


@dataclass(frozen=True, slots=True)
class ToolStarted:
    """The loop is about to run ``call``."""

    call: ToolCall


@dataclass(frozen=True, slots=True)
class ToolFinished:
    """``call`` ran; ``observation`` is what the model will read; ``images`` are PNGs."""

    call: ToolCall
    observation: str
    ok: bool
    images: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class TurnFinished:
    """A model turn ended; its parsed messages were appended to the conversation."""

    result: ParseResult


AgentEvent = ModelEvent | ToolStarted | ToolFinished | TurnFinished


@dataclass
class AgentResult:
    """The conversation after the loop, and why it stopped."""

    conversation: Conversation
    steps: int
    stopped: str  # "answer", "max_steps", "length" or "repeated_call"
    new_messages: list[Message] = field(default_factory=list)

    @property
    def answer(self) -> str:
        """The text of the last assistant message."""
        for m in reversed(self.conversation.messages):
            if m.role == "assistant" and m.content:
                return m.content
        return ""


class Agent:
    """Runs a conversation with tools and (optionally) a code interpreter until it answers."""

    def __init__(
        self,
        engine: Engine,
        dialect: Dialect,
        *,
        tools: ToolRunner | None = None,
        interpreter: CodeRunner | None = None,
        params: SamplingParams | None = None,
        max_steps: int = 8,
        tool_timeout: float = 30.0,
        code_timeout: float = 60.0,
        default_system: bool = True,
    ) -> None:
        self.engine = engine
        self.dialect = dialect
        self.tools = tools
        self.interpreter = interpreter
        self.params = params or SamplingParams(max_tokens=1024, temperature=0.0)
        self.max_steps = max_steps
        self.tool_timeout = tool_timeout
        self.code_timeout = code_timeout
        #: Whether a conversation without a system message gets the default prompt of what
        #: the loop offers (``chatfmt.prompts``): how to ask for runs, to answer from results.
        self.default_system = default_system
        tok = engine.tokenizer
        self._budget = Budget(dialect, tok, encoder=BlockEncoder(tok))

    def _tools(self) -> tuple[Tool, ...]:
        if self.tools is None:
            return ()
        return tuple(Tool.of(t) for t in self.tools.openai_tools())

    def default_prompt(self) -> str | None:
        """The system prompt a conversation without one gets (``None``: none)."""
        parts = []
        if self.interpreter is not None and self.dialect.fenced_code_runs:
            parts.append(INTERPRETER_PROMPT)
        if any(t.name != INTERPRETER for t in self._tools()):
            parts.append(TOOLS_PROMPT)
        return "\n\n".join(parts) if parts and self.default_system else None

    def _with_default_system(self, conv: Conversation) -> Conversation:
        prompt = self.default_prompt()
        if prompt is None or (conv.messages and conv.messages[0].role == "system"):
            return conv
        system = Message(role="system", content=prompt)
        return Conversation(messages=(system, *conv.messages), tools=conv.tools)

    def _call_grammar(self, tools: Sequence[Tool]) -> Grammar | None:
        """The dialect's lazy call grammar, where the engine enforces one: the model answers
        freely or calls a declared tool with arguments that fit its schema."""
        if not tools or self.engine.grammar_support != "lazy":
            return None
        try:
            return self.dialect.call_grammar(tools)
        except SchemaError as exc:  # a strict tool the grammar cannot enforce: stay free
            log.warning("tool calls are not constrained: %s", exc)
            return None

    def _parser(self, dialect: Dialect) -> StreamParser | None:
        """With an interpreter, a fenced Python block is a run request too, where the format
        has no interpreter turn of its own (``parsers/fence.py``); ``None``: the dialect's."""
        if self.interpreter is None or not dialect.fenced_code_runs:
            return None
        return FencedRuns(dialect.stream_parser())

    def _words(self) -> Grammar | None:
        return self.dialect.answer_grammar() if self.engine.grammar_support != "none" else None

    async def run(self, conversation: ConversationLike) -> AgentResult:
        """Run the loop to the end, ignoring events."""
        result: AgentResult | None = None
        async for item in self.stream(conversation):
            if isinstance(item, AgentResult):
                result = item
        assert result is not None
        return result

    async def stream(
        self, conversation: ConversationLike
    ) -> AsyncIterator[AgentEvent | AgentResult]:
        """Run the loop, yielding events as they happen and the :class:`AgentResult` last."""
        conv = self._with_default_system(as_conversation(conversation, self._tools() or None))
        grammar = self.params.grammar or self._call_grammar(conv.tools)
        new: list[Message] = []
        seen: set[tuple[str, str]] = set()
        tok = self.engine.tokenizer
        stop_ids = tuple(self.dialect.stop_ids(tok))
        # After a repeated call, one more turn with the tools hidden (as tool_choice "none"
        # hides them) and, where the engine constrains, a reply in words: the model has the
        # results; a small one otherwise writes the call again even without tools (measured).
        answer_now = False
        for step in range(1, self.max_steps + 1):
            reserve = self.params.max_tokens
            shown = Conversation(messages=conv.messages) if answer_now else conv
            fitted = await asyncio.to_thread(
                self._budget.fit, shown, context=self.engine.context_length, reserve=reserve
            )
            prompt = await asyncio.to_thread(self._budget.render, fitted.conversation)
            params = SamplingParams(
                max_tokens=self.params.max_tokens,
                temperature=self.params.temperature,
                top_p=self.params.top_p,
                seed=self.params.seed,
                stop_ids=tuple(sorted(set(self.params.stop_ids) | set(stop_ids))),
                stop_strings=self.params.stop_strings,
                grammar=(self.params.grammar or self._words()) if answer_now else grammar,
            )
            # The tools' schemas type the values of formats whose calls carry text (XML).
            parsing = self.dialect.with_tools(conv.tools) if conv.tools else self.dialect
            parsing = parsing.for_reply_to(fitted.conversation)
            decoder = TurnDecoder(
                parsing, tok, stop_strings=self.params.stop_strings, parser=self._parser(parsing)
            )
            driver = TurnDriver(self.engine, decoder, prompt.ids, params)
            # aclosing: a consumer that stops reading this loop stops the engine now, not
            # when the garbage collector gets to the driver's generator.
            async with aclosing(driver.steps()) as steps:
                async for events in steps:
                    for ev in events:
                        yield ModelEvent(ev)
            result = driver.result()
            conv = Conversation(messages=conv.messages + tuple(result.messages), tools=conv.tools)
            new.extend(result.messages)
            yield TurnFinished(result)
            calls = result.tool_calls
            if driver.cut:
                yield AgentResult(conv, step, "length", new)
                return
            if not calls:
                yield AgentResult(conv, step, "answer", new)
                return
            keys = [(c.name, _canonical(c.arguments)) for c in calls]
            if answer_now or all(k in seen for k in keys):
                # Small models often repeat a call they already made instead of answering;
                # running it again cannot tell them anything new. The repeated turn is dropped
                # so the conversation stays valid (no call without a result); the model gets
                # one more turn without tools, and if it still calls, the loop ends.
                n = len(result.messages)
                conv = Conversation(messages=conv.messages[:-n], tools=conv.tools)
                del new[-n:]
                if answer_now or step == self.max_steps:
                    yield AgentResult(conv, step, "repeated_call", new)
                    return
                answer_now = True
                continue
            seen.update(keys)
            for call in calls:
                yield ToolStarted(call)
                try:
                    observation, ok, images = await self._run_call(call)
                except Exception as exc:  # a runner that fails is an observation, not the end
                    observation, ok, images = f"Error: {type(exc).__name__}: {exc}", False, ()
                yield ToolFinished(call, observation, ok, images)
                msg = Message(
                    role="tool", content=observation, tool_call_id=call.id, name=call.name
                )
                conv = Conversation(messages=(*conv.messages, msg), tools=conv.tools)
                new.append(msg)
        yield AgentResult(conv, self.max_steps, "max_steps", new)

    async def _run_call(self, call: ToolCall) -> tuple[str, bool, tuple[Any, ...]]:
        if call.name == INTERPRETER and self.interpreter is not None:
            code = call.arguments_dict().get("code", "")
            if not isinstance(code, str):
                return "interpreter call without a 'code' string", False, ()
            interpreter = self.interpreter
            res = await asyncio.to_thread(interpreter.execute, code, self.code_timeout)
            text = self.dialect.interpreter_observation(res.observation())
            return text, res.error is None and not res.timed_out, tuple(res.images)
        if self.tools is None:
            return f"Error: no tool named {call.name!r} is available", False, ()
        out = await self.tools.acall(call.name, call.arguments, timeout=self.tool_timeout)
        return str(out.content), bool(out.ok), ()


def _canonical(arguments: str) -> str:
    return json.dumps(json.loads(arguments), sort_keys=True)


def text_of(events: Sequence[AgentEvent]) -> str:
    """The assistant text streamed in ``events`` (for tests and simple UIs)."""
    return "".join(
        e.event.text for e in events if isinstance(e, ModelEvent) and isinstance(e.event, TextDelta)
    )


def reasoning_of(events: Sequence[AgentEvent]) -> str:
    """The reasoning streamed in ``events``, every turn's joined (for tests and simple UIs)."""
    return "".join(
        e.event.text
        for e in events
        if isinstance(e, ModelEvent) and isinstance(e.event, ReasoningDelta)
    )


__all__ = [
    "Agent",
    "AgentEvent",
    "AgentResult",
    "ModelEvent",
    "ToolFinished",
    "ToolStarted",
    "TurnFinished",
    "reasoning_of",
    "text_of",
]
