"""Markdown to safe HTML for the web chat: markdown-it-py parses, nh3 (Ammonia) sanitizes.

Why on the server: the page's text is untrusted model output, and HTML built from it is the
page's one injection risk. Two maintained libraries do the work instead of a hand-written
renderer: markdown-it-py (CommonMark plus GFM tables and strikethrough, raw HTML off, so a
``<script>`` in the text stays text) and nh3, which then keeps only the tags and attributes
this Markdown produces. Either alone would stop ``<img onerror>``; both together mean a bug in
one is not a hole.

What the HTML may hold: paragraphs, emphasis, ``del``, code, ``pre`` (a fence's language as
``class="language-…"``), quotes, lists (``ol start``), headings (``h2``-``h6``: the page's
title is its only ``h1``), tables (a column's alignment as ``class="align-…"``, since the
page's CSP blocks ``style`` attributes), links (http, https and mailto only; ``target=_blank``
and ``rel="noopener noreferrer"``), ``hr`` and ``br``. No images: a Markdown image becomes a
link to it, so a reply cannot make the browser fetch a remote URL (the interpreter's plots
are shown by the page itself, from the tool result).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import nh3
from markdown_it import MarkdownIt
from markdown_it.token import Token

#: The URL schemes a link may have; anything else (javascript:, data:, relative) stays text.
LINK_SCHEMES = frozenset({"http", "https", "mailto"})
_LINK = re.compile(r"\s*(?:https?://|mailto:)", re.IGNORECASE)
#: A fence's language as a class: a word of the usual characters (``c++``, ``objective-c``).
_LANGUAGE = re.compile(r"language-[A-Za-z0-9_+#.-]{1,40}")
#: A table column's alignment, from markdown-it's style attribute to a class of the page's CSS.
_ALIGN = {f"text-align:{side}": f"align-{side}" for side in ("left", "center", "right")}
_ALIGN_CLASSES = frozenset(_ALIGN.values())

TAGS = frozenset(
    {"p", "br", "hr", "em", "strong", "del", "code", "pre", "blockquote", "ul", "ol", "li"}
    | {"h1", "h2", "h3", "h4", "h5", "h6", "a"}
    | {"table", "thead", "tbody", "tr", "th", "td"}
)
ATTRIBUTES = {"a": {"href"}, "code": {"class"}, "ol": {"start"}, "th": {"class"}, "td": {"class"}}


#: What the cleaner sets on every link: a new tab, with no access to this page, no referrer.
_LINK_REL = "noopener noreferrer"
_SET_ON_LINKS = frozenset({("target", "_blank"), ("rel", _LINK_REL)})


def _valid_link(url: str) -> bool:
    return _LINK.match(url) is not None


def _attribute(tag: str, name: str, value: str) -> str | None:
    """nh3's filter: the one value each allowed attribute may take, else the attribute goes."""
    if tag == "a" and name == "href":
        return value if _valid_link(value) else None
    if tag == "a" and (name, value) in _SET_ON_LINKS:  # the cleaner's own, filtered too
        return value
    if tag == "code" and name == "class":
        return value if _LANGUAGE.fullmatch(value) else None
    if tag in ("th", "td") and name == "class":
        return value if value in _ALIGN_CLASSES else None
    if tag == "ol" and name == "start":
        return value if value.isdigit() and len(value) <= 9 else None
    return None


def _parser() -> MarkdownIt:
    # breaks: a single newline is a line break, as chat models (and their readers) mean it.
    md = MarkdownIt("commonmark", {"html": False, "breaks": True})
    md.enable(["table", "strikethrough"])
    # An image would make the browser fetch whatever URL the model wrote: without the rule,
    # "![alt](url)" reads as "!" and a link to the URL, which the reader may follow or not.
    md.disable("image")
    md.validateLink = _valid_link  # type: ignore[method-assign]
    return md


_MD = _parser()
_CLEANER = nh3.Cleaner(
    tags=set(TAGS),
    attributes={tag: set(names) for tag, names in ATTRIBUTES.items()},
    attribute_filter=_attribute,
    url_schemes=set(LINK_SCHEMES),
    link_rel=_LINK_REL,
    set_tag_attribute_values={"a": {"target": "_blank"}},
    strip_comments=True,
)


def _adjust(tokens: Iterable[Token]) -> None:
    """Shape markdown-it's tokens into the HTML the page wants (see the module's docstring)."""
    for token in tokens:
        if token.children:
            _adjust(token.children)
        if token.type in ("heading_open", "heading_close"):
            token.tag = f"h{min(int(token.tag[1]) + 1, 6)}"
        elif token.type in ("s_open", "s_close"):
            token.tag = "del"  # struck-out text is removed text; <s> is for "no longer true"
        elif token.type in ("th_open", "td_open"):
            style = token.attrs.pop("style", None)
            if isinstance(style, str) and style in _ALIGN:
                token.attrSet("class", _ALIGN[style])


def render_markdown(text: str) -> str:
    """``text`` (Markdown, untrusted) as sanitized HTML."""
    env: dict[str, object] = {}
    tokens = _MD.parse(text, env)
    _adjust(tokens)
    html = _MD.renderer.render(tokens, _MD.options, env)
    return _CLEANER.clean(html)


__all__ = ["ATTRIBUTES", "LINK_SCHEMES", "TAGS", "render_markdown"]
