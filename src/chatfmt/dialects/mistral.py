"""Mistral instruct formats ``mistral-v3`` and ``mistral-v7``, as ``mistral-common`` lays them out:
``<s>[INST] user [/INST] reply</s>`` per exchange. Tools go in ``[AVAILABLE_TOOLS]`` before the
*last* user turn, calls are ``[TOOL_CALLS]`` and a JSON list of ``{"name", "arguments", "id"}``
(ids: 9 letters and digits), results are ``[TOOL_RESULTS]…[/TOOL_RESULTS]``. v3 folds every
system prompt into the last user turn; v7 writes each one in place in ``[SYSTEM_PROMPT]`` tags,
takes tool results as plain text after the call id and ``[TOOL_CONTENT]``, and lets a reply hold
text and calls. Both work with any vocabulary holding these controls (SentencePiece ``.model.v3``
/ ``.model.v7``, or Tekken ``tekken_*.json`` through :mod:`chatfmt.tokenizers.tekken`).
"""

from __future__ import annotations

import json
import re
import secrets
import string
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from ..errors import ValidationError
from ..grammar import CallRules, Grammar, ToolLike, Trigger
from ..grammar.gbnf import literal
from ..markup import escape_lone_surrogates
from ..messages import Conversation, Message, Tool, ToolCall
from ..segments import Block, BlockBuilder, Control, Segment, Text
from ..validation import check_common
from .base import Dialect, StreamParser
from .fingerprint import Fingerprint
from .parsers.mistral import ToolCallsParser

BOS, EOS, INST, INST_END = "<s>", "</s>", "[INST]", "[/INST]"
TOOLS, TOOLS_END = "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]"
RESULTS, RESULTS_END, CALLS = "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]"
SYSTEM, SYSTEM_END, TOOL_CONTENT = "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]"
#: A call id as the reference checks it (nine letters and digits).
CALL_ID_PATTERN = re.compile(r"[a-zA-Z0-9]{9}\Z")
#: A function name as the reference checks it.
FUNCTION_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}\Z")
_ID_CHARS = string.ascii_letters + string.digits
# Which role may follow which (the reference's own table); tool results are "tool".
_NEXT = {
    "system": {"user", "assistant", "system"},
    "user": {"user", "assistant", "system"},
    "assistant": {"assistant", "user", "tool"},
    "tool": {"assistant", "tool", "user"},
}


def new_mistral_call_id() -> str:
    """A fresh call id as Mistral models were trained on: 9 letters and digits."""
    return "".join(secrets.choice(_ID_CHARS) for _ in range(9))


def dumps(value: Any) -> str:
    """``json.dumps(…, ensure_ascii=False)`` as the reference writes it; a lone surrogate (from
    a ``"\\ud800"`` escape) is no text a tokenizer can take, so it stays escaped."""
    text = json.dumps(value, ensure_ascii=False)
    return escape_lone_surrogates(text)


def _loads_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


_RULES = {
    "order": "{role!r} cannot follow {prev!r}; after it may come {allowed} messages",
    "tool-call-id": "{what} {id!r} must be 9 letters or digits, as Mistral models were trained "
    "on; make one with chatfmt.dialects.mistral.new_mistral_call_id()",
    "content": "{what}",
    "first-message": "a conversation of one {role} message has nothing to answer; start it "
    "with a user (or system) message",
    "content-and-calls": "{what} text and tool calls, which Mistral v3 cannot render together; "
    "drop the text (or use dialect 'mistral-v7')",
    "tool-pairing": "an assistant message follows tool calls that have no results; add a tool "
    "message with each call's result first",
    "tool-name": "tool name {name!r} must be 1-64 letters, digits, underscores or dashes",
}


def _fail(index: int | None, rule: str, **details: str | None) -> NoReturn:
    raise ValidationError(_RULES[rule].format(**details), index=index, rule=rule)


def _role(m: Message) -> str:
    return "tool" if m.role == "observation" else m.role


#: The markup of Mistral's instruct templates.
MISTRAL_MARKUP = frozenset(
    "[INST] [/INST] [AVAILABLE_TOOLS] [/AVAILABLE_TOOLS] [TOOL_CALLS] [TOOL_RESULTS] "
    "[/TOOL_RESULTS] [TOOL_CONTENT] [SYSTEM_PROMPT] [/SYSTEM_PROMPT] [CALL_ID] [ARGS] "
    "[IMG] [IMG_BREAK] [IMG_END]".split()
)


class MistralV3(Dialect):
    """Instruct v3 (Mistral 7B v0.3, Mixtral 8x22B, Nemo with Tekken): byte-exact with
    ``mistral-common``'s ``InstructTokenizerV3`` after its request normalisation."""

    name = "mistral-v3"
    fingerprint = Fingerprint(
        "Mistral instruct v3 ([AVAILABLE_TOOLS] before the last user turn, [TOOL_CALLS] with "
        "a JSON list, no [SYSTEM_PROMPT])",
        requires=("[INST]", "[/INST]"),
        any_of=("[TOOL_CALLS]", "[AVAILABLE_TOOLS]"),
        tokens=MISTRAL_MARKUP,
        excludes=("[SYSTEM_PROMPT]", "[ARGS]", "<<SYS>>"),
        precedence=80,
    )
    controls: tuple[str, ...] = (
        BOS, EOS, INST, INST_END, TOOLS, TOOLS_END, RESULTS, RESULTS_END, CALLS,
    )  # fmt: skip
    stop_controls = (EOS,)
    reply_in_words = True
    #: v3 folds the system prompts into the last user turn; v7 writes them in place.
    fold_system = True

    # ==== Validation ====

    def validate(self, conversation: Conversation, *, strict: bool = True) -> None:
        check_common(conversation, strict=strict)
        if not strict:
            return
        for tool in conversation.tools:
            self._check_name(tool.name, None)
        msgs = conversation.messages
        for i, m in enumerate(msgs):
            self._check_message(i, m, msgs[i - 1] if i else None)
        self._check_whole(msgs)

    def _check_message(self, i: int, m: Message, prev: Message | None) -> None:
        """The rules of one message given the one before it (``None``: it is the first)."""
        if prev is not None and _role(m) not in _NEXT[_role(prev)]:
            after = " or ".join(sorted(_NEXT[_role(prev)]))
            _fail(i, "order", role=m.role, prev=prev.role, allowed=after)
        if m.role == "assistant":
            self._check_assistant(i, m, prev)
        elif _role(m) == "tool" and not CALL_ID_PATTERN.match(m.tool_call_id or ""):
            _fail(i, "tool-call-id", what="tool_call_id", id=m.tool_call_id)
        elif m.role == "system" and m.content is None:
            _fail(i, "content", what='a system message needs content (it may be "")')

    def _check_whole(self, msgs: Sequence[Message]) -> None:
        """The rules of the conversation as a whole, after its messages'."""
        if len(msgs) == 1 and msgs[0].role not in ("user", "system"):
            _fail(0, "first-message", role=msgs[0].role)

    def _check_assistant(self, i: int, m: Message, prev: Message | None) -> None:
        calls = m.tool_calls or ()
        if not m.content and not calls:
            _fail(i, "content", what="an assistant message needs content or tool calls")
        if m.content and calls and self.fold_system:
            _fail(i, "content-and-calls", what="this message holds")
        if prev is not None and prev.role == "assistant":
            if prev.tool_calls:
                _fail(i, "tool-pairing")
            if calls and prev.content and self.fold_system:
                _fail(i, "content-and-calls", what="with the assistant text before it, it makes")
        for call in calls:
            self._check_name(call.name, i)
            if not CALL_ID_PATTERN.match(call.id):
                _fail(i, "tool-call-id", what="tool call id", id=call.id)

    def _check_name(self, name: str, index: int | None) -> None:
        if not FUNCTION_NAME.match(name):
            _fail(index, "tool-name", name=name)

    # ==== Rendering ====

    def write(
        self, b: BlockBuilder, conversation: Conversation, add_generation_prompt: bool
    ) -> None:
        # The reference merges runs of same-role messages (a system message breaks a run), and
        # starts with an empty user turn when the first one is not a user turn.
        msgs = conversation.messages
        runs: list[tuple[str, list[int]]] = []
        for i, m in enumerate(msgs):
            role = _role(m)
            if runs and runs[-1][0] == role and role in ("user", "assistant"):
                runs[-1][1].append(i)
            else:
                runs.append((role, [i]))
        system = [i for i, m in enumerate(msgs) if m.role == "system"]
        if self.fold_system:
            runs = [r for r in runs if r[0] != "system"]
            if not runs or runs[0][0] != "user":
                runs.insert(0, ("user", []))
        last_user = max((k for k, r in enumerate(runs) if r[0] == "user"), default=-1)
        b.add(Block((Control(BOS),)))
        for k, (role, idx) in enumerate(runs):
            text = "\n\n".join(msgs[i].content for i in idx if msgs[i].content)  # type: ignore[misc]
            if role == "user":
                if k == last_user:
                    if conversation.tools:
                        b.control(TOOLS)
                        b.text(dumps([self._tool(t) for t in conversation.tools]))
                        b.control(TOOLS_END)
                    prompt = "\n\n".join(msgs[i].text for i in system if msgs[i].content)
                    if self.fold_system and prompt:
                        text, idx = prompt + "\n\n" + text, [*system, *idx]
                b.control(INST)
                b.text(text)
                b.control(INST_END)
            elif role == "assistant":
                b.text(text.rstrip(" "))
                calls = [c for i in idx for c in msgs[i].tool_calls or ()]
                if calls:
                    self._render_calls(b, calls)
                b.control(EOS)
            elif role == "tool":
                self._render_result(b, msgs[idx[0]])
            else:
                b.control(SYSTEM)
                b.text(text)
                b.control(SYSTEM_END)
            b.block(idx)

    @staticmethod
    def _tool(tool: Tool) -> dict[str, Any]:
        # The reference's Function model: description "" and parameters {} when missing.
        fn = tool.function
        fields = {"name": fn["name"], "description": fn.get("description") or ""}
        fields["parameters"] = fn.get("parameters") or {}
        return {"type": "function", "function": fields}

    @staticmethod
    def _call(name: str, arguments: str, call_id: str) -> dict[str, Any]:
        call: dict[str, Any] = {"name": name, "arguments": json.loads(arguments or "{}")}
        if call_id and call_id != "null":
            call["id"] = call_id
        return call

    def _render_calls(self, b: BlockBuilder, calls: Sequence[ToolCall]) -> None:
        b.control(CALLS)
        b.text(dumps([self._call(c.name, c.arguments, c.id) for c in calls]))

    def _render_result(self, b: BlockBuilder, m: Message) -> None:
        # The result is JSON when it parses as JSON, else a string; empty means {}.
        content = _loads_or_text(m.content) if m.content else {}
        try:
            text = dumps({"content": content, "call_id": m.tool_call_id})
        except RecursionError:  # JSON one level too deep to write back: send it as text
            text = dumps({"content": m.content, "call_id": m.tool_call_id})
        b.control(RESULTS)
        b.text(text)
        b.control(RESULTS_END)

    # ==== Parsing ====

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> StreamParser:
        """A fresh parser; calls get 9-character ids unless ``id_factory`` says otherwise."""
        return ToolCallsParser(
            id_factory=id_factory or new_mistral_call_id,
            stop_controls=self.stop_controls,
            calls_control=CALLS,
        )

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar:
        """``[TOOL_CALLS]`` and a JSON list of calls (each may carry its 9-character id);
        when lazy, switched on by ``[TOOL_CALLS]``."""
        c = CallRules(tools)
        ws = c.ws
        call_id = f'{ws} "," {ws} "\\"id\\"" {ws} ":" {ws} "\\"" [a-zA-Z0-9]{{9}} "\\""'
        calls = c.many(
            c.call_object(trailing=call_id, undeclared=not required), single=single, sep='","'
        )
        body = f'{literal(CALLS)} {ws} "[" {ws} {calls} {ws} "]"'
        triggers = () if required else (Trigger("word", CALLS),)
        return c.grammar(body, triggers=triggers, preserved=(CALLS,))

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """``[TOOL_CALLS]``, and the call's opening up to the arguments when it is named."""
        if name is None:
            return (Control(CALLS),)
        return (Control(CALLS), Text('[{"name": ' + dumps(name) + ', "arguments": '))


class MistralV7(MistralV3):
    """Instruct v7 (Mistral Large 2411, Small 3): system prompts in place in
    ``[SYSTEM_PROMPT]`` tags, tool results as text, text and calls in one reply."""

    name = "mistral-v7"
    fingerprint = Fingerprint(
        "Mistral instruct v7 ([SYSTEM_PROMPT] in place, [TOOL_CALLS] with a JSON list)",
        requires=("[INST]", "[/INST]", "[SYSTEM_PROMPT]"),
        tokens=MISTRAL_MARKUP,
        excludes=("[ARGS]", "<<SYS>>"),
        precedence=90,
    )
    controls = (*MistralV3.controls, SYSTEM, SYSTEM_END, TOOL_CONTENT)
    fold_system = False

    def _render_result(self, b: BlockBuilder, m: Message) -> None:
        b.control(RESULTS)
        b.text(m.tool_call_id or "")
        b.control(TOOL_CONTENT)
        b.text(m.text)
        b.control(RESULTS_END)
