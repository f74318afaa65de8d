"""The Responses API: ``POST /v1/responses`` (whole or streamed), ``GET`` / ``DELETE
/v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items``, over the chat service and the
response store.

A request is rendered as the chat request it amounts to (:mod:`.responses_input`), generated
and parsed by the same pipeline as ``/v1/chat/completions``, and answered with output items and
typed events (:mod:`.responses_output`). With ``store`` (the default, as OpenAI's), the response
and the conversation after it are kept (:mod:`.store`), so ``previous_response_id`` continues it,
after a restart too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import ValidationError

from ..driver import TurnDriver
from ..store import AsyncStore, BrokenChain, Chain, ExactIds, StoreFull, owner_of
from .continuation import Continuation
from .errors import ApiError, validation_error
from .http import ApiKeys, json_bytes, json_response, read_json_body, require_bearer
from .openapi import error_responses, json_body
from .responses_input import (
    ResponsesRequest,
    chat_request,
    check_include,
    input_items,
    to_messages,
)
from .responses_output import OutputBuilder, item_id
from .service import ChatService, Prepared
from .sse import sse_event, sse_response, stream_errors, until_disconnect

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
        check_include(req)
        items = input_items(req)
        new = to_messages(items)
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
            chat = chat_request(req, history, new)
        except ValidationError as exc:
            raise validation_error(exc.errors()) from None
        continuation = None
        if chain is not None and chain.ids is not None and chain.view is not None:
            # The stored reply is the message right before this request's new ones.
            before_reply = len(chat.messages) - len(new) - 1
            continuation = Continuation(chain.ids, chain.view, before_reply, chain.reply)
        prep = await self.chat.prepare_async(chat, continuation=continuation, view=True)
        if chain is not None and self.chat.metrics is not None:
            self.chat.metrics.continued(prep.exact_base > 0)
        return Exchange(req, owner, items, new, prep)

    def response(
        self,
        rid: str,
        created: float,
        req: ResponsesRequest,
        status: str,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None,
        incomplete: bool = False,
    ) -> dict[str, Any]:
        return {
            "id": rid,
            "object": "response",
            "created_at": int(created),
            "status": status,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens,
            "model": self.chat.model_name,
            "output": output,
            "parallel_tool_calls": True
            if req.parallel_tool_calls is None
            else req.parallel_tool_calls,
            "previous_response_id": req.previous_response_id,
            "reasoning": None,
            "store": req.store and self.store is not None,
            "temperature": req.temperature,
            "text": req.text or {"format": {"type": "text"}},
            "tool_choice": req.tool_choice or "auto",
            "tools": req.tools or [],
            "top_p": req.top_p,
            "truncation": "disabled",
            "usage": usage,
            "metadata": req.metadata or {},
        }

    def finished(self, ex: Exchange, done: Generated) -> dict[str, Any]:
        """The response body once the generation ``done``."""
        status = "incomplete" if done.length else "completed"
        usage = _usage(len(ex.prep.prompt_ids), done.n_completion, done.cached)
        return self.response(
            ex.rid, ex.created, ex.req, status, done.builder.items, usage, incomplete=done.length
        )

    async def keep(self, ex: Exchange, response: dict[str, Any], generated: Generated) -> None:
        """Store the response with the messages it added (when asked and possible). The reply
        is written as the client saw it, from the output items (text the call policy demoted
        included), so a continued conversation renders what the client would send back; its
        exact ids are kept too when they say the same (see :func:`_exact`). A store that
        fails is logged: the answer is not lost for it."""
        if self.store is None or not response["store"]:
            return
        reply = _reply(response)
        exact = _exact(ex.prep, generated, reply, self.chat.stop_ids)
        try:
            await self.store.put(
                ex.owner, response, _stored_items(ex.items), [*ex.new, reply], exact
            )
        except (StoreFull, BrokenChain) as exc:
            # Not kept, and the body says so (store: false): the limit, or the conversation
            # it continues lost a response while it was generated (it could not be continued).
            log.warning("response %s not stored: %s", response["id"], exc)
            response["store"] = False
        except Exception:
            log.exception("storing response %s failed", response["id"])
            response["store"] = False


def _reply(response: dict[str, Any]) -> dict[str, Any]:
    """The response's output as one assistant chat message (reasoning included)."""
    text, calls, reasoning = [], [], []
    for item in response["output"]:
        if item["type"] == "message":
            text += [part.get("text", "") for part in item["content"]]
        elif item["type"] == "function_call" and item.get("status") != "incomplete":
            # A call cut off is not runnable, so the conversation does not keep it: nothing
            # can answer it, and its partial arguments are no call to show the model again.
            function = {"name": item["name"], "arguments": item["arguments"] or "{}"}
            calls.append({"id": item["call_id"], "type": "function", "function": function})
        elif item["type"] == "reasoning":
            reasoning += [part.get("text", "") for part in item.get("content") or ()]
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
    ids = ids[: next((i for i, t in enumerate(ids) if t in stop_ids), len(ids))]
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
    return ExactIds(prep.view, base, [*prep.prompt_ids[base:], *ids], n_reply)


def _usage(prompt: int, completion: int, cached: int | None) -> dict[str, Any]:
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached or 0, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


async def _generate(
    svc: ResponsesService,
    ex: Exchange,
    on_events: Callable[[list[dict[str, Any]]], Awaitable[None]],
) -> Generated:
    """Run the generation, handing each step's stream events to ``on_events``."""
    driver, _policy = svc.chat.driver(ex.prep)
    builder = OutputBuilder(
        encrypted_reasoning="reasoning.encrypted_content" in (ex.req.include or ())
    )
    async for events in driver.steps():
        await on_events(builder.feed(events))
    await on_events(builder.finish(cut=driver.cut))
    return Generated(driver, builder)


def build_responses_router(svc: ResponsesService, *, api_key: ApiKeys) -> APIRouter:
    router = APIRouter()

    @router.post(
        "/v1/responses",
        response_model=None,
        openapi_extra=json_body(ResponsesRequest),
        responses=error_responses(400, 401, 404, 415, 502, 503),
    )
    async def create(request: Request) -> Response:
        owner = owner_of(require_bearer(request, api_key))
        req = await read_json_body(request, ResponsesRequest, svc.chat.limits)
        ex = await svc.prepare(req, owner)
        if req.stream:
            return sse_response(_stream(svc, ex))

        async def ignore(_events: list[dict[str, Any]]) -> None:
            return None

        done = await until_disconnect(request, _generate(svc, ex, ignore))
        body = svc.finished(ex, done)
        await svc.keep(ex, body, done)
        return Response(json.dumps(body, ensure_ascii=False), media_type="application/json")

    async def stored(request: Request, rid: str) -> Any:
        owner = owner_of(require_bearer(request, api_key))
        if svc.store is None:
            raise ApiError(
                404, "this server keeps no responses (--no-store)", type="not_found_error"
            )
        found = await svc.store.get(owner, rid)
        if found is None:
            raise ApiError(
                404, f"response {rid!r} not found", type="not_found_error", param="response_id"
            )
        return found

    @router.get("/v1/responses/{rid}", response_model=None, responses=error_responses(401, 404))
    async def get(request: Request, rid: str) -> Response:
        found = await stored(request, rid)
        return Response(
            json.dumps(found.response, ensure_ascii=False), media_type="application/json"
        )

    @router.delete("/v1/responses/{rid}", response_model=None, responses=error_responses(401, 404))
    async def delete(request: Request, rid: str) -> Response:
        owner = owner_of(require_bearer(request, api_key))
        if svc.store is None or not await svc.store.delete(owner, rid):
            await stored(request, rid)  # answers the 404 that says why
        return json_response({"id": rid, "object": "response.deleted", "deleted": True})

    @router.get(
        "/v1/responses/{rid}/input_items", response_model=None, responses=error_responses(401, 404)
    )
    async def input_items_of(request: Request, rid: str) -> Response:
        found = await stored(request, rid)
        order = request.query_params.get("order", "desc")
        if order not in ("asc", "desc"):
            raise ApiError(400, 'order must be "asc" or "desc"', param="order")
        try:
            limit = int(request.query_params.get("limit", "20"))
        except ValueError:
            limit = 0
        if not 1 <= limit <= 100:
            raise ApiError(400, "limit must be an integer from 1 to 100", param="limit")
        data = found.input_items if order == "asc" else list(reversed(found.input_items))
        after = request.query_params.get("after")
        if after is not None:
            ids = [i["id"] for i in data]
            if after not in ids:
                raise ApiError(400, f"no input item {after!r} in this response", param="after")
            data = data[ids.index(after) + 1 :]
        shown = data[:limit]
        page = {
            "object": "list",
            "data": shown,
            "first_id": shown[0]["id"] if shown else None,
            "last_id": shown[-1]["id"] if shown else None,
            "has_more": len(data) > limit,
        }
        return Response(json.dumps(page, ensure_ascii=False), media_type="application/json")

    return router


async def _stream(svc: ResponsesService, ex: Exchange) -> AsyncIterator[bytes]:
    """The typed event stream, every event with its ``sequence_number``."""
    queue: asyncio.Queue[list[dict[str, Any]] | None] = asyncio.Queue()
    sequence = 0

    def frame(event: dict[str, Any]) -> bytes:
        nonlocal sequence
        event = {**event, "sequence_number": sequence}
        sequence += 1
        return sse_event(json_bytes(event), event=event["type"])

    async def push(events: list[dict[str, Any]]) -> None:
        await queue.put(events)

    rid, created, req = ex.rid, ex.created, ex.req
    started = svc.response(rid, created, req, "in_progress", [], None)
    yield frame({"type": "response.created", "response": started})
    yield frame({"type": "response.in_progress", "response": started})
    task = asyncio.ensure_future(_generate(svc, ex, push))
    task.add_done_callback(lambda _t: queue.put_nowait(None))

    async def body() -> AsyncIterator[bytes]:
        while (events := await queue.get()) is not None:
            for event in events:
                yield frame(event)
        done = task.result()
        final = svc.finished(ex, done)
        await svc.keep(ex, final, done)
        yield frame({"type": f"response.{final['status']}", "response": final})

    def failed(error: ApiError) -> list[bytes]:
        response = svc.response(rid, created, req, "failed", [], None)
        response["error"] = {"code": "server_error", "message": error.message}
        return [
            frame(
                {
                    "type": "error",
                    "code": error.code or "server_error",
                    "message": error.message,
                    "param": None,
                }
            ),
            frame({"type": "response.failed", "response": response}),
        ]

    async def stop() -> None:
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async for data in stream_errors(body(), "response", on_error=failed, close=stop):
        yield data
