"""What a chat request may call and how sampling is held to it: the tools the model is shown
(``tool_choice``), the grammar the engine must follow (a ``response_format`` JSON schema, or
the dialect's call syntax for the offered tools), the call opening that forces a call where
no grammar can, and the refusals when a request asks for what the engine cannot enforce."""

from __future__ import annotations

import logging

from ...dialects.base import Dialect
from ...engines.base import Engine
from ...errors import SchemaTooDeep
from ...grammar import Grammar, SchemaError, json_grammar
from ...messages import Tool
from ...segments import Segment
from ..http.errors import ApiError
from .schemas import ChatCompletionRequest, NamedToolChoice

log = logging.getLogger("chatfmt.server")


def constraint(
    req: ChatCompletionRequest,
    tools: list[Tool],
    dialect: Dialect,
    engine: Engine,
    *,
    call_grammar: bool,
) -> Grammar | None:
    """The grammar sampling must follow: the reply's JSON schema (``response_format``),
    or the dialect's call syntax for the offered tools, as far as the engine can
    enforce it. What a request requires (a format, a strict tool) and the engine cannot
    enforce is refused, never silently left free."""
    fmt = json_reply_grammar(req, dialect, engine)
    if fmt is not None or not tools:
        return fmt
    choice = req.tool_choice
    forced = choice is not None and choice not in ("auto", "none")
    single = isinstance(choice, NamedToolChoice) or req.parallel_tool_calls is False
    support = engine.grammar_support
    strict = [t.name for t in tools if t.function.get("strict") is True]
    wanted = forced or call_grammar or bool(strict)
    if wanted and (support == "lazy" or (forced and support == "full")):
        try:
            return dialect.call_grammar(tools, required=forced, single=single)
        except SchemaError as exc:
            # A promise the grammar cannot keep is refused, as OpenAI does; so is a schema
            # too deep for any grammar (it would not be a working tool either).
            if strict or isinstance(exc, SchemaTooDeep):
                names = [Tool(definition=d).name for d in req.tools or ()]
                failing = next((n for n in names if exc.subject == f"function {n!r}"), "")
                index = names.index(failing) if failing in names else 0
                raise ApiError(
                    400,
                    str(exc),
                    param=f"tools[{index}].function.parameters",
                    code="invalid_function_parameters",
                ) from None
            # A schema the grammar cannot read (not strict): the call stays free, as it
            # was before grammars; a forced call is then started in the prompt.
            log.warning("tool calls are not constrained: %s", exc)
            return None
    if strict:
        raise ApiError(
            400,
            f"tool {strict[0]!r} is strict, but this server's engine ({engine.name}) "
            "cannot constrain tool calls here; serve with --engine llama-server (the "
            "default) or a llama.cpp server, or send the tool without strict",
            param="tools",
            code="unsupported_strict_tools",
        )
    return None


def json_reply_grammar(
    req: ChatCompletionRequest, dialect: Dialect, engine: Engine
) -> Grammar | None:
    """The grammar of the JSON reply ``response_format`` asks for, if the engine can
    enforce it; refused otherwise."""
    fmt = req.response_format
    schema = fmt.constraint if fmt is not None else None
    if fmt is None or schema is None:
        return None
    if engine.grammar_support == "none":
        raise ApiError(
            400,
            f"response_format {fmt.type!r} needs an engine that constrains sampling; "
            f"this server's engine ({engine.name}) cannot. Serve with "
            "--engine llama-server (the default) or a llama.cpp server",
            param="response_format",
            code="unsupported_response_format",
        )
    if req.tools and req.tool_choice != "none":
        raise ApiError(
            400,
            "response_format with tools the model may call is not supported yet: the reply "
            'would have to be JSON or a tool call. Send tool_choice "none", or no tools',
            param="response_format",
            code="unsupported_response_format",
        )
    spec = fmt.json_schema
    try:
        # A thinking model writes its thought first: the JSON is the reply after it.
        return dialect.after_thought(
            json_grammar(
                schema,
                strict=bool(spec and spec.strict),
                name=spec.name or "" if spec else "",
            )
        )
    except SchemaError as exc:
        raise ApiError(
            400, str(exc), param="response_format", code="invalid_json_schema"
        ) from None


def forced_call(
    req: ChatCompletionRequest, tools: list[Tool], dialect: Dialect
) -> tuple[Segment, ...]:
    """``tool_choice`` "required" or a named function: the dialect's call opening, so the
    model can only continue with a call (when the dialect knows how to force one)."""
    choice = req.tool_choice
    if not tools or choice is None or choice in ("auto", "none"):
        return ()
    name = None if choice == "required" else tools[0].name
    return dialect.forced_call_prefix(name)


#: Why a model is served for chat only, unless its dialect says otherwise.
NO_TOOLS_SHOWN = "its chat template shows the model no tools, so it was not trained to call any"


def check_chat_only(req: ChatCompletionRequest, why: str = NO_TOOLS_SHOWN) -> None:
    """A model served for chat only takes no tools, and no calls or results in history:
    the format would write them as its template never did, or chatfmt could not read the
    model's calls back (``why`` says which)."""
    called = next((i for i, m in enumerate(req.messages) if m.get("tool_calls")), None)
    if req.tools or called is not None:
        raise ApiError(
            400,
            f"this model is served for chat only: {why}; send the request without "
            + ("'tools'" if req.tools else "tool calls in its messages"),
            param="tools" if req.tools else f"messages[{called}].tool_calls",
            code="tools_not_supported",
        )


def select_tools(req: ChatCompletionRequest, declared: tuple[Tool, ...] = ()) -> list[Tool]:
    """The tools the model is shown; ``declared``: all of ``req.tools``, as Tools."""
    defs = req.tools or []
    choice = req.tool_choice
    if not defs and choice not in (None, "auto", "none"):
        raise ApiError(
            400,
            "tool_choice asks for a tool call, but the request has no 'tools'; send the "
            "tool definitions, or leave tool_choice out",
            param="tool_choice",
        )
    if choice == "none" or not defs:
        # "none": the model must not call tools, so it is not shown any.
        return []
    tools = list(declared) if len(declared) == len(defs) else [Tool(definition=d) for d in defs]
    if choice is None or isinstance(choice, str):
        return tools  # "auto" and "required" show every tool; the model decides
    named = [t for t in tools if t.name == choice.function.name]
    if not named:
        raise ApiError(
            400,
            f"tool_choice names {choice.function.name!r}, which is not in 'tools' "
            f"(tools: {', '.join(t.name for t in tools)})",
            param="tool_choice",
        )
    return named
