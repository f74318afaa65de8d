"""How a dialect recognises its own chat template: a :class:`Fingerprint` it declares.

A template is fingerprinted by the markup it writes: its control tokens, the tags of its tool
calls and reasoning, the variables that switch them, and a few short sentences that only one
format writes. Never by its whole text: a re-indented or reformatted copy of a template (Jinja's
``{%-`` trims, quotes, line breaks) is the same format, so markers are matched on the
:func:`normalize_template` form of both.

Each dialect class carries its fingerprint (``Dialect.fingerprint``); :mod:`.detect` asks every
registered dialect, plugins included, so a dialect from another package is detected exactly as a
built-in one is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "CHATML_MARKUP",
    "HERMES_MARKUP",
    "THINK_MARKUP",
    "Fingerprint",
    "markup_tokens",
    "normalize_template",
]

# ==== Normalising a template ====

_TRIM_OPEN = re.compile(r"(\{[{%#])[-+]")
_TRIM_CLOSE = re.compile(r"[-+]([}%#]\})")
_SPACE = re.compile(r"\s+")
_PAD_OPEN = re.compile(r"(\{[{%#]) ")
_PAD_CLOSE = re.compile(r" ([}%#]\})")


def normalize_template(text: str) -> str:
    """``text`` with the differences that do not change the format taken out: an escaped
    ``\\n`` and a line break are both one space, as is any run of whitespace; Jinja's trim
    marks (``{%-``, ``-}}``) and the spaces inside delimiters are dropped; double quotes are
    single quotes. Markers are matched in this form, and normalised the same way."""
    t = text.replace("\\n", "\n").replace('"', "'")
    t = _TRIM_CLOSE.sub(r"\1", _TRIM_OPEN.sub(r"\1", t))
    t = _SPACE.sub(" ", t)
    return _PAD_CLOSE.sub(r"\1", _PAD_OPEN.sub(r"\1", t))


#: Control-token-like strings: ``<|x|>``, DeepSeek's ``<｜x｜>``, ``[X]`` and ``<x>`` tags.
_TOKEN = re.compile(
    r"<\|[^|\s{}'+]{1,40}\|>|<｜[^｜\s{}'+]{1,40}｜>|\[[A-Z_/]{2,30}\]|</?[a-z_]{2,30}>|\[gMASK\]"
)


def markup_tokens(norm: str) -> set[str]:
    """The control-token-like strings a normalised template writes."""
    return set(_TOKEN.findall(norm))


# ==== Markup several families write ====

CHATML_MARKUP = frozenset({"<|im_start|>", "<|im_end|>", "<|endoftext|>"})
#: Hermes-style calls, results and tool lists (Qwen2.5 and its successors).
HERMES_MARKUP = frozenset(
    {"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<tools>", "</tools>"}
)
THINK_MARKUP = frozenset({"<think>", "</think>"})


@dataclass(frozen=True)
class Fingerprint:
    """What a template of one dialect writes. Every marker is matched normalised.

    Detection tries fingerprints by descending :attr:`precedence` (then by name) and takes the
    first that fits, naming any other that fits too; a fingerprint should exclude what the
    formats it resembles write, so that precedence only breaks true ties (a Qwen2.5 template
    is also plain ChatML). A dialect from another package keeps the default 0: every built-in
    format is tried before it, so an over-broad plugin fingerprint cannot take their models.
    """

    #: Why a template with these markers is this dialect (shown to the user).
    why: str
    requires: tuple[str, ...] = ()
    #: At least one of these, when given.
    any_of: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()
    #: Every control-token-like string must be one of these (``None``: not checked).
    tokens: frozenset[str] | None = None
    #: Markers required when the template writes tools at all (it mentions ``tools``).
    with_tools: tuple[str, ...] = ()
    #: ChatML formats: the text a system turn may start with when the template writes one
    #: of its own (a default system prompt); any other is a format chatfmt does not render.
    fixed_system: tuple[str, ...] | None = None
    #: GGUF ``general.architecture`` values whose models have this format only: chosen for a
    #: model that has no chat template at all.
    architectures: tuple[str, ...] = ()
    precedence: int = 0

    def fits(self, norm: str, tokens: set[str]) -> bool:
        """Whether a template (``norm``, from :func:`normalize_template`, writing the markup
        ``tokens``) is in this format."""
        if not all(normalize_template(m) in norm for m in self.requires):
            return False
        if self.any_of and not any(normalize_template(m) in norm for m in self.any_of):
            return False
        if any(normalize_template(m) in norm for m in self.excludes):
            return False
        if self.tokens is not None and not tokens <= self.tokens:
            return False
        if self.with_tools and re.search(r"\btools\b", norm):
            if not all(normalize_template(m) in norm for m in self.with_tools):
                return False
        if self.fixed_system is not None:
            allowed = {normalize_template(s) for s in self.fixed_system}
            if any(text.strip() not in allowed for text in _fixed_systems(norm)):
                return False
        return True


def _fixed_systems(norm: str) -> list[str]:
    """The text of every system turn the template writes itself (a default system prompt),
    up to where a literal, an expression or a control token ends it."""
    return re.findall(r"<\|im_start\|>system ([^'<{+~]{3,})", norm)
