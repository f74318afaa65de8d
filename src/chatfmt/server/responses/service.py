"""The Responses API's service, over the chat service and the response store.

A request is rendered as the chat request it amounts to (:mod:`.input`), generated and parsed
by the same driver as ``/v1/chat/completions``, and answered with output items and typed
events (:mod:`.output`). With ``store`` (the default, as OpenAI's), the response and the
conversation after it are kept (:mod:`chatfmt.store`), so ``previous_response_id`` continues
it, after a restart too. The routes are in :mod:`.routes`.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from ...driver import TurnDriver
from ...store import AsyncStore, BrokenChain, Chain, ExactIds, NewResponse, StoreFull
from ..chat.continuation import Continuation
from ..chat.service import ChatService, Prepared
from ..http.errors import ApiError, validation_error
from .input import (
    ResponsesRequest,
    chat_request,
    check_include,
    input_items,
    to_messages,
)
from .output import OutputBuilder, item_id
from .tools import LeftOut, ToolPlan, flat_name, plan_tools
from .wire import (
    FunctionCallItem,
    IncompleteDetails,
    MessageItem,
    OutputItem,
    ReasoningConfig,
    ReasoningItem,
    ResponseError,
    ResponseObject,
    ResponseStatus,
    Usage,
)

log = logging.getLogger("chatfmt.server")


def _stored_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Input items as ``input_items`` lists them (OpenAI's item shapes): each with an id,
    message content as parts (``output_text`` for assistant messages, ``input_text`` else)."""
    out = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            part_type = "output_text" if role == "assistant" else "input_text"
            content = item.get("content", "")
            texts = [content] if isinstance(content, str) else [p.get("text", "") for p in content]
            parts: list[dict[str, Any]] = [{"type": part_type, "text": t} for t in texts]
            if part_type == "output_text":
                parts = [{**p, "annotations": []} for p in parts]
            out.append(
                {
                    "id": item.get("id") or item_id("msg"),
                    "type": "message",
                    "role": role,
                    "status": "completed",
                    "content": parts,
                }
            )
        elif kind in ("function_call", "function_call_output"):
            prefix = "fc" if kind == "function_call" else "fco"
            out.append({**item, "id": item.get("id") or item_id(prefix), "status": "completed"})
    return out


@dataclass
class Exchange:
    """One ``POST /v1/responses`` being answered: the request, whose it is, its input items
    (as ``input_items`` lists them) and the chat messages they add, the prepared generation,
    and the response's id and creation time."""

    req: ResponsesRequest
    owner: str
    items: list[dict[str, Any]]
    new: list[dict[str, Any]]
    prep: Prepared
    #: The request's tools as the model was offered them (namespaced functions flattened,
    #: hosted tools left out).
    tools: ToolPlan = field(default_factory=ToolPlan)
    rid: str = field(default_factory=lambda: item_id("resp"))
    created: float = field(default_factory=time.time)


class ResponsesService:
    """Responses for one chat service; ``store`` keeps them (``None``: nothing is kept)."""

    def __init__(self, chat: ChatService, store: AsyncStore | None) -> None:
        self.chat = chat
        self.store = store

    async def prepare(self, req: ResponsesRequest, owner: str) -> Exchange:
        """The request checked, its conversation (the stored one it continues, then its own
        input) rendered: the exchange ready to generate."""
        check_include(req, self.chat.engine.sampling_support)
        items = input_items(req)
        new = to_messages(items)
        tools = plan_tools(req.tools)
        history: list[dict[str, Any]] = []
        chain: Chain | None = None
        if req.previous_response_id is not None:
            if self.store is None:
                raise ApiError(
                    400,
                    "previous_response_id needs stored responses, and this server keeps none "
                    "(it runs with --no-store)",
                    param="previous_response_id",
                )
            try:
                chain = await self.store.chain(owner, req.previous_response_id)
            except BrokenChain as exc:
                raise ApiError(
                    404, str(exc), param="previous_response_id", code="previous_response_not_found"
                ) from None
            if chain is None:
                raise ApiError(
                    404,
                    f"previous response {req.previous_response_id!r} not found",
                    type="invalid_request_error",
                    param="previous_response_id",
                    code="previous_response_not_found",
                )
            history = chain.messages
        try:
            chat = chat_request(req, history, new, tools)
        except ValidationError as exc:
            raise validation_error(exc.errors()) from None
        continuation = None
        if chain is not None and chain.ids is not None and chain.view is not None:
            # The stored reply is the message right before this request's new ones.
            before_reply = len(chat.messages) - len(new) - 1
            continuation = Continuation(chain.ids, chain.view, before_reply, chain.reply)
        try:
            prep = await self.chat.prepare_async(chat, continuation=continuation, view=True)
        except ApiError as exc:
            if exc.param == "reasoning_effort":  # named as this API's request names it
                exc.param = "reasoning.effort"
            raise
        if chain is not None and self.chat.metrics is not None:
            self.chat.metrics.continued(prep.exact_base > 0)
        return Exchange(req, owner, items, new, prep, tools)

    def response(
        self,
        rid: str,
        created: float,
        req: ResponsesRequest,
        status: ResponseStatus,
        output: list[OutputItem],
        usage: Usage | None,
        *,
        incomplete: bool = False,
        error: ResponseError | None = None,
        left_out: list[LeftOut] | None = None,
    ) -> ResponseObject:
        return ResponseObject(
            id=rid,
            created_at=int(created),
            status=status,
            error=error,
            incomplete_details=IncompleteDetails(reason="max_output_tokens")
            if incomplete
            else None,
            instructions=req.instructions,
            max_output_tokens=req.max_output_tokens,
            model=self.chat.model_name,
            output=output,
            parallel_tool_calls=True
            if req.parallel_tool_calls is None
            else req.parallel_tool_calls,
            previous_response_id=req.previous_response_id,
            reasoning=ReasoningConfig(effort=req.reasoning.effort, summary=req.reasoning.summary)
            if req.reasoning is not None
            else None,
            store=req.store and self.store is not None,
            temperature=req.temperature,
            text=req.text or {"format": {"type": "text"}},
            tool_choice=req.tool_choice or "auto",
            tools=req.tools or [],
            top_p=req.top_p,
            usage=usage,
            metadata=req.metadata or {},
            tools_left_out=[t.as_json() for t in left_out] if left_out else None,
        )

    def finished(self, ex: Exchange, done: Generated) -> ResponseObject:
        """The response body once the generation ``done``."""
        status: Literal["completed", "incomplete"] = "incomplete" if done.length else "completed"
        usage = Usage.of(len(ex.prep.prompt_ids), done.n_completion, done.cached)
        return self.response(
            ex.rid,
            ex.created,
            ex.req,
            status,
            done.builder.items,
            usage,
            incomplete=done.length,
            left_out=ex.tools.left_out,
        )

    async def keep(self, ex: Exchange, response: ResponseObject, generated: Generated) -> None:
        """Store the response with the messages it added (when asked and possible). The reply
        is written as the client saw it, from the output items (text the call policy demoted
        included), so a continued conversation renders what the client would send back; its
        exact ids are kept too when they say the same (see :func:`_exact`). A store that
        fails is logged: the answer is not lost for it (``store`` becomes false)."""
        if self.store is None or not response.store:
            return
        reply = _reply(response)
        exact = _exact(ex.prep, generated, reply, self.chat.stop_ids)
        try:
            kept = NewResponse(response.as_json(), _stored_items(ex.items), [*ex.new, reply], exact)
            await self.store.put(ex.owner, kept)
        except (StoreFull, BrokenChain) as exc:
            # Not kept, and the body says so (store: false): the limit, or the conversation
            # it continues lost a response while it was generated (it could not be continued).
            log.warning("response %s not stored: %s", response.id, exc)
            response.store = False
        except Exception:
            log.exception("storing response %s failed", response.id)
            response.store = False


def _reply(response: ResponseObject) -> dict[str, Any]:
    """The response's output as one assistant chat message (reasoning included)."""
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for item in response.output:
        if isinstance(item, MessageItem):
            text += [part.text for part in item.content]
        elif isinstance(item, FunctionCallItem) and item.status != "incomplete":
            # A call cut off is not runnable, so the conversation does not keep it: nothing
            # can answer it, and its partial arguments are no call to show the model again.
            # (A namespaced function under the flat name the model was offered it by.)
            name = item.name if item.namespace is None else flat_name(item.namespace, item.name)
            function = {"name": name, "arguments": item.arguments or "{}"}
            calls.append({"id": item.call_id, "type": "function", "function": function})
        elif isinstance(item, ReasoningItem):
            reasoning += [part.text for part in item.content]
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None and not reasoning:
        message["content"] = ""
    return message


@dataclass
class Generated:
    """What one generation gave: its driver (counts, the parsed turn, the reply's ids) and
    the output items built from its events."""

    driver: TurnDriver
    builder: OutputBuilder

    @property
    def length(self) -> bool:
        return self.driver.cut

    @property
    def n_completion(self) -> int:
        return self.driver.completion_tokens

    @property
    def cached(self) -> int | None:
        return self.driver.cached_tokens

    @property
    def ids(self) -> list[int] | None:
        """The ids the engine produced, up to the stop token (``None``: it gave text)."""
        return self.driver.produced


def _exact(
    prep: Prepared, generated: Generated, reply: dict[str, Any], stop_ids: frozenset[int]
) -> ExactIds | None:
    """The exchange's exact ids to keep, or ``None`` when they would not say what the client
    was told: the reply did not end at a stop token (cut by ``max_output_tokens`` or a stop
    string, or the engine just stopped: a call may be unfinished in the ids while the client
    got it completed), the engine gave text rather than ids, or the reply the client saw
    differs from the one the ids parse to (a call demoted to text by the call policy)."""
    ids, decoder = generated.ids, generated.driver.decoder
    if ids is None or prep.view is None or generated.length:
        return None
    if decoder.stopped_by != "control":
        return None
    end = next((i for i, t in enumerate(ids) if t in stop_ids), len(ids))
    stop = ids[end] if end < len(ids) else None  # kept for training exports
    ids = ids[:end]
    parsed = decoder.result()
    try:
        calls = [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls]
        shown = [
            (c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in reply.get("tool_calls") or ()
        ]
    except ValueError:
        return None
    if (parsed.content or "") != (reply["content"] or "") or calls != shown:
        return None
    if (parsed.reasoning or "") != reply.get("reasoning_content", ""):
        return None
    base = prep.exact_base
    n_reply = len(prep.prompt_ids) - prep.reply_start + len(ids)
    return ExactIds(prep.view, base, [*prep.prompt_ids[base:], *ids], n_reply, stop)
