"""Served conversations as training rows: the ids the model was prompted with and produced.

The response store keeps each exchange's exact ids (:class:`~chatfmt.store.ExactIds`): the
part its prompt adds to the previous exchange's ids, then the reply as the engine produced it,
and apart from them the stop token the engine ended the reply on. An export joins them back
along the chain, so a row's ``input_ids`` are the very tokens of the conversation as served —
the model's own tokenization and call syntax, which a re-render would not give back — then the
last reply's stop token, and its ``labels`` are the ids of every reply the model produced in
it:

- each exchange's reply span (a forced call's opening, which chatfmt wrote for
  ``tool_choice`` naming a function, is part of it as the store counts it);
- the stop token after each reply: the store keeps an exchange's ids only when the engine
  ended at a stop token. After the last reply it is the stored one, appended. After an
  earlier reply the next exchange's ids begin with the format's stop token, as every later
  prompt showed it: it carries loss when it is the token the model produced (a model that
  stopped on another stop token, Qwen's ``<|endoftext|>`` where the history writes
  ``<|im_end|>``, was never shown its own: that position has none). Rows stored before the
  stop token was kept end with the last reply and label the earlier stops as the history
  writes them (the report counts them);
- where an exchange's prompt was rendered afresh (its stored predecessor could not be
  continued on its ids: other instructions, a reply the client saw otherwise), the ids start
  with that prompt, and the replies before it, rendered in it, carry no loss.

A response whose exchange kept no ids (stored before they were kept, cut by a length limit,
a call demoted to text) is rendered with :class:`~.render.TrainingRenderer` when one is
given, and flagged ``source="rendered"``; without one it is skipped and counted. The web
chat's conversations keep no ids at all: they are exported rendered, when asked.

The store is read a page at a time (:meth:`~chatfmt.store.ExportStorage.export_refs`), one
chain at a time: memory holds a page of references and one conversation, not the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import BrokenChain, ChatFmtError
from ..messages import as_conversation
from ..store import Storage, StoredExchange, StoredRef
from ..store.listing import ExportQuery
from .render import IGNORE_INDEX, TrainingRenderer
from .sinks import OutRow, Sink
from .tally import LeftOut, Tokens

#: The leading columns of an exported row (pyarrow type names).
META_FIELDS: tuple[tuple[str, str], ...] = (
    ("id", "string"),
    ("owner", "string"),
    ("created_at", "float64"),
    ("kind", "string"),
    ("source", "string"),
)
#: References read from the store per page.
PAGE = 200


@dataclass(slots=True)
class ExportReport(Tokens):
    """What an export read, wrote and skipped, and why."""

    read: int = 0
    written: int = 0
    exact: int = 0
    rendered: int = 0
    #: Replies inside a prompt that was rendered afresh: in the ids, without loss.
    replies_untrained: int = 0
    #: Exact rows whose last reply's stop token was not kept (stored before it was): they end
    #: with the reply, its stop untrained.
    no_stop: int = 0
    #: The rows skipped, where each first was being its id.
    skipped: LeftOut = field(default_factory=LeftOut)

    def skip(self, reason: str, rid: str, message: str) -> None:
        self.skipped.add(reason, rid, message)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows_read": self.read,
            "rows_written": self.written,
            "exact": self.exact,
            "rendered": self.rendered,
            "tokens": self.tokens,
            "trained_tokens": self.trained_tokens,
            "trained_share": round(self.trained_share, 4),
            "replies_untrained": self.replies_untrained,
            "exact_without_stop": self.no_stop,
            **self.skipped.as_dict("skipped"),
        }


@dataclass(frozen=True, slots=True)
class ExactRow:
    """A chain's exact ids and labels; ``untrained``: the replies before its anchor;
    ``stopped``: whether the ids end with the stop token the last reply ended on (``False``:
    stored before it was kept)."""

    input_ids: list[int]
    labels: list[int]
    untrained: int
    stopped: bool = True


def exact_row(exchanges: list[StoredExchange]) -> ExactRow | None:
    """The chain's ids as served with every produced reply labelled (see the module), or
    ``None`` when its last exchange kept no ids or the rows' ids do not join up."""
    if not exchanges or exchanges[-1].exact is None:
        return None
    anchor = len(exchanges) - 1
    while True:  # back to the row that holds all of its prompt (base 0)
        kept = exchanges[anchor].exact
        if kept is None:
            return None
        if kept.base == 0:
            break
        anchor -= 1
        if anchor < 0:
            return None
    ids: list[int] = []
    labels: list[int] = []
    stop: int | None = None  # the stop token the previous reply ended on, where kept
    for n, exchange in enumerate(exchanges[anchor:]):
        kept = exchange.exact
        assert kept is not None  # checked above
        tail = list(kept.tail)
        if kept.base != len(ids) or not 0 <= kept.reply <= len(tail):
            return None  # each row continues its predecessor's whole exchange
        start = len(ids)
        ids += tail
        labels += [IGNORE_INDEX] * len(tail)
        if n > 0 and tail and stop in (None, tail[0]):
            labels[start] = tail[0]  # the stop token that ended the reply before
        for k in range(len(ids) - kept.reply, len(ids)):
            labels[k] = ids[k]
        stop = kept.stop
    if stop is None:
        return ExactRow(ids, labels, anchor, stopped=False)
    return ExactRow([*ids, stop], [*labels, stop], anchor)


def refs(store: Storage, query: ExportQuery, *, page: int = PAGE) -> Iterator[StoredRef]:
    """Every reference ``query`` selects, read a page at a time."""
    after: StoredRef | None = None
    while True:
        found = store.export_refs(query, after=after, limit=page)
        yield from found
        if len(found) < page:
            return
        after = found[-1]


def _row(ref: StoredRef, kind: str, source: str, ids: list[int], labels: list[int]) -> OutRow:
    meta = {"id": ref.id, "owner": ref.owner, "created_at": ref.at, "kind": kind}
    return OutRow(
        ids=[ref.id],
        lines=[0],
        input_ids=ids,
        labels=labels,
        seq_lengths=[len(ids)],
        num_trained=sum(1 for t in labels if t != IGNORE_INDEX),
        meta={**meta, "source": source},
    )


def _chat_tools(tools: Any) -> list[dict[str, Any]] | None:
    """A stored response's (Responses API, flat) function tools in chat completions' shape."""
    if not tools:
        return None
    out = []
    for tool in tools:
        if isinstance(tool, dict) and tool.get("type") == "function" and "name" in tool:
            keys = ("name", "description", "parameters")
            out.append({"type": "function", "function": {k: tool[k] for k in keys if k in tool}})
    return out or None


class Exporter:
    """Writes a store's conversations to a sink; ``renderer`` renders what kept no ids
    (``None``: such rows are skipped and counted)."""

    def __init__(self, store: Storage, sink: Sink, renderer: TrainingRenderer | None) -> None:
        self.store = store
        self.sink = sink
        self.renderer = renderer
        self.report = ExportReport()

    def _write(self, row: OutRow) -> None:
        self.sink.write(row)
        self.report.written += 1
        self.report.tokens += len(row.input_ids)
        self.report.trained_tokens += row.num_trained

    def _render(self, ref: StoredRef, kind: str, messages: list[Any], tools: Any) -> None:
        """The rendered fallback of one conversation, flagged ``rendered``."""
        if self.renderer is None:
            reason = "no exact ids" if kind == "response" else "web conversation, no exact ids"
            self.report.skip(
                reason,
                ref.id,
                "kept no exact ids (stored before ids were kept, or not kept); give "
                "--dialect and --tokenizer to export it rendered",
            )
            return
        try:
            example = self.renderer.render(as_conversation(messages, tools))
        except (ChatFmtError, ValueError) as exc:
            self.report.skip("cannot be rendered", ref.id, " ".join(str(exc).split()))
            return
        self._write(_row(ref, kind, "rendered", example.input_ids, example.labels))
        self.report.rendered += 1

    def response(self, ref: StoredRef) -> None:
        """Export the conversation up to the response ``ref``."""
        self.report.read += 1
        try:
            exchanges = self.store.exchanges(ref.owner, ref.id)
        except BrokenChain as exc:
            self.report.skip("broken chain", ref.id, " ".join(str(exc).split()))
            return
        if not exchanges:
            self.report.skip("gone", ref.id, "deleted while the export ran")
            return
        exact = exact_row(exchanges)
        if exact is not None:
            self._write(_row(ref, "response", "exact", exact.input_ids, exact.labels))
            self.report.exact += 1
            self.report.replies_untrained += exact.untrained
            self.report.no_stop += not exact.stopped
            return
        stored = self.store.get(ref.owner, ref.id)
        body = stored.response if stored is not None else {}
        messages: list[Any] = [m for e in exchanges for m in e.messages]
        if body.get("instructions"):  # a request's instructions are not carried over
            messages.insert(0, {"role": "system", "content": body["instructions"]})
        self._render(ref, "response", messages, _chat_tools(body.get("tools")))

    def web(self, ref: StoredRef) -> None:
        """Export a web conversation, rendered (its page keeps no ids, nor its tools)."""
        self.report.read += 1
        state = self.store.load_conversation(ref.owner, ref.id)
        if state is None:
            self.report.skip("gone", ref.id, "deleted while the export ran")
            return
        messages = list(state.get("messages") or [])
        if state.get("system"):
            messages.insert(0, {"role": "system", "content": state["system"]})
        self._render(ref, "web", messages, None)


def export(
    store: Storage,
    sink: Sink,
    *,
    renderer: TrainingRenderer | None = None,
    owner: str | None = None,
    since: float | None = None,
    until: float | None = None,
    last_only: bool = True,
    include_web: bool = False,
    progress: Callable[[], None] | None = None,
    page: int = PAGE,
) -> ExportReport:
    """Write the store's Responses conversations (``last_only``: each chain's last response,
    one row; else one row per response) and, with ``include_web``, its web conversations, to
    ``sink``; the :class:`ExportReport`. :class:`~chatfmt.errors.StoreError` when the store
    fails."""
    exporter = Exporter(store, sink, renderer)
    responses = ExportQuery("responses", owner, since, until, last_only)
    for ref in refs(store, responses, page=page):
        exporter.response(ref)
        if progress is not None:
            progress()
    if include_web:
        web = ExportQuery("conversations", owner, since, until)
        for ref in refs(store, web, page=page):
            exporter.web(ref)
            if progress is not None:
                progress()
    return exporter.report
