"""``POST /v1/responses``'s request, and its translation into the chat request chatfmt renders.

The Responses API says the same things as chat completions in other shapes: ``input`` items
(messages with ``input_text`` parts, ``function_call`` and ``function_call_output`` items)
instead of messages, flat function tools, ``text.format`` instead of ``response_format``,
``max_output_tokens``. A request becomes a :class:`~.schemas.ChatCompletionRequest` over the
stored conversation of ``previous_response_id`` (if any) plus its own input, so rendering,
constraints and parsing are exactly the chat endpoint's.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, model_validator

from ..chat.schemas import BudgetField, ChatCompletionRequest, SamplingFields
from ..http.bodies import lone_surrogate_at
from ..http.errors import ApiError
from .output import reasoning_of_blob
from .tools import ToolPlan, flat_name, plan_tools

#: OpenAI's ``include`` values. Those about tools and inputs chatfmt does not serve (file and
#: web search, computer use, hosted code interpreter, images) have nothing to add here.
INCLUDABLE = frozenset(
    {
        "file_search_call.results",
        "web_search_call.results",
        "web_search_call.action.sources",
        "message.input_image.image_url",
        "computer_call_output.output.image_url",
        "code_interpreter_call.outputs",
        "reasoning.encrypted_content",
        "message.output_text.logprobs",
    }
)


#: The ``include`` value that asks for the text's log-probabilities.
LOGPROBS = "message.output_text.logprobs"


class Reasoning(BaseModel):
    """The Responses API's ``reasoning``: ``effort`` maps onto the model's thinking switch or
    level (see :mod:`chatfmt.server.chat.reasoning`); chatfmt writes no summaries, so
    ``summary`` is accepted and reasoning items carry the whole reasoning text instead."""

    model_config = ConfigDict(extra="ignore")

    effort: str | None = None
    summary: str | None = None


class ResponsesRequest(SamplingFields, BudgetField):
    """The body of ``POST /v1/responses`` (fields chatfmt does not use are ignored); besides
    OpenAI's ``temperature`` and ``top_p``, chat completions' other sampling fields are taken
    alike (as vLLM does)."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    input: str | list[Any]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    max_output_tokens: StrictInt | None = Field(default=None, ge=1)
    #: Alternatives listed with each token's log-probability (turns them on, as ``include``
    #: ``message.output_text.logprobs`` does).
    top_logprobs: StrictInt | None = Field(default=None, ge=0, le=20)
    store: StrictBool = True
    previous_response_id: str | None = None
    include: list[str] | None = None
    stream: StrictBool = False
    metadata: dict[str, str] | None = None
    reasoning: Reasoning | None = None

    @property
    def wants_logprobs(self) -> bool:
        """Whether the text's log-probabilities are asked for (``include`` or a positive
        ``top_logprobs``)."""
        return LOGPROBS in (self.include or ()) or bool(self.top_logprobs)

    @model_validator(mode="after")
    def _valid_text(self) -> ResponsesRequest:
        # Everything is echoed back or stored as UTF-8: a lone surrogate (from a "\ud800"
        # escape) is no text, and would fail only after the generation ran.
        where = lone_surrogate_at(self.model_dump(exclude_none=True))
        if where is not None:
            raise ValueError(f"{where} contains a lone surrogate; send valid Unicode text")
        return self


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, message, param=param)


def _text_of(content: Any, param: str, *, role: str) -> str:
    """A message's content as text: a string, or ``input_text`` / ``output_text`` parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad("content must be a string or a list of text parts", param)
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            if not isinstance(part.get("text"), str):
                raise _bad(f"a {kind} part needs a string 'text'", f"{param}[{j}].text")
            texts.append(part["text"])
        elif kind == "refusal" and role == "assistant":
            texts.append(str(part.get("refusal", "")))
        else:
            raise _bad(
                f"content part of type {kind!r} is not supported; send input_text (or "
                "output_text for assistant messages) parts",
                f"{param}[{j}]",
            )
    return "".join(texts)


def check_include(req: ResponsesRequest, sampling: frozenset[str] = frozenset()) -> None:
    """Refuse ``include`` values that are not OpenAI's, or that chatfmt cannot honour on an
    engine that honours the ``sampling`` fields (:attr:`Engine.sampling_support`)."""
    for i, value in enumerate(req.include or ()):
        if value not in INCLUDABLE:
            raise _bad(
                f"include value {value!r} is not one of: {', '.join(sorted(INCLUDABLE))}",
                f"include[{i}]",
            )
    if req.wants_logprobs and "logprobs" not in sampling:
        include = req.include or []
        param = f"include[{include.index(LOGPROBS)}]" if LOGPROBS in include else "top_logprobs"
        raise ApiError(
            400,
            "log-probabilities cannot be returned by this server's engine; leave out "
            f"include {LOGPROBS!r} and top_logprobs, or serve with an engine that reports "
            "them (chatfmt's default llama-server, a llama.cpp server or vLLM)",
            param=param,
            code="unsupported_parameter",
        )


def input_items(req: ResponsesRequest) -> list[dict[str, Any]]:
    """The request's input as a list of items (a string is one user message)."""
    if isinstance(req.input, str):
        return [{"type": "message", "role": "user", "content": req.input}]
    if not req.input:
        raise _bad("input is empty; send a string or at least one item", "input")
    items = []
    for i, item in enumerate(req.input):
        if not isinstance(item, dict):
            raise _bad("an input item must be an object", f"input[{i}]")
        items.append(item)
    return items


def _reasoning_text(item: dict[str, Any], param: str) -> str:
    """A reasoning item's text: its ``reasoning_text`` parts, else its ``encrypted_content``
    as chatfmt wrote it (:func:`~.output.reasoning_blob`); summaries are left out
    (the model's own words are the parts)."""
    parts = item.get("content")
    if isinstance(parts, list) and parts:
        texts = [p.get("text") if isinstance(p, dict) else None for p in parts]
        if all(isinstance(t, str) for t in texts):
            return "".join(texts)  # type: ignore[arg-type]
        raise _bad("a reasoning item's content parts need a string 'text'", f"{param}.content")
    blob = item.get("encrypted_content")
    if blob is None:
        return ""
    text = reasoning_of_blob(blob) if isinstance(blob, str) else None
    if text is None:
        raise _bad(
            "this reasoning item's encrypted_content was not written by chatfmt and cannot "
            "be read here; send the item's content parts, or leave the item out",
            f"{param}.encrypted_content",
        )
    return text


def to_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Input items as OpenAI chat messages; an assistant message and the calls that follow it
    become one message, as chat history has them. A reasoning item goes with the assistant
    message or call after it (as ``reasoning_content``, which gpt-oss renders)."""
    out: list[dict[str, Any]] = []
    reasoning: list[str] = []
    reasoning_at: int | None = None  # the first reasoning item still waiting for its turn
    for i, item in enumerate(items):
        kind = item.get("type", "message" if "role" in item else None)
        param = f"input[{i}]"
        leads = kind == "function_call" or (kind == "message" and item.get("role") == "assistant")
        if reasoning_at is not None and kind not in ("reasoning", "item_reference") and not leads:
            raise _unfollowed(reasoning_at)
        if leads:
            reasoning_at = None
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise _bad(
                    f"message role {role!r} is not supported; use user, system, developer or "
                    "assistant",
                    f"{param}.role",
                )
            text = _text_of(item.get("content", ""), f"{param}.content", role=role)
            out.append({"role": role, "content": text})
            if role == "assistant" and reasoning:
                out[-1]["reasoning_content"], reasoning = "".join(reasoning), []
        elif kind == "function_call":
            call_id, name = item.get("call_id"), item.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise _bad("a function_call item needs a string call_id and name", param)
            space = item.get("namespace")
            if isinstance(space, str) and space:
                name = flat_name(space, name)  # as the model was offered it (.tools)
            arguments = item.get("arguments", "{}")
            call = {"id": call_id, "type": "function"}
            call["function"] = {"name": name, "arguments": arguments}  # type: ignore[assignment]
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant" and not reasoning:
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
                if reasoning:
                    out[-1]["reasoning_content"], reasoning = "".join(reasoning), []
        elif kind == "function_call_output":
            call_id, output = item.get("call_id"), item.get("output")
            if not isinstance(call_id, str):
                raise _bad("a function_call_output item needs a string call_id", param)
            if not isinstance(output, str):
                output = json.dumps(output, ensure_ascii=False)
            out.append({"role": "tool", "tool_call_id": call_id, "content": output})
        elif kind == "reasoning":
            text = _reasoning_text(item, param)
            reasoning_at = i if reasoning_at is None else reasoning_at
            if text:
                reasoning.append(text)
        elif kind == "item_reference":
            continue  # a reference to stored output: previous_response_id carries it
        else:
            raise _bad(
                f"input item type {kind!r} is not supported; send message, function_call or "
                "function_call_output items",
                f"{param}.type",
            )
    if reasoning_at is not None:
        raise _unfollowed(reasoning_at)
    return out


def _unfollowed(index: int) -> ApiError:
    return _bad(
        "a reasoning item must come right before the assistant message or function_call it led to",
        f"input[{index}]",
    )


def _tool_choice(choice: str | dict[str, Any] | None) -> Any:
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if (
        isinstance(choice, dict)
        and choice.get("type") == "function"
        and isinstance(choice.get("name"), str)
    ):
        space = choice.get("namespace")
        name = flat_name(space, choice["name"]) if isinstance(space, str) else choice["name"]
        return {"type": "function", "function": {"name": name}}
    raise _bad(
        'tool_choice must be "auto", "none", "required" or {"type": "function", "name": ...}',
        "tool_choice",
    )


def _response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    fmt = (text or {}).get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise _bad(
            'text.format must be an object: {"type": "text"}, {"type": "json_object"} or '
            '{"type": "json_schema", "name": ..., "schema": {...}}',
            "text.format",
        )
    kind = fmt.get("type")
    if kind == "json_schema":
        name = fmt.get("name")
        if not isinstance(name, str) or not name:
            # OpenAI requires it, and its SDK's Response model fails on a format without it.
            raise _bad(
                'text.format of type "json_schema" needs a "name" (a string naming the format)',
                "text.format.name",
            )
        schema = {k: fmt[k] for k in ("name", "description", "schema", "strict") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    if kind in ("text", "json_object"):
        return {"type": kind}
    raise _bad(f"text.format type {kind!r} is not supported", "text.format.type")


def chat_request(
    req: ResponsesRequest,
    history: list[dict[str, Any]],
    new: list[dict[str, Any]],
    tools: ToolPlan | None = None,
) -> ChatCompletionRequest:
    """The chat request that renders ``history`` (the stored conversation) plus ``new``, with
    ``tools`` (the request's, as :func:`.tools.plan_tools` made them chat tools)."""
    if tools is None:
        tools = plan_tools(req.tools)
    messages = [{"role": "system", "content": req.instructions}] if req.instructions else []
    messages += history + new
    body: dict[str, Any] = {
        "messages": messages,
        "tools": tools.chat_tools,
        "tool_choice": _tool_choice(req.tool_choice),
        "parallel_tool_calls": req.parallel_tool_calls,
        "response_format": _response_format(req.text),
        "max_tokens": req.max_output_tokens,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "logprobs": True if req.wants_logprobs else None,
        "top_logprobs": req.top_logprobs if req.wants_logprobs else None,
        "seed": req.seed,
        "top_k": req.top_k,
        "min_p": req.min_p,
        "presence_penalty": req.presence_penalty,
        "frequency_penalty": req.frequency_penalty,
        "repetition_penalty": req.repetition_penalty,
        "logit_bias": req.logit_bias,
        "stream": req.stream,
        "reasoning_effort": req.reasoning.effort if req.reasoning else None,
        "thinking_token_budget": req.thinking_token_budget,
    }
    try:
        return ChatCompletionRequest.model_validate(
            {k: v for k, v in body.items() if v is not None}
        )
    except ValueError as exc:
        raise ApiError(400, f"invalid request: {exc}") from None


Status = Literal["completed", "incomplete", "in_progress"]
