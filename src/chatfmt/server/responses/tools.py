"""The Responses API's ``tools`` as the chat tools chatfmt renders, and the way back.

Agents send more than flat function tools. Codex CLI, at its defaults, groups its MCP tools in
``namespace`` tools and adds hosted tools (``web_search``) that OpenAI runs on its side:

- a ``namespace`` tool's functions are offered to the model as flat functions named
  ``<namespace>__<name>`` (the flat name Codex itself uses where a wire has no namespaces);
  a call of one comes back as a ``function_call`` item with the function's own ``name`` and
  its ``namespace``, as OpenAI's API answers it, and a ``function_call`` input item that
  carries a ``namespace`` is rendered under the flat name again;
- a hosted tool chatfmt cannot run is left out of the prompt, logged, and named in the
  response's ``tools_left_out`` (an extra field: clients read what they know of a response),
  rather than refused: a 400 would stop a client at its defaults before it said anything;
- anything else that is not a tool object is still a 400 naming it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ..http.errors import ApiError

log = logging.getLogger("chatfmt.server")

#: Tools OpenAI runs on its own side (or that need a client-side runtime chatfmt does not
#: speak): left out of the prompt, with why.
HOSTED = {
    "web_search": "web search runs on OpenAI's side; chatfmt has no search engine",
    "web_search_preview": "web search runs on OpenAI's side; chatfmt has no search engine",
    "file_search": "file search needs OpenAI's vector stores",
    "mcp": "remote MCP servers are called by OpenAI's side; send their tools as functions",
    "image_generation": "chatfmt serves no image model",
    "computer_use_preview": "computer use needs a model trained for it",
    "computer_use": "computer use needs a model trained for it",
    "code_interpreter": (
        "the Responses API here runs no hosted interpreter (the web chat and `chatfmt chat` "
        "have the sandboxed one); send a function tool and run the code yourself"
    ),
    "local_shell": "local_shell calls are a format only OpenAI's codex models write",
    "tool_search": "tool search runs on OpenAI's side",
    "custom": "free-form (custom) tools are not served yet; send a function tool",
}

#: What joins a namespace and a function's name in the flat name the model sees.
NAMESPACE_JOIN = "__"


def flat_name(namespace: str, name: str) -> str:
    """The name a namespaced function is offered under (Codex's own flat form: stray
    underscores at the join are trimmed, so ``mcp__fs__`` + ``read`` is ``mcp__fs__read``)."""
    return f"{namespace.rstrip('_')}{NAMESPACE_JOIN}{name.lstrip('_')}"


@dataclass(frozen=True)
class LeftOut:
    """A tool of the request that is not in the prompt, and why."""

    index: int
    type: str
    reason: str

    def as_json(self) -> dict[str, Any]:
        return {"index": self.index, "type": self.type, "reason": self.reason}


@dataclass
class ToolPlan:
    """The request's tools as chat tools, the namespaced functions among them (flat name →
    namespace and own name), and the tools left out."""

    chat_tools: list[dict[str, Any]] | None = None
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)
    left_out: list[LeftOut] = field(default_factory=list)

    def call_name(self, name: str, namespace: Any) -> str:
        """The flat name of a call a client sends back (``namespace`` as its item has it)."""
        if isinstance(namespace, str) and namespace:
            return flat_name(namespace, name)
        return name


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, message, param=param)


def _function(tool: dict[str, Any], name: str) -> dict[str, Any]:
    fn = {k: tool[k] for k in ("description", "parameters", "strict") if k in tool}
    return {"type": "function", "function": {"name": name, **fn}}


def plan_tools(tools: list[dict[str, Any]] | None) -> ToolPlan:
    """The chat tools of a Responses request's ``tools`` (see the module's docstring)."""
    plan = ToolPlan()
    if tools is None:
        return plan
    out: list[dict[str, Any]] = []
    seen: dict[str, str] = {}  # flat name → where it was declared

    def add(tool: dict[str, Any], name: Any, param: str) -> None:
        if not isinstance(name, str) or not name:
            raise _bad("a function tool needs a non-empty string 'name'", f"{param}.name")
        if name in seen:
            raise _bad(
                f"two tools are offered to the model as {name!r} ({seen[name]} and {param}); "
                "rename one",
                param,
            )
        seen[name] = param
        out.append(_function(tool, name))

    for i, tool in enumerate(tools):
        param = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise _bad("a tool must be an object", param)
        kind = tool.get("type")
        if kind == "function":
            add(tool, tool.get("name"), param)
        elif kind == "namespace":
            space, members = tool.get("name"), tool.get("tools")
            if not isinstance(space, str) or not space:
                raise _bad("a namespace tool needs a non-empty string 'name'", f"{param}.name")
            if not isinstance(members, list):
                raise _bad("a namespace tool needs a list of 'tools'", f"{param}.tools")
            for j, member in enumerate(members):
                where = f"{param}.tools[{j}]"
                if not isinstance(member, dict) or member.get("type", "function") != "function":
                    kind_of = member.get("type") if isinstance(member, dict) else None
                    why = "only function tools are served inside a namespace"
                    plan.left_out.append(LeftOut(i, f"{space}: {kind_of}", why))
                    continue
                name = member.get("name")
                if not isinstance(name, str) or not name:
                    raise _bad("a function tool needs a non-empty string 'name'", f"{where}.name")
                flat = flat_name(space, name)
                add(member, flat, where)
                plan.namespaced[flat] = (space, name)
        elif isinstance(kind, str) and kind in HOSTED:
            plan.left_out.append(LeftOut(i, kind, HOSTED[kind]))
        else:
            raise _bad(
                f"tool type {kind!r} is not supported here; chatfmt serves function and "
                f"namespace tools, and leaves out the hosted ones ({', '.join(sorted(HOSTED))})",
                f"{param}.type",
            )
    for gone in plan.left_out:
        log.warning("tools[%d] (%s) left out of the prompt: %s", gone.index, gone.type, gone.reason)
    # Every tool left out: the request is one without tools (an empty list is not one).
    plan.chat_tools = out or None
    return plan
