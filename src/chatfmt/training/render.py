"""Training render: a conversation as the exact ids a model is served, with the tokens to train.

The rule, the same for every dialect: **the tokens an assistant turn trains on are exactly what
the model produces after its generation prompt.** For the assistant message at index ``i``,

- the prompt is ``render(messages[:i], add_generation_prompt=True)`` — what serving sends;
- the reply is what ``render(messages[:i + 1], add_generation_prompt=False)`` adds to it;
- loss goes on the reply through the stop token that ends it (``<|im_end|>``, ``<|eot_id|>``,
  ``</s>``, …; :mod:`.rules` for the families whose history does not carry it); layout after
  the stop (ChatML's ``"\\n"``), the headers the generation prompt wrote, and every system,
  user and tool token carry none.

Where the prompt is a prefix of that rendering as text but not as tokens (a newline of the
prompt that the history merges with the next one), the reply is its text from where the prompt
ends, encoded as the model writes it. Where it is not even a prefix as text (the prompt opens a
thought the history never writes: QwQ, DeepSeek R1), no rendering of the turn is both what the
model was prompted with and what it wrote, and the turn is refused with the reason.

``train_on="all_assistant"`` trains every assistant turn in one example, which holds only when
each turn's prompt and reply are what the whole conversation shows at that place: formats whose
history rewrites earlier turns (Qwen3 and gpt-oss drop earlier reasoning, Mistral v3 moves the
system prompt to the last user turn) do not keep that, and such a turn is an error naming it
(``unstable="error"``) or is left untrained and listed in :attr:`TrainingExample.skipped`
(``unstable="skip"``). ``"last_assistant"`` trains the last turn alone, which always holds where
the turn renders at all. The example ends with the last trained turn: messages after it would
carry no loss.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from ..dialects.base import Dialect
from ..errors import ChatFmtError
from ..messages import Conversation, Message, Tool, as_conversation
from ..segments import Block, BlockEncoder, RenderedPrompt, Segment, Text
from ..tokenizers.base import Tokenizer
from .rules import closing_token, end_rule, stop_ids

#: The label of a token that carries no loss (PyTorch's cross-entropy ``ignore_index``).
IGNORE_INDEX = -100
TrainOn = Literal["all_assistant", "last_assistant"]
OnUnstable = Literal["error", "skip"]
TRAIN_ON: tuple[str, ...] = ("all_assistant", "last_assistant")
ON_UNSTABLE: tuple[str, ...] = ("error", "skip")


class TrainingError(ChatFmtError, ValueError):
    """A conversation cannot be rendered for training as asked; ``index`` is the message."""

    def __init__(self, message: str, *, index: int | None = None) -> None:
        self.index = index
        super().__init__((f"message {index}: " if index is not None else "") + message)


class TrainedSpan(NamedTuple):
    """Token positions ``[start, end)`` that carry loss, and the assistant message they render."""

    start: int
    end: int
    message: int


@dataclass(frozen=True, slots=True)
class TrainingExample:
    """One conversation as training data.

    ``input_ids`` are the ids the model is served (the prompt of the last trained turn, then
    its reply); ``labels`` equal them where loss goes and are :data:`IGNORE_INDEX` elsewhere
    (unshifted, as Hugging Face causal-LM models take them); ``message_index`` names, per token,
    the message whose rendering holds it (``-1`` for the format's own tokens: the prefix, a
    generation prompt, an end-of-sequence token appended by the family rule). ``skipped`` lists
    the assistant turns left untrained (``unstable="skip"``), with ``problems`` saying why.
    """

    input_ids: list[int]
    labels: list[int]
    message_index: list[int]
    spans: tuple[TrainedSpan, ...]
    skipped: tuple[int, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def attention_mask(self) -> list[int]:
        """Ones: an example holds no padding."""
        return [1] * len(self.input_ids)

    @property
    def trained_tokens(self) -> int:
        """How many tokens carry loss."""
        return sum(s.end - s.start for s in self.spans)

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass(slots=True)
class _Reply:
    """One assistant turn as served: its prompt, and its reply in the history's form."""

    message: int
    prompt: RenderedPrompt
    ids: list[int]
    #: How many of the reply's first ids carry loss (through its stop token, if it has one).
    trained: int
    stopped: bool
    #: How many of its first ids are the thought (left out with ``train_reasoning=False``).
    thought: int = 0


class _Refusal(NamedTuple):
    message: int
    reason: str
    #: What to do about it, when the generic advice (by where the turn stands) does not fit.
    fix: str | None = None


class TrainingRenderer:
    """Renders conversations for training with one dialect and tokenizer.

    Keep one for a whole data set: it reuses the ids of blocks it has encoded (a system prompt
    or tool list shared by many conversations is encoded once). ``strict`` validates each
    conversation with the dialect's rules (``False``: only what rendering needs).
    """

    def __init__(
        self,
        dialect: Dialect,
        tokenizer: Tokenizer,
        *,
        train_on: TrainOn = "all_assistant",
        train_reasoning: bool = True,
        unstable: OnUnstable = "error",
        strict: bool = True,
    ) -> None:
        if train_on not in TRAIN_ON:
            raise TrainingError(f"train_on must be one of {', '.join(TRAIN_ON)}, not {train_on!r}")
        if unstable not in ON_UNSTABLE:
            raise TrainingError(
                f"unstable must be one of {', '.join(ON_UNSTABLE)}, not {unstable!r}"
            )
        self.dialect = dialect
        self.tokenizer = tokenizer
        self.train_on = train_on
        self.train_reasoning = train_reasoning
        self.unstable = unstable
        self.strict = strict
        self._encoder = BlockEncoder(tokenizer, max_entries=16384)
        self._once = BlockEncoder(tokenizer, max_entries=0)  # replies: never seen twice
        self._stops = stop_ids(dialect, tokenizer)
        self._rule = end_rule(dialect)
        self._closing = closing_token(dialect, tokenizer)
        self._history_end = self._id(self._rule.history_end)
        self._served_end = self._id(self._rule.served_end)

    def _id(self, token: str | None) -> int | None:
        if token is None or not self.tokenizer.has_control(token):
            return None
        return self.tokenizer.control_id(token)

    # ==== The example ====

    def render(
        self,
        conversation: Conversation | Sequence[Message | Mapping[str, Any]],
        tools: Sequence[Tool | Mapping[str, Any]] | None = None,
    ) -> TrainingExample:
        """The training example of one conversation; :class:`TrainingError` (or the dialect's
        :class:`~chatfmt.errors.ValidationError`) naming the message when it has none."""
        conv = as_conversation(conversation, tools)
        self.dialect.validate(conv, strict=self.strict)
        turns = [i for i, m in enumerate(conv.messages) if m.role == "assistant"]
        if not turns:
            raise TrainingError(
                "the conversation has no assistant message, so nothing in it carries loss; "
                "give each row at least one assistant reply"
            )
        if self.train_on == "last_assistant":
            turns = turns[-1:]
        refused: list[_Refusal] = []
        final: _Reply | None = None
        while turns and final is None:
            got = self._reply(conv, turns.pop())
            if isinstance(got, _Refusal):
                self._refuse(got, last=not turns or self.train_on == "last_assistant")
                refused.append(got)
            else:
                final = got
        if final is None:
            raise TrainingError(
                "no assistant turn can be trained: " + "; ".join(r.reason for r in refused)
            )
        ids, spans = self._close(final)
        for i in turns:
            got = self._reply(conv, i)
            if not isinstance(got, _Refusal):
                got = self._place(got, ids, spans)
            if isinstance(got, _Refusal):
                self._refuse(got, last=False)
                refused.append(got)
        spans.sort()
        labels = [IGNORE_INDEX] * len(ids)
        for start, end, _ in spans:
            labels[start:end] = ids[start:end]
        index = [-1] * len(ids)
        for span in final.prompt.spans:
            if span.messages:
                index[span.start : span.end] = [span.messages[0]] * (span.end - span.start)
        n = len(final.prompt.ids)
        index[n : n + len(final.ids)] = [final.message] * len(final.ids)
        refused.sort()
        return TrainingExample(
            input_ids=ids,
            labels=labels,
            message_index=index,
            spans=tuple(spans),
            skipped=tuple(r.message for r in refused),
            problems=tuple(f"message {r.message}: {r.reason}" for r in refused),
        )

    def _refuse(self, refusal: _Refusal, *, last: bool) -> None:
        if self.unstable == "skip":
            return
        if refusal.fix is not None:
            hint = refusal.fix
        elif last:
            hint = (
                "this format's replies cannot be trained from how its history writes them "
                "(docs/training.md lists the rule per family); if the message has reasoning, "
                "check that thinking is on for the dialect (and off if it has none)"
            )
        else:
            hint = (
                "train the last assistant turn alone (train_on='last_assistant', "
                "--train-on last), or leave such turns untrained (unstable='skip', "
                "--unstable skip)"
            )
        raise TrainingError(f"{refusal.reason}; {hint}", index=refusal.message)

    def _close(self, final: _Reply) -> tuple[list[int], list[TrainedSpan]]:
        """The example's ids and the last turn's trained span, its end by the family rule."""
        n = len(final.prompt.ids)
        reply = list(final.ids)
        trained = final.trained
        if not final.stopped:
            if self._history_end is not None and reply and reply[-1] == self._history_end:
                if self._served_end is not None:
                    reply[-1] = self._served_end
            elif self._closing is not None:
                reply.append(self._closing)
            trained = len(reply)
        spans = [TrainedSpan(n + final.thought, n + trained, final.message)]
        return final.prompt.ids + reply, [s for s in spans if s.end > s.start]

    def _place(self, reply: _Reply, ids: list[int], spans: list[TrainedSpan]) -> _Reply | _Refusal:
        """Add an earlier turn's span, when the example shows its prompt and reply as served."""
        n = len(reply.prompt.ids)
        end = n + len(reply.ids)
        if ids[:n] != reply.prompt.ids or ids[n:end] != reply.ids:
            return _Refusal(reply.message, self._rewritten(reply, ids))
        trained = reply.trained
        if not reply.stopped:
            if reply.ids and reply.ids[-1] == self._history_end:
                trained -= 1  # the history's stand-in for the stop the model wrote
            elif end < len(ids) and ids[end] in self._stops:
                trained += 1  # the next role token is the stop (the GLM family)
        if trained > reply.thought:
            spans.append(TrainedSpan(n + reply.thought, n + trained, reply.message))
        return reply

    def _rewritten(self, reply: _Reply, ids: list[int]) -> str:
        served = reply.prompt.ids + reply.ids
        at = next(
            (k for k, (a, b) in enumerate(zip(served, ids, strict=False)) if a != b), len(ids)
        )
        tok = self.tokenizer
        return (
            f"later turns see this reply rendered differently from what the model produced "
            f"after its generation prompt (the {self.dialect.name} history rewrites earlier "
            f"turns: served {tok.decode(served[at : at + 8])!r}, the history writes "
            f"{tok.decode(ids[at : at + 8])!r})"
        )

    # ==== One turn ====

    def _reply(self, conv: Conversation, i: int) -> _Reply | _Refusal:
        msgs = conv.messages
        prompt, reply = self._served(conv, msgs[:i], msgs[: i + 1])
        if reply is None:
            return _Refusal(i, self._diverges(conv, msgs[:i], msgs[: i + 1]))
        stop = next((k for k, t in enumerate(reply) if t in self._stops), None)
        if stop is not None and self.tokenizer.decode(reply[stop + 1 :]).strip():
            return _Refusal(
                i,
                "the message renders as more than one reply (text follows its stop token: "
                f"{self.tokenizer.decode(reply[stop:])!r}); split it into one assistant "
                "message per reply",
            )
        got = _Reply(
            message=i,
            prompt=prompt,
            ids=reply,
            trained=len(reply) if stop is None else stop + 1,
            stopped=stop is not None,
        )
        m = msgs[i]
        if m.reasoning and (self.dialect.reasoning != "never" or not self.train_reasoning):
            plain = (*msgs[:i], m.model_copy(update={"reasoning": None}))
            _, without = self._served(conv, msgs[:i], plain)
            if without == reply and self.train_reasoning:
                # A thinking model's turn rendered without its thought would teach it to skip
                # thinking: refuse rather than train that silently.
                return _Refusal(
                    i,
                    f"the {self.dialect.name} rendering of this turn leaves its reasoning out "
                    "(the format's history rule), so its thought would be trained as empty",
                    "train with train_reasoning=False (--no-train-reasoning) to train the answer "
                    "alone, or remove the reasoning from the message",
                )
            if without is not None and not self.train_reasoning:
                common = 0
                for a, b in zip(reversed(reply), reversed(without), strict=False):
                    if a != b:
                        break
                    common += 1
                got.thought = min(len(reply) - common, got.trained)
        return got

    def _served(
        self, conv: Conversation, head: Sequence[Message], upto: Sequence[Message]
    ) -> tuple[RenderedPrompt, list[int] | None]:
        """The prompt before a turn and the reply after it (``None``: the prompt does not
        begin the turn's rendering, as tokens or as text)."""
        d = self.dialect
        prompt_blocks = d.render_blocks(
            conv.model_copy(update={"messages": tuple(head)}), add_generation_prompt=True
        )
        turn_blocks = d.render_blocks(
            conv.model_copy(update={"messages": tuple(upto)}), add_generation_prompt=False
        )
        prompt = self._encoder.encode(prompt_blocks)
        turn = self._encoder.encode(turn_blocks)
        n = len(prompt.ids)
        if turn.ids[:n] == prompt.ids:
            return prompt, turn.ids[n:]
        rest = _after(_flat(prompt_blocks), _flat(turn_blocks))
        if rest is None:
            return prompt, None
        return prompt, list(self._once.encode_block(Block(rest)))

    def _diverges(
        self, conv: Conversation, head: Sequence[Message], upto: Sequence[Message]
    ) -> str:
        d = self.dialect
        before = d.render_text(conv.model_copy(update={"messages": tuple(head)}), strict=False)
        whole = d.render_text(
            conv.model_copy(update={"messages": tuple(upto)}),
            add_generation_prompt=False,
            strict=False,
        )
        at = next(
            (k for k, (a, b) in enumerate(zip(before, whole, strict=False)) if a != b), len(before)
        )
        return (
            f"the {d.name} generation prompt does not begin this turn's rendering (the prompt "
            f"ends {before[at:][:40]!r} where the history writes {whole[at:][:40]!r}), so the "
            "tokens the model produced for it cannot be told from the render"
        )


def _flat(blocks: Sequence[Block]) -> list[Segment]:
    return [s for b in blocks for s in b.segments]


def _after(prompt: list[Segment], turn: list[Segment]) -> tuple[Segment, ...] | None:
    """The segments of ``turn`` after ``prompt``, when ``prompt`` begins it as text: equal
    segments, the last one's text possibly a prefix of the turn's (the rest of that text is the
    reply's first run, encoded on its own as the model writes it)."""
    k = len(prompt) - 1
    if k < 0:
        return tuple(turn)
    if len(turn) <= k or turn[:k] != prompt[:k]:
        return None
    last, there = prompt[k], turn[k]
    if last == there:
        return tuple(turn[k + 1 :])
    if type(last) is Text and type(there) is Text and there.text.startswith(last.text):
        tail = there.text[len(last.text) :]
        return ((Text(tail),) if tail else ()) + tuple(turn[k + 1 :])
    return None


def render_for_training(
    conversation: Conversation | Sequence[Message | Mapping[str, Any]],
    dialect: Dialect,
    tokenizer: Tokenizer,
    *,
    tools: Sequence[Tool | Mapping[str, Any]] | None = None,
    train_on: TrainOn = "all_assistant",
    train_reasoning: bool = True,
    unstable: OnUnstable = "error",
    strict: bool = True,
) -> TrainingExample:
    """One conversation as a :class:`TrainingExample` (see the module's rule). For many
    conversations keep a :class:`TrainingRenderer`, which reuses encoded blocks."""
    renderer = TrainingRenderer(
        dialect,
        tokenizer,
        train_on=train_on,
        train_reasoning=train_reasoning,
        unstable=unstable,
        strict=strict,
    )
    return renderer.render(conversation, tools)
