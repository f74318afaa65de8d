"""Which parsed tool calls a response may carry (``tools``, ``tool_choice``,
``parallel_tool_calls``), applied to the parser's event stream."""

from __future__ import annotations

import json
from dataclasses import replace

from ...events import Event, Finish, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart


class CallPolicy:
    """Which parsed tool calls a response may carry, applied to the event stream.

    A call of a tool the request did not declare, or one past ``max_calls`` (a named
    ``tool_choice`` or ``parallel_tool_calls: false``), is not returned as a call: its JSON is
    given as text instead, so nothing the model wrote is lost. A turn none of whose kept calls
    was completed finishes with ``stop``, so no client runs a call it did not ask for or one
    that was cut off (a stop string inside a call: the :class:`~chatfmt.decoding.TurnDecoder`
    drops its end). Kept calls are numbered from 0 in the response.
    """

    def __init__(self, allowed: frozenset[str] | None = None, max_calls: int | None = None):
        self.allowed = allowed
        self.max_calls = max_calls
        self._index: dict[int, int | None] = {}  # parser index → response index (None: demoted)
        self._demoted: dict[int, list[str]] = {}  # parser index → [name, arguments so far]
        self._ids: dict[int, str] = {}
        self.kept_ids: set[str] = set()
        self._ended = False  # a kept call was completed
        self.demoted_text: list[str] = []

    def filter(self, events: list[Event]) -> list[Event]:
        out: list[Event] = []
        for ev in events:
            if isinstance(ev, ToolCallStart):
                ok = self.allowed is None or ev.name in self.allowed
                if ok and (self.max_calls is None or len(self._ids) < self.max_calls):
                    index = len(self._ids)
                    self._index[ev.index] = index
                    self._ids[ev.index] = ev.id
                    self.kept_ids.add(ev.id)
                    out.append(ToolCallStart(index, ev.id, ev.name))
                else:
                    self._index[ev.index] = None
                    self._demoted[ev.index] = [ev.name, ""]
            elif isinstance(ev, ToolCallDelta | ToolCallEnd):
                out.extend(self._call_event(ev))
            elif isinstance(ev, Finish):
                reason = ev.reason
                if reason == "tool_calls" and not self._ended:
                    reason = "stop"
                out.append(Finish(reason))
            else:
                out.append(ev)
        return out

    def _call_event(self, ev: ToolCallDelta | ToolCallEnd) -> list[Event]:
        target = self._index.get(ev.index)
        if target is None:
            demoted = self._demoted.get(ev.index)
            if demoted is None:
                return []
            if isinstance(ev, ToolCallDelta):
                demoted[1] += ev.arguments
                return []
            del self._demoted[ev.index]
            text = f'{{"name": {json.dumps(demoted[0], ensure_ascii=False)}, "arguments": '
            text += f"{demoted[1] or '{}'}}}"
            self.demoted_text.append(text)
            return [TextDelta(text)]
        if isinstance(ev, ToolCallDelta):
            return [ToolCallDelta(target, ev.arguments)]
        self._ended = self._ended or ev.complete
        return [replace(ev, index=target)]  # keeps what the parser said of the call's end
