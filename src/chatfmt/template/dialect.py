"""A model served through its own chat template: the dialect of every model chatfmt has no
built-in dialect for.

:class:`TemplateDialect` renders each conversation with the model's Jinja template (as
``transformers`` does, :class:`~.jinja.ChatTemplate`), so its text is the template's by
construction, and keeps chatfmt's promises on top:

- **Control tokens only from the template.** The render is split into the template's own text
  and the request's strings (:mod:`.split`); only the template's text is searched for the
  vocabulary's control tokens. A message holding ``<|im_end|>`` is encoded as that text.
- **The ids the model was trained on.** The render is cut only at those control tokens, never
  where a message's text meets the template's (a BPE merge may cross that boundary), so the
  ids equal ``apply_chat_template(tokenize=True)``'s whenever no message holds control-token
  text.
- **Calls and reasoning parsed by what the template writes.** :class:`TemplateFormat` reads
  from probe renders the turn's end token, the ``<think>`` tags and whether the generation
  prompt opens a thought or switches thinking, and the call syntax: Hermes JSON in
  ``<tool_call>`` tags, or Qwen3-Coder's XML. A template whose calls are written otherwise is
  served for chat only (:attr:`TemplateFormat.calls` is ``None``), and a request with tools is
  refused rather than parsed by a guess.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..dialects.base import Dialect, ReasoningMode, StreamParser
from ..dialects.chatml import hermes_call_grammar, hermes_call_prefix
from ..dialects.glm45 import GLM46_XML, GLM47_XML
from ..dialects.minimax import MINIMAX_XML
from ..dialects.parsers.hermes import HermesParser
from ..dialects.parsers.plain import PlainParser
from ..dialects.parsers.think import ThinkParser
from ..dialects.parsers.values import Schemas, tool_schemas
from ..dialects.qwen3_coder import QWEN_XML
from ..dialects.xmlsyntax import XMLSyntax, XMLSyntaxParser
from ..dialects.xmlsyntax import call_grammar as xml_call_grammar
from ..errors import ValidationError
from ..grammar import Grammar, ToolLike, thought_first
from ..markup import THINK, THINK_END, TOOL_CALL, TOOL_CALL_END
from ..messages import Conversation, as_conversation
from ..segments import BlockBuilder, Control, Segment
from .check import PROBES, Probe, template_messages
from .jinja import ChatTemplate, TemplateError
from .split import Masker, Part, UnsafeTemplate, split_render

#: The call syntaxes a template may write, as chatfmt's families declare them: Hermes JSON in
#: ``<tool_call>`` tags, or one of the XML syntaxes (each with the words the log uses).
CallSyntax = Literal["hermes"] | XMLSyntax
_XML_SYNTAXES: tuple[tuple[XMLSyntax, str], ...] = (
    (QWEN_XML, "Qwen3-Coder's XML (<function=…><parameter=…>)"),
    (GLM47_XML, "GLM-4.7's XML (<arg_key>…<arg_value>)"),
    (GLM46_XML, "GLM-4.5's XML (<arg_key>…<arg_value> on lines of their own)"),
    (MINIMAX_XML, "MiniMax's XML (<invoke name=…><parameter name=…>)"),
)
_HERMES = "Hermes JSON in <tool_call> tags"
#: The tags templates write a thought between (Qwen's and most; Mistral's; MiniMax-M3's).
_THINK_TAGS = ((THINK, THINK_END), ("[THINK]", "[/THINK]"), ("<mm:think>", "</mm:think>"))


@dataclass(frozen=True, slots=True)
class TemplateFormat:
    """What a chat template writes, read from its renders of probe conversations."""

    #: Control tokens that end the assistant's turn (the one after a reply, and EOS).
    stops: tuple[str, ...]
    #: The call syntax (``None``: none chatfmt reads, or the template shows no tools).
    calls: CallSyntax | None
    #: The tags replies think between (``None``: the template writes no thought).
    think: tuple[str, str] | None
    reasoning: ReasoningMode
    #: Thinking on by default (``switch``: the template's default for ``enable_thinking``).
    thinking: bool
    #: Whether the generation prompt opens the thought, with thinking on and off.
    opens_thought: tuple[bool, bool]
    #: Whether the template shows the model its tools at all.
    shows_tools: bool = True
    #: The template's text between a finished thought and the answer (``"\n</think>\n\n"``;
    #: empty: it keeps no thought in a final reply to read it from).
    closing: str = ""

    @property
    def description(self) -> str:
        reasoning = f", reasoning in {self.think[0]}" if self.think else ""
        if not self.shows_tools:
            calls = "for chat only: it shows the model no tools"
        elif self.calls is None:
            calls = "for chat only: its calls are not written in a syntax chatfmt reads"
        elif self.calls == "hermes":
            calls = f"calls as {_HERMES}"
        else:
            calls = "calls as " + next(w for x, w in _XML_SYNTAXES if x is self.calls)
        return f"the model's own chat template, {calls}{reasoning}"


class TemplateDialect(Dialect):
    """The model's ``template`` as a dialect, with ``controls`` the control tokens of its
    vocabulary (a GGUF's control and user-defined tokens; a tokenizer file's added tokens).

    Raises :class:`UnsafeTemplate` when the template rewrites the probe conversations' text
    so that its own text cannot be told from theirs, and :class:`~.jinja.TemplateError` when
    it cannot render a plain conversation at all."""

    name = "template"
    reply_in_words = True
    #: The request's tools, for typing XML call values by schema (:meth:`with_tools`).
    tool_schemas: Schemas | None = None

    def __init__(
        self,
        template: ChatTemplate,
        controls: Iterable[str],
        *,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.template = template
        vocabulary = tuple(sorted({c for c in controls if c}))
        # The template's own text is written with BlockBuilder.tagged: every control token of
        # the vocabulary in it is one; a request's text never is.
        self.inline_controls = vocabulary
        # Nothing else is passed, as transformers passes nothing else (a Llama template's
        # date_string keeps its default).
        self._extra = dict(extra or {})
        self.format = self._read_format(template.eos_token)
        self.stop_controls = self.format.stops
        self.controls = tuple(
            c for c in vocabulary if c in template.source or c in self.format.stops
        )
        self.reasoning = self.format.reasoning
        self.thinking = self.format.thinking

    @property
    def description(self) -> str:
        """How the model is served, for the log and ``/v1/models``."""
        return self.format.description

    @property
    def chat_only(self) -> bool:
        """Whether requests with tools are refused (no call syntax chatfmt can parse)."""
        return self.format.calls is None

    @property
    def chat_only_reason(self) -> str:
        """Why requests with tools are refused, for the server's error."""
        if not self.format.shows_tools:
            return "its chat template shows the model no tools, so it was not trained to call any"
        return (
            "its chat template writes calls in a syntax chatfmt cannot read back, so a call "
            "the model made would be lost"
        )

    # ==== Rendering ====

    def _render(self, messages: list[dict[str, Any]], tools: Any, gen: bool) -> str:
        extra = dict(self._extra)
        if self.reasoning == "switch" and self.thinking != self.format.thinking:
            # Only a request that changes the default says so: a template's default may be
            # neither of its two switched states (no thought block at all).
            extra["enable_thinking"] = self.thinking
        try:
            return self.template.render(messages, tools=tools, add_generation_prompt=gen, **extra)
        except TemplateError as exc:
            raise ValidationError(
                f"the model's chat template refuses this conversation: {exc}", rule="template"
            ) from None

    def parts(self, conversation: Conversation, add_generation_prompt: bool) -> list[Part]:
        """The template's render of ``conversation``, split into its own text and the
        request's (:func:`~.split.split_render`)."""
        messages = template_messages(conversation)
        tools = [t.definition for t in conversation.tools] or None
        # Markers are looked for only in renders of masked requests, where no request text
        # is left: they need only differ from the template's own text.
        return split_render(
            lambda m, t: self._render(m, t, add_generation_prompt),
            messages,
            tools,
            avoid=self.template.source.__contains__,
        )

    def write(
        self, b: BlockBuilder, conversation: Conversation, add_generation_prompt: bool
    ) -> None:
        for part in self.parts(conversation, add_generation_prompt):
            if part.own:
                b.tagged(part.text)
            else:
                b.text(part.text)
        b.block(range(len(conversation.messages)))

    def _own_segments(self, text: str) -> tuple[Segment, ...]:
        """The template's own ``text`` as segments, its control tokens split out."""
        b = self._builder()
        b.tagged(text)
        b.block()
        return b.blocks[0].segments

    # ==== Reasoning ====

    @property
    def prompt_opens_thought(self) -> bool:
        return self.format.opens_thought[0 if self.thinking else 1]

    def after_thought(self, grammar: Grammar) -> Grammar:
        if self.format.think is None or not self.thinking:
            return grammar
        open_tag, close_tag = self.format.think
        return thought_first(grammar, open_tag, close_tag, opened=self.prompt_opens_thought)

    def close_thought(self) -> tuple[Segment, ...] | None:
        """What the template writes between a kept thought and the answer, read from a reply
        rendered with both (``None``: it keeps no thought to read it from; a thinking budget is
        then refused)."""
        return self._own_segments(self.format.closing) if self.format.closing else None

    # ==== Calls ====

    def with_tools(self, tools: Sequence[ToolLike]) -> TemplateDialect:
        if not isinstance(self.format.calls, XMLSyntax):
            return self
        configured = copy.copy(self)
        configured.tool_schemas = tool_schemas(tools)
        return configured

    def forced_call_prefix(self, name: str | None) -> tuple[Segment, ...]:
        """The call's opening; nothing where the prompt opened a thought (the call follows
        it, which the grammar enforces) or the template has no call syntax."""
        if self.format.think and self.thinking and self.prompt_opens_thought:
            return ()
        if self.format.calls == "hermes":
            return hermes_call_prefix(name)
        if isinstance(self.format.calls, XMLSyntax):
            return self.format.calls.opening(name)
        return ()

    def call_grammar(
        self, tools: Sequence[ToolLike], *, required: bool = False, single: bool = False
    ) -> Grammar | None:
        if self.format.calls == "hermes":
            grammar = hermes_call_grammar(
                tools, TOOL_CALL, TOOL_CALL_END, required=required, single=single
            )
        elif isinstance(self.format.calls, XMLSyntax):
            grammar = xml_call_grammar(self.format.calls, tools, required=required, single=single)
        else:
            return None
        return self.after_thought(grammar)

    # ==== Parsing ====

    def stream_parser(self, *, id_factory: Callable[[], str] | None = None) -> StreamParser:
        answer: StreamParser
        if self.format.calls == "hermes":
            answer = HermesParser(id_factory=id_factory, stop_controls=self.stop_controls)
        elif isinstance(self.format.calls, XMLSyntax):
            answer = XMLSyntaxParser(
                self.format.calls,
                id_factory=id_factory,
                stop_controls=self.stop_controls,
                schemas=self.tool_schemas,
            )
        else:
            answer = PlainParser(id_factory=id_factory, stop_controls=self.stop_controls)
        if self.format.think is None:
            return answer
        open_tag, close_tag = self.format.think
        return ThinkParser(
            answer,
            id_factory=id_factory,
            stop_controls=self.stop_controls,
            open_tag=open_tag,
            close_tag=close_tag,
            started=self.thinking and self.prompt_opens_thought,
        )

    # ==== What the template writes ====

    def _probe_parts(self, probe: Probe, **extra: Any) -> list[Part]:
        conv = as_conversation(probe.body["messages"], probe.body.get("tools"))
        saved = self._extra
        self._extra = {**saved, **extra}
        try:
            return self.parts(conv, probe.generation_prompt)
        finally:
            self._extra = saved

    def _control_after(self, parts: list[Part], text: str, skip: Sequence[str]) -> list[str]:
        """The first control token of the template's text after the request's ``text`` (its
        last occurrence: a call's value may be in the tool list too), leaving out ``skip``."""
        for k in range(len(parts) - 1, -1, -1):
            part = parts[k]
            if not part.own and part.text.strip() == text:
                for p in parts[k + 1 :]:
                    if not p.own:
                        break
                    found = [c for c in self._controls_in(p.text) if c not in skip]
                    if found:
                        return found[:1]
                return []
        return []

    def _controls_in(self, text: str) -> list[str]:
        return [s.token for s in self._own_segments(text) if isinstance(s, Control)]

    def _refusable(self, probe: str) -> list[Part] | None:
        """The probe's parts; ``None`` where the template refuses the conversation (a system
        message, say), which reading what it writes passes over."""
        try:
            return self._probe_parts(_probe(probe))
        except UnsafeTemplate:
            raise
        except ValidationError:
            return None

    def _read_format(self, eos: str) -> TemplateFormat:
        self.reasoning = "never"  # the probes render without the switch
        stops: list[str] = []
        # The token after a reply: where the reply ends (<|im_end|>), or the next turn begins
        # (GLM's <|user|>, which ends a reply that is not the last).
        for probe, reply in (
            ("a reply at the end, no generation prompt", "Hello!"),
            ("several turns", "Hello! How can I help?"),
        ):
            parts = self._refusable(probe)
            stops += self._control_after(parts, reply, ()) if parts is not None else []
        calls, shows_tools = self._call_syntax()
        parts = self._refusable("a call, its result and the answer") if calls else None
        if calls is not None and parts is not None:
            # The token after a call: the reply's end, or the results' turn (GLM's
            # <|observation|>), leaving out the call syntax's own tags.
            tags = (TOOL_CALL, TOOL_CALL_END) if calls == "hermes" else _tags(calls)
            stops += self._control_after(parts, "celsius", tags)
        stops = list(dict.fromkeys(stops))
        if eos and eos in self._controls_in(eos) and eos not in stops:
            stops.append(eos)
        if not stops:
            raise UnsafeTemplate(
                "the model's chat template ends an assistant reply with no control token, so "
                "there is no token at which a reply stops",
                rule="template",
            )
        source = self.template.source
        think = next((tags for tags in _THINK_TAGS if all(t in source for t in tags)), None)
        reasoning: ReasoningMode = "never"
        thinking = False
        opened = (False, False)
        if think is not None:
            # The generation prompt as the template writes it by default, switched on, off.
            prompt = _probe("one user message")
            default, on, off = (
                self._probe_parts(prompt, **extra)[-1]
                for extra in ({}, {"enable_thinking": True}, {"enable_thinking": False})
            )
            switch = off.text != default.text
            reasoning = "switch" if switch and "enable_thinking" in source else "always"
            thinking = reasoning == "always" or default.text == on.text
            open_tag = think[0]
            on_opens, off_opens = (
                t.own and t.text.rstrip().endswith(open_tag) for t in (on, off)
            )
            opened = (on_opens, off_opens)
        return TemplateFormat(
            stops=tuple(stops),
            calls=calls,
            shows_tools=shows_tools,
            closing=self._closing(think[1]) if think is not None else "",
            think=think,
            reasoning=reasoning,
            thinking=thinking,
            opens_thought=opened,
        )

    def _closing(self, close_tag: str) -> str:
        """The template's own text between a final reply's thought and its answer, where it
        holds the closing tag (a template that drops the thought has none to show)."""
        reply = [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!", "reasoning_content": "Greet back."},
        ]
        try:
            parts = self.parts(as_conversation(reply), False)
        except ValidationError:
            return ""
        texts = [p.text for p in parts]
        for k in range(len(parts) - 2):
            if not parts[k].own and texts[k].strip() == "Greet back.":
                if parts[k + 1].own and not parts[k + 2].own and close_tag in texts[k + 1]:
                    if texts[k + 2].strip() == "Hello!":
                        return texts[k + 1]
        return ""

    def _shows_tools(self) -> bool:
        """Whether a probe with tools renders otherwise without them (a system prompt's, or
        the call's: templates list tools in one place or the other)."""
        for name in ("a system prompt and tools", "a call, its result and the answer"):
            body = _probe(name).body
            conv = as_conversation(body["messages"], body["tools"])
            messages = template_messages(conv)
            tools = [t.definition for t in conv.tools]
            try:
                if self._render(messages, tools, False) != self._render(messages, None, False):
                    return True
            except ValidationError:
                continue
        return False

    def _call_syntax(self) -> tuple[CallSyntax | None, bool]:
        """The syntax of the probe call as the template writes it, read from the masked render
        (the call's name and argument key are markers there, so no content can fake it), and
        whether the template shows tools at all."""
        probe = _probe("a call, its result and the answer")
        conv = as_conversation(probe.body["messages"], probe.body.get("tools"))
        masker = Masker(lambda nonce: nonce in self.template.source)
        messages = masker.messages(template_messages(conv))
        try:
            text = self._render(messages, masker.tools([t.definition for t in conv.tools]), False)
        except ValidationError:
            return None, self._shows_tools()  # it cannot render a call: none to write back
        if not self._shows_tools():
            return None, False
        name, key = masker.string("get_weather"), masker.string("city")
        ws = r"\s*"
        hermes = (
            re.escape(TOOL_CALL) + ws + r'\{"name":' + ws + f'"{name}",' + ws + r'"arguments":'
        )
        if re.search(hermes, text):
            return "hermes", True
        arguments = {key: masker.string("Paris"), masker.string("unit"): masker.string("celsius")}
        for syntax, _ in _XML_SYNTAXES:
            if syntax.render([(name, arguments)]) in text:
                return syntax, True
        return None, True


def _tags(syntax: XMLSyntax) -> tuple[str, ...]:
    """The tags an XML call syntax writes (its control tags and its block's)."""
    return (*syntax.controls, syntax.block_open.strip(), syntax.block_close.strip())


def _probe(name: str) -> Probe:
    return next(p for p in PROBES if p.name == name)


def template_dialect(
    template: ChatTemplate, controls: Iterable[str]
) -> tuple[TemplateDialect | None, str]:
    """The template dialect of ``template``, checked on every probe conversation, and what it
    is (or ``None`` and why the template cannot be served through itself)."""
    try:
        dialect = TemplateDialect(template, controls)
        rendered, refusal = 0, ""
        for probe in PROBES:
            conv = as_conversation(probe.body["messages"], probe.body.get("tools"))
            if conv.tools and dialect.chat_only:
                continue
            try:
                dialect.render_text(conv, add_generation_prompt=probe.generation_prompt)
                rendered += 1
            except UnsafeTemplate as exc:
                return None, f"{exc} (probe: {probe.name})"
            except ValidationError as exc:
                # The template refuses this conversation: so will the server.
                refusal = refusal or str(exc)
    except (UnsafeTemplate, TemplateError) as exc:
        return None, str(exc)
    except ValidationError as exc:
        return None, str(exc)
    if not rendered:  # no conversation it can render: every request would be refused
        return None, refusal
    return dialect, dialect.description
