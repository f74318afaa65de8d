"""The Messages API's service, over the chat service.

A request is rendered as the chat request it amounts to (:mod:`.request`), generated and
parsed by the same driver as ``/v1/chat/completions`` and filtered by the same call policy,
and answered with content blocks (:mod:`.output`). Nothing is stored: the Messages API is
stateless (the client sends the whole conversation each time; the engine's prompt cache
makes a returning conversation cheap, reported as ``cache_read_input_tokens``).
"""

from __future__ import annotations

import re
import secrets
from contextlib import aclosing
from dataclasses import dataclass, field, replace

from ...driver import TurnDriver
from ..chat.service import ChatService, Prepared
from ..http.errors import ApiError
from .output import ContentBuilder
from .request import ChatForm, CountTokensRequest, MessagesRequest, chat_form
from .wire import Message, MessageUsage, StopReason, TokenCount


def message_id() -> str:
    return "msg_" + secrets.token_hex(12)


@dataclass
class Exchange:
    """One ``POST /v1/messages`` being answered: the request, the prepared generation, what
    the reply shows of its thinking, and whether the context window bounded ``max_tokens``
    (a reply cut there stopped at the window, not at the client's limit)."""

    req: MessagesRequest
    prep: Prepared
    show_thinking: bool
    capped: bool
    id: str = field(default_factory=message_id)

    def builder(self) -> ContentBuilder:
        return ContentBuilder(show_thinking=self.show_thinking)


#: Parameters of the chat request that the Messages API names otherwise.
_PARAMS = {
    "reasoning_effort": "thinking",
    "chat_template_kwargs": "thinking",
    "response_format": "output_config.format",
    "stop": "stop_sequences",
}
_TOOL_PARAM = re.compile(r"tools\[(\d+)\]\.function\.(\w+)")
#: How :class:`~chatfmt.errors.ValidationError` names the chat message it is about.
_MESSAGE_AT = re.compile(r"message (\d+): ")


def _renamed(exc: ApiError, form: ChatForm) -> ApiError:
    """A chat service error, naming what the Messages request sent: its fields by their
    names here, and a chat message by the message (or block) it was made from."""
    param = exc.param
    if param in _PARAMS:
        exc.param = _PARAMS[param]
    elif param is not None and (m := _TOOL_PARAM.fullmatch(param)):
        field_name = "input_schema" if m[2] == "parameters" else m[2]
        exc.param = f"tools.{m[1]}.{field_name}"
    if param == "messages" and (m := _MESSAGE_AT.match(exc.message)):
        index = int(m[1])
        if index < len(form.origins):
            exc.param = form.origins[index]
            # (The rules speak of chat messages' fields; a tool_result's is tool_use_id.)
            exc.message = exc.message[m.end() :].replace("tool_call_id", "tool_use_id")
    return exc


class MessagesService:
    """Messages for one chat service."""

    def __init__(self, chat: ChatService) -> None:
        self.chat = chat

    async def _prepare(self, form: ChatForm) -> Prepared:
        try:
            return await self.chat.prepare_async(form.chat)
        except ApiError as exc:
            raise _renamed(exc, form) from None

    async def prepare(self, req: MessagesRequest) -> Exchange:
        """The request checked and rendered: the exchange ready to generate.

        ``max_tokens`` is bounded by the room the prompt leaves in the context window rather
        than refused over it (clients such as Claude Code ask for 32,000 tokens whatever the
        model); a reply that reaches the window stops with ``model_context_window_exceeded``,
        as Anthropic's API does."""
        form = chat_form(req)
        prep = await self._prepare(form)
        room = prep.params.max_tokens  # no max_tokens in the chat request: all the room left
        prep.params = replace(prep.params, max_tokens=min(req.max_tokens, room))
        return Exchange(req, prep, form.show_thinking, capped=req.max_tokens > room)

    async def count(self, req: CountTokensRequest) -> TokenCount:
        """The prompt's tokens as :meth:`prepare` renders it (``usage``'s input tokens, cached
        or not, of the same request)."""
        prep = await self._prepare(chat_form(req))
        return TokenCount(input_tokens=len(prep.prompt_ids))

    async def generate(self, ex: Exchange, driver: TurnDriver) -> Message:
        """The whole reply (no stream)."""
        builder = ex.builder()
        async with aclosing(driver.steps()) as steps:
            async for events in steps:
                builder.feed(events)
        builder.finish()
        return self.message(ex, driver, builder)

    def message(self, ex: Exchange, driver: TurnDriver, builder: ContentBuilder) -> Message:
        """The message once ``driver`` has finished."""
        reason, sequence = stop_of(ex, driver)
        return Message(
            id=ex.id,
            content=builder.blocks,
            model=ex.req.model,
            stop_reason=reason,
            stop_sequence=sequence,
            usage=usage_of(driver),
        )


def usage_of(driver: TurnDriver) -> MessageUsage:
    return MessageUsage.of(driver.prompt_tokens, driver.completion_tokens, driver.cached_tokens)


def stop_of(ex: Exchange, driver: TurnDriver) -> tuple[StopReason, str | None]:
    """Why the reply ended, and the stop sequence that ended it."""
    reason = driver.finish_reason
    if reason == "tool_calls":
        return "tool_use", None
    if reason == "length":
        return ("model_context_window_exceeded" if ex.capped else "max_tokens"), None
    # A stop sequence the engine matched itself (a remote server given them) just ends the
    # output: the decoder cannot tell which, and the turn reads as ended.
    sequence = driver.decoder.stop_string
    if sequence is not None:
        return "stop_sequence", sequence
    return "end_turn", None
