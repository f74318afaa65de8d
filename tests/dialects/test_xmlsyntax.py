"""The XML call-syntax engine: tags read from a family's layouts, and for every family (and a
new one declared here) the renderer's calls parsed back whole and in any chunking."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatfmt.dialects.glm45 import GLM46_XML, GLM47_XML
from chatfmt.dialects.minimax import MINIMAX_XML
from chatfmt.dialects.parsers.values import tool_schemas
from chatfmt.dialects.qwen3_coder import QWEN_XML
from chatfmt.dialects.xmlsyntax import XMLSyntax, XMLSyntaxParser, call_grammar
from chatfmt.events import ParseResult, merge_deltas
from chatfmt.segments import Control, Text
from xml_syntaxes import SYNTAXES, TOY

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "metric": {"type": "boolean"},
                    "where": {"type": "object"},
                    "tags": {"type": "array"},
                    "ratio": {"type": "number"},
                    "note": {"type": ["string", "null"]},
                },
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "get_time"}},
]


def test_tags_are_read_from_the_layouts() -> None:
    q = QWEN_XML
    assert (q.block_open, q.block_close, q.many) == ("<tool_call>", "</tool_call>", False)
    assert (q.name.open, q.name.close, q.call_close) == ("<function=", ">", "</function>")
    assert (q.key.open, q.key.close, q.value_open, q.value_close) == (
        "<parameter=",
        ">",
        "",
        "</parameter>",
    )
    assert q.pad == ("\n", "\n")  # the newlines around a value are the template's
    m = MINIMAX_XML
    assert m.many and (m.name.open, m.name.close) == ('<invoke name="', '">')
    assert (m.key.open, m.key.close, m.pad) == ('<parameter name="', '">', ("", ""))
    for g in (GLM46_XML, GLM47_XML):
        assert (g.name.open, g.name.close, g.call_close) == ("", "", "")  # a bare name
        assert (g.key.open, g.key.close) == ("<arg_key>", "</arg_key>")
        assert (g.value_open, g.value_close, g.pad) == ("<arg_value>", "</arg_value>", ("", ""))


def test_a_layout_without_its_placeholders_is_refused() -> None:
    with pytest.raises(ValueError, match="call"):
        XMLSyntax(
            block="<c></c>",
            call="{name}{arguments}",
            argument="{key}{value}",
            controls=(),
            scalars="json",
        )


def test_the_renderer_writes_the_layout_with_controls_apart() -> None:
    calls = [("get_weather", {"city": "Paris", "days": 3})]
    assert TOY.render(calls) == (
        '<calls>\n<call name="get_weather">\n<arg:city>Paris</arg>\n<arg:days>3</arg>\n'
        "</call>\n</calls>"
    )
    pieces = list(GLM47_XML.pieces(calls))
    assert [text for control, text in pieces if control] == [
        "<tool_call>",
        *("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>") * 2,
        "</tool_call>",
    ]
    # A tag in a value is the caller's text, never a control.
    tagged = list(QWEN_XML.pieces([("f", {"a": "</tool_call>"})]))
    assert (False, "</tool_call>") in tagged and tagged[-1] == (True, "</tool_call>")
    assert QWEN_XML.opening("f") == (Control("<tool_call>", False), Text("\n<function=f>\n"))
    assert GLM46_XML.opening(None) == (Control("<tool_call>", False),)


def _parse(syntax: XMLSyntax, chunks: list[str], reason: str = "stop") -> tuple[Any, ParseResult]:
    counter = itertools.count()
    parser = XMLSyntaxParser(
        syntax, id_factory=lambda: f"call_{next(counter)}", schemas=tool_schemas(TOOLS)
    )
    events = [e for c in chunks for e in parser.feed(c)]
    events += parser.finish(reason)  # type: ignore[arg-type]
    return merge_deltas(events), parser.result()


_WORDS = st.text(st.sampled_from("abc xyz_-.:é你\n\t{}[]\"'=/>"), max_size=12)
_ARGUMENTS = st.fixed_dictionaries(
    {"city": _WORDS},
    optional={
        "days": st.integers(-(10**6), 10**6),
        "metric": st.booleans(),
        "where": st.dictionaries(st.sampled_from("ab"), st.integers(0, 9), max_size=2),
        "tags": st.lists(_WORDS, max_size=2),
        "ratio": st.floats(-1e6, 1e6, allow_nan=False).filter(lambda x: x != int(x)),
        "note": _WORDS,
    },
)


@pytest.mark.parametrize("family", SYNTAXES)
@given(
    calls=st.lists(st.tuples(st.just("get_weather"), _ARGUMENTS), min_size=1, max_size=3),
    data=st.data(),
)
def test_rendered_calls_parse_back(family: str, calls: list[Any], data: st.DataObject) -> None:
    syntax = SYNTAXES[family]
    text = "Let me look." + syntax.render(calls)
    events, result = _parse(syntax, [text])
    got = [(c.name, c.arguments_dict()) for c in result.message.tool_calls or ()]
    assert got == [(n, a) for n, a in calls] and not result.warnings, text
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=8)))
    chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    assert _parse(syntax, chunks) == (events, result)


@pytest.mark.parametrize("family", SYNTAXES)
def test_every_cut_of_a_call_is_never_runnable(family: str) -> None:
    syntax = SYNTAXES[family]
    text = syntax.render([("get_weather", {"city": "Paris", "days": 3})])
    whole = _parse(syntax, [text])[1].message.tool_calls
    assert whole and whole[0].arguments_dict() == {"city": "Paris", "days": 3}
    for n in range(len(text)):
        _, cut = _parse(syntax, [text[:n]], "length")
        # Cut before the call's end tag: never a call a client may run.
        closes = syntax.call_close or syntax.block_close
        if closes not in text[:n]:
            assert not cut.message.tool_calls, text[:n]
        # Streamed one character at a time: the same turn.
        assert _parse(syntax, list(text[:n]), "length") == _parse(syntax, [text[:n]], "length")


def test_a_glm_key_split_inside_its_closing_tag_streams_as_whole() -> None:
    # GLM-4.5+'s parser used to read "city</arg" (a chunk ending inside "</arg_key>") as a
    # malformed key: streamed output broke calls that parse whole.
    text = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>"
    for glm in (GLM46_XML, GLM47_XML):
        whole = _parse(glm, [text])
        for k in range(1, len(text)):
            assert _parse(glm, [text[:k], text[k:]]) == whole
        _, cut = _parse(glm, [text[: text.index("</arg_key>") + 4]], "length")
        assert cut.warnings == ["tool call 0 was cut off; it is incomplete and not runnable"]


@pytest.mark.parametrize("family", SYNTAXES)
def test_the_grammar_starts_at_the_block_and_keeps_its_controls(family: str) -> None:
    syntax = SYNTAXES[family]
    grammar = call_grammar(syntax, TOOLS)
    assert grammar.lazy and [t.value for t in grammar.triggers] == [syntax.block_open]
    assert grammar.preserved == syntax.controls
    required = call_grammar(syntax, TOOLS, required=True, single=True)
    assert not required.lazy and required.preserved == syntax.controls
