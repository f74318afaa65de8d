"""GLM-4 chat (``glm-4-9b-chat``): ChatGLM3's roles and segments, calls written as JSON.

``[gMASK]<sop>``, then per message ``<|role|>{metadata}\\n{content}`` with no separators, and
``<|assistant|>`` as the generation prompt. Tools are described in a ``<|system|>`` turn of
their own (the assistant's identity, ``# 可用工具``, then per function ``## name`` and its
definition as JSON indented by 4), placed before the conversation's messages. A call is an
``<|assistant|>`` segment whose metadata is the tool name and whose content is the arguments
as JSON; its result is an
``<|observation|>`` turn. This reproduces the published chat template text for text (no
GLM-4 tokenizer is available offline, so ids are not checked against a reference).
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import ParseError, ValidationError
from ..messages import Conversation, Message, ToolCall
from ..segments import Block, BlockBuilder, Control, Segment, Text
from ..validation import check_not_empty, check_tool_calls_only_on_assistant, check_tool_pairing
from .base import EndRule
from .glm import ASSISTANT, NEXT_ROLES, ROLE_CONTROL, ROLE_TOKENS, SYSTEM, GLMDialect, early_glm

ENDOFTEXT = "<|endoftext|>"
#: The assistant identity that opens the tools turn (the published template's wording).
TOOLS_IDENTITY = (
    "你是一个名为 ChatGLM 的人工智能助手。你是基于智谱AI训练的语言模型 GLM-4 模型开发的，"
    "你的任务是针对用户的问题和要求提供适当的答复和支持。"
)
_TOOLS_HEAD = "\n\n# 可用工具"
_TOOL_TAIL = "\n在调用上述函数时，请使用 Json 格式表示调用的参数。"
_PREFIX = Block((Control("[gMASK]"), Control("<sop>")))


def _json_call(body: str) -> dict[str, Any]:
    """A call segment's body: the arguments as one JSON object."""
    value = json.loads(body.strip())
    if not isinstance(value, dict):
        raise ParseError(f"the arguments are a JSON {type(value).__name__}, not an object")
    return value


def _call_text(call: ToolCall) -> str:
    # History re-renders what the model wrote; calls made elsewhere are written compactly.
    return call.raw if call.raw is not None else call.arguments


class GLM4(GLMDialect):
    """The GLM-4 chat format (THUDM/glm-4-9b-chat)."""

    name = "glm4"
    #: The model ends a reply by writing the next role token, or end-of-text after the last
    #: one: no end is in the history, so the last trained reply is closed with it.
    end_rule = EndRule(closing="<|endoftext|>")
    fingerprint = early_glm(
        "GLM-4 chat ([gMASK]<sop>, role tokens, calls as JSON in an <|assistant|> segment)",
        "[gMASK]<sop>",
        20,
    )
    controls = ("[gMASK]", "<sop>", *ROLE_TOKENS, ENDOFTEXT)
    stop_controls = (*NEXT_ROLES, ENDOFTEXT)
    #: ``[gMASK]`` and ``<sop>`` are never generated; as text they stay text.
    text_controls = (*ROLE_TOKENS, ENDOFTEXT)
    turns_render_independently = True
    decode_call = staticmethod(_json_call)

    # ==== Validation ====

    def validate(self, conversation: Conversation, *, strict: bool = True) -> None:
        """Tool calls only on assistant messages, one-line tool names, results paired with
        calls; strict also refuses messages the template would silently drop."""
        check_tool_calls_only_on_assistant(conversation)
        for i, m in enumerate(conversation.messages):
            for call in m.tool_calls or ():
                self.check_call_name(call, i)
            if strict and not m.content and not m.tool_calls:
                raise ValidationError(
                    f"a {m.role} message with empty content is dropped by the GLM-4 template "
                    "and the model would never see it; give it content or remove it",
                    index=i,
                    rule="content",
                )
        if strict:
            check_not_empty(conversation)
            check_tool_pairing(conversation, strict=True)

    # ==== Rendering ====

    def write(
        self, b: BlockBuilder, conversation: Conversation, add_generation_prompt: bool
    ) -> None:
        """The prefix, the tools turn, one block per message, the ``<|assistant|>`` prompt."""
        b.add(_PREFIX)
        if conversation.tools:
            text = "\n" + TOOLS_IDENTITY + _TOOLS_HEAD
            for tool in conversation.tools:
                definition = json.dumps(tool.function, ensure_ascii=False, indent=4)
                # One newline before "##": the template has two, but renders (trim_blocks, as
                # transformers and vLLM run it) with the first one eaten by its block tag.
                text += f"\n## {tool.name}\n\n{definition}{_TOOL_TAIL}"
            b.add(Block((Control(SYSTEM), Text(text))))
        for i, m in enumerate(conversation.messages):
            segments = _message_segments(m)
            if segments:
                b.add(Block(segments, (i,)))
        if add_generation_prompt:
            b.add(Block((Control(ASSISTANT),)))


def _message_segments(m: Message) -> tuple[Segment, ...]:
    """``<|role|>{metadata}\\n{content}`` per part; the template skips empty contents."""
    role = ROLE_CONTROL[m.role]
    parts: list[tuple[str, str]] = []
    if m.role == "assistant" and m.tool_calls:
        if m.content:
            parts.append(("", m.content))
        # Explicit metadata on a single-call message is what the model wrote: keep it.
        explicit = m.metadata if not m.content and len(m.tool_calls) == 1 else None
        parts += [(explicit or c.name, _call_text(c)) for c in m.tool_calls]
    elif m.content:
        parts.append((m.metadata or "", m.content))
    segments: list[Segment] = []
    for metadata, content in parts:
        segments += (Control(role), Text(f"{metadata}\n{content}"))
    return tuple(segments)
