"""Caches that make a server's renders cheap: a returning conversation pays for its new turn.

A chat client sends the whole history on every request, as fresh JSON. Two bounded caches,
shared by the requests of one server, keep what does not change (the server's
:class:`~chatfmt.segments.BlockEncoder` keeps the ids of the blocks it encoded besides):

- :class:`ToolsCache`: a tool list → its checked :class:`Tool` objects, keyed by its JSON text
  (key order included: some formats print the definitions verbatim), so a tool set is checked
  once and its objects (and the block that renders them) are the same from one request to
  the next;
- :class:`ConversationCache`: recent requests. One that the next request starts with (the
  history re-sent, with the reply and a new message) lends it its messages, and its prompt is
  extended by :func:`~chatfmt.context.render_extension` (the last turn and what follows)
  where the dialect renders its turns independently.

Exactness: a hit gives the ids an uncached render gives (tests/test_render_cache.py checks
that for several dialects, after evictions too). Every bound is on entries *and* on size; the
least recently used entries go first.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .context import render_extension
from .dialects.base import Dialect
from .errors import ChatFmtError
from .messages import Conversation, Message, Tool, from_openai, message_from_openai_fast
from .segments import BlockEncoder, RenderedPrompt

#: Default bounds (the worst case is measured by bench/bench_render.py).
TOOLS_ENTRIES = 64
TOOLS_CHARS = 1024 * 1024
RENDER_ENTRIES = 64
RENDER_TOKENS = 256 * 1024

#: How many messages a returning conversation may add and still be found (a reply, and a tool
#: loop's calls and results).
LOOKBACK = 32


class _LRU:
    """A dict bounded by entries and by a size per entry, least recently used out first (a
    plain dict keeps insertion order; a hit is moved to the end)."""

    def __init__(self, max_entries: int, max_size: int) -> None:
        self.max_entries = max_entries
        self.max_size = max_size
        self.size = 0
        self._data: dict[object, tuple[Any, int]] = {}

    def get(self, key: object) -> Any:
        data = self._data
        hit = data.pop(key, None)
        if hit is None:
            return None
        data[key] = hit
        return hit[0]

    def put(self, key: object, value: Any, size: int) -> None:
        if size > self.max_size or self.max_entries <= 0:
            return  # bigger than the whole cache: not kept
        data = self._data
        old = data.pop(key, None)
        if old is not None:
            self.size -= old[1]
        data[key] = (value, size)
        self.size += size
        while len(data) > self.max_entries or self.size > self.max_size:
            oldest = next(iter(data))
            self.size -= data.pop(oldest)[1]

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        self._data.clear()
        self.size = 0


def tools_key(definitions: Sequence[Mapping[str, Any]]) -> str | None:
    """The tool definitions as JSON text, key order kept: equal text, equal rendering."""
    try:
        # No circularity check (a cycle ends in RecursionError): it costs a fifth of the time.
        return json.dumps(
            list(definitions), ensure_ascii=False, allow_nan=False, check_circular=False
        )
    except (TypeError, ValueError, RecursionError):
        return None


class ToolsCache:
    """Tool lists → their :class:`Tool` objects (checked once per distinct list)."""

    def __init__(self, max_entries: int = TOOLS_ENTRIES, max_chars: int = TOOLS_CHARS) -> None:
        self._lru = _LRU(max_entries, max_chars)
        self._lock = threading.Lock()

    def tools(self, definitions: Sequence[Mapping[str, Any]]) -> tuple[Tool, ...]:
        """``Tool(definition=d)`` for each definition (raising as that does)."""
        key = tools_key(definitions)
        if key is not None:
            with self._lock:
                hit = self._lru.get(key)
            if hit is not None:
                return hit  # type: ignore[no-any-return]
        tools = tuple(Tool(definition=dict(d)) for d in definitions)
        if key is not None:
            with self._lock:
                self._lru.put(key, tools, len(key))
        return tools

    def clear(self) -> None:
        with self._lock:
            self._lru.clear()


def _same_dialect(a: Dialect, b: Dialect) -> bool:
    """Whether ``a`` and ``b`` render alike: one object, or one class with equal settings
    (requests configure copies: thinking switched, the tools' schemas)."""
    return a is b or (type(a) is type(b) and vars(a) == vars(b))


def _last_key(raw: object) -> object:
    """An index key for a request that ends with the message ``raw``: cheap and loose (a
    collision only costs a miss); what is found is checked in full."""
    if type(raw) is not dict:
        return None
    content = raw.get("content")
    calls = raw.get("tool_calls")
    first = calls[0] if type(calls) is list and calls else None
    call_id = first.get("id") if type(first) is dict else None
    return (
        raw.get("role") if type(raw.get("role")) is str else None,
        content if type(content) is str else None,
        raw.get("tool_call_id") if type(raw.get("tool_call_id")) is str else None,
        call_id if type(call_id) is str else None,
    )


@dataclass(frozen=True, slots=True, eq=False)
class _Entry:
    """One request: its messages as sent and as converted, and its prompt (never changed
    after it is stored, so threads may share it)."""

    raw: list[Mapping[str, Any]]
    conversation: Conversation
    prompt: RenderedPrompt
    dialect: Dialect
    strict: bool
    generation: bool
    chars: int


@dataclass(frozen=True, slots=True, eq=False)
class Lookup:
    """The messages of a request, and the stored request they extend (if any)."""

    raw: list[Mapping[str, Any]]
    messages: list[Message]
    entry: _Entry | None
    plain: bool
    chars: int


class ConversationCache:
    """Recent requests, so that a conversation that comes back (its history re-sent as new
    JSON, with a reply and a new message) converts and renders only what is new.

    A request is found by its last message and its length; the new request's messages must
    *equal* the stored ones (one comparison in C), and were all built by
    :func:`~chatfmt.messages.message_from_openai_fast`, which accepts only strings where the
    message has text: equal dicts then make equal messages (``1 == True`` cannot mix two up).
    The stored :class:`Message` objects stand in for them, so the prompt is extended by
    :func:`~chatfmt.context.render_extension` where the dialect renders turns independently.
    Bounded by ``max_entries`` requests and ``max_tokens``: their prompts' ids plus a quarter
    of their messages' characters. Thread-safe: entries are never changed once stored.
    """

    def __init__(self, max_entries: int = RENDER_ENTRIES, max_tokens: int = RENDER_TOKENS) -> None:
        self._lru = _LRU(max_entries, max_tokens)
        self._lock = threading.Lock()
        self.hits = 0

    def messages(self, raw: Sequence[Mapping[str, Any]]) -> Lookup:
        """:func:`~chatfmt.messages.from_openai` of ``raw`` (raising as it does), reusing the
        messages of a stored request that ``raw`` starts with."""
        raw = list(raw)
        n = len(raw)
        entry = None
        with self._lock:
            for k in range(n, max(0, n - LOOKBACK), -1):
                found: _Entry | None = self._lru.get((_last_key(raw[k - 1]), k))
                if found is not None and found.raw == raw[:k]:
                    entry = found
                    break
        if entry is not None:
            messages = list(entry.conversation.messages)
            chars = entry.chars
        else:
            messages, chars = [], 0
        plain = True
        for i in range(len(messages), n):
            message = message_from_openai_fast(raw[i])
            if message is None:
                message = from_openai([raw[i]], first_index=i)[0]  # raises naming index i
                plain = False
            chars += len(message.content or "") + len(message.reasoning or "")
            messages.append(message)
        return Lookup(raw, messages, entry, plain, chars)

    def render(
        self,
        dialect: Dialect,
        conversation: Conversation,
        encoder: BlockEncoder,
        lookup: Lookup,
        *,
        add_generation_prompt: bool = True,
        strict: bool = True,
        store: bool = True,
    ) -> RenderedPrompt:
        """:meth:`Dialect.render` of ``conversation``, made of ``lookup``'s messages (validated
        in full, as that does); kept for the next request when ``store``."""
        dialect.validate(conversation, strict=strict)
        prompt = None
        old = lookup.entry
        if (
            old is not None
            and old.strict == strict
            and old.generation == add_generation_prompt
            and _same_dialect(old.dialect, dialect)
        ):
            try:
                prompt = render_extension(
                    dialect,
                    encoder,
                    old.conversation,
                    old.prompt,
                    conversation,
                    add_generation_prompt=add_generation_prompt,
                    strict=strict,
                )
            except (ChatFmtError, ValueError):
                prompt = None  # the short render's own checks: render in full, as uncached
        if prompt is None:
            blocks = dialect.render_blocks(
                conversation, add_generation_prompt=add_generation_prompt
            )
            prompt = encoder.encode(blocks)
        else:
            self.hits += 1
        raw = lookup.raw
        if store and lookup.plain and raw and (old is None or old.raw is not raw):
            # A copy of each message dict (shallow, as pydantic's copy of the request was):
            # the server parses a new body each time, but a library caller may reuse and
            # change its dicts, and an entry must compare equal only to what it rendered.
            copied: list[Mapping[str, Any]] = [dict(m) for m in raw]
            entry = _Entry(
                copied, conversation, prompt, dialect, strict, add_generation_prompt, lookup.chars
            )
            with self._lock:
                self._lru.put(
                    (_last_key(raw[-1]), len(raw)), entry, len(prompt.ids) + lookup.chars // 4
                )
        return prompt

    @property
    def size(self) -> tuple[int, int]:
        """Requests held, and their size as the bound counts it."""
        with self._lock:
            return len(self._lru), self._lru.size

    def clear(self) -> None:
        with self._lock:
            self._lru.clear()
