"""A model's own chat template, rendered as ``transformers`` renders one.

``apply_chat_template`` compiles the template in jinja2's immutable sandbox with
``trim_blocks`` and ``lstrip_blocks``, the loop-controls extension and its own
``{% generation %}`` tag (written out as its body, when rendering), a ``tojson`` filter that
keeps non-ASCII text (and honours ``indent``), and the globals ``raise_exception`` and
``strftime_now``; it passes the messages, ``tools``, ``add_generation_prompt``, the special
tokens and any extra keyword (``enable_thinking``). :class:`ChatTemplate` does the same, so a
render here is what a Python serving stack renders for the model.

A template is code from the model's file, so it only ever runs sandboxed: no attribute of a
Python object beyond what the sandbox allows, no file or network access. Templates that change
a list they build (Kimi K2's) need jinja2's mutable sandbox, as llama.cpp's engine allows:
:meth:`ChatTemplate.render` retries in it when the immutable one refuses.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any

from .._imports import require
from ..errors import ChatFmtError


class TemplateError(ChatFmtError):
    """The template failed on a conversation: its own ``raise_exception``, or an error of
    the template code."""


def _generation_extension() -> Any:
    """``{% generation %}`` … ``{% endgeneration %}``: transformers' tag marking what the
    assistant generates (for its training masks); rendering, it writes its body unchanged."""
    from jinja2 import nodes
    from jinja2.ext import Extension

    class Generation(Extension):
        tags = {"generation"}  # noqa: RUF012 - jinja2 declares it a plain attribute

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body, lineno=lineno)

    return Generation


def _raise(message: str) -> None:
    raise TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: Any = None, **_: Any) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent)


class ChatTemplate:
    """The Jinja chat template ``source``, with the special tokens its model defines."""

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "") -> None:
        require("jinja2", extra="server")
        from jinja2 import TemplateSyntaxError

        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        try:
            self._immutable = self._environment(mutable=False).from_string(source)
        except TemplateSyntaxError as exc:
            raise TemplateError(f"the chat template does not compile: {exc}") from None
        self._mutable: Any = None

    @staticmethod
    def _environment(*, mutable: bool) -> Any:
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment

        kind = SandboxedEnvironment if mutable else ImmutableSandboxedEnvironment
        extensions = [loopcontrols, _generation_extension()]
        env = kind(trim_blocks=True, lstrip_blocks=True, extensions=extensions)
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
        return env

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **kwargs: Any,
    ) -> str:
        """The prompt text ``apply_chat_template(..., tokenize=False)`` returns; raises
        :class:`TemplateError` when the template refuses the conversation or fails on it."""
        from jinja2.exceptions import SecurityError
        from jinja2.exceptions import TemplateError as JinjaError

        context = {
            "messages": [dict(m) for m in messages],
            "tools": [dict(t) for t in tools] if tools else None,
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            **kwargs,
        }
        try:
            try:
                text: str = self._immutable.render(**context)
            except SecurityError:
                if self._mutable is None:
                    self._mutable = self._environment(mutable=True).from_string(self.source)
                text = self._mutable.render(**context)
        except TemplateError:
            raise
        except (JinjaError, TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            # A template written for other inputs (a key it expects, a type it assumes): the
            # conversation is one it cannot render, as a serving stack would find too.
            raise TemplateError(f"the chat template failed: {type(exc).__name__}: {exc}") from None
        return text
