"""vLLM's own grammar compilers judge chatfmt's grammars: every dialect's call grammars (lazy,
required, one call) and the JSON grammars of ``response_format`` compile in xgrammar (vLLM's
default backend) and llguidance (its fallback), and xgrammar accepts what each dialect writes
for a call. On the default model's vocabulary, a forced call is accepted token by token, as
vLLM samples it. llama.cpp's grammar engine judges the same grammars in ``test_calls.py``.

Found by running chatfmt in front of a real vLLM: the whitespace rule was written with an empty
alternative (``ws ::= | " " | ...``), which llama.cpp reads and xgrammar refuses, so every
forced call failed on vLLM's default backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backends import judge
from test_calls import ARGS, CALLING, TOOLS, from_trigger, output_of

from chatfmt.decoding import split_controls
from chatfmt.dialects import get_dialect, list_dialects
from chatfmt.grammar import json_grammar
from chatfmt.tokenizers import load_tokenizer

#: Qwen2.5's <|im_end|>: the default model's end of turn.
IM_END = 151645

SCHEMAS: dict[str, Any] = {
    "object": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 20},
            "age": {"type": "integer", "minimum": 0},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "kind": {"enum": ["a", "b", None]},
            "when": {"type": "string", "format": "date"},
            "score": {"anyOf": [{"type": "number"}, {"type": "null"}]},
        },
        "required": ["name", "age"],
    },
    "recursive": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"v": {"type": "integer"}, "kids": {"$ref": "#/$defs/node"}},
            }
        },
        "$ref": "#/$defs/node",
    },
    "any": True,
}
REPLIES = {
    "object": '{"name": "Ada", "age": 36, "tags": ["x"], "kind": null, "when": "2024-02-29"}',
    "recursive": '{"v": 1, "kids": {"v": 2}}',
    "any": '[1, "two", {"three": 3.0}]',
}


def call_cases() -> list[dict[str, Any]]:
    cases = []
    for name in list_dialects():
        dialect = get_dialect(name)
        out = output_of(dialect, [("get_weather", ARGS)]) if name in CALLING else None
        for mode, kw in (("lazy", {}), ("required", {"required": True}), ("one", {"single": True})):
            g = dialect.call_grammar(TOOLS, **kw)
            if g is None:
                continue
            texts = []
            if out is not None and name != "harmony":  # harmony's forced call opens in its prefix
                started = from_trigger(g, out) if g.lazy else out
                assert started is not None, (name, mode, out)
                texts.append(started)
            cases.append({"name": f"{name} {mode}", "gbnf": g.gbnf, "texts": texts, "ids": []})
    return cases


def test_every_grammar_compiles_and_takes_the_dialects_own_calls(
    grammar_backends: Path, qwen_tokenizer_json: Path
) -> None:
    cases = call_cases()
    cases += [
        {"name": f"json {k}", "gbnf": json_grammar(s).gbnf, "texts": [REPLIES[k]], "ids": []}
        for k, s in SCHEMAS.items()
    ]
    assert len(cases) > 80
    verdicts = judge(grammar_backends, qwen_tokenizer_json, IM_END, cases)
    for case in verdicts["cases"]:
        for backend in ("xgrammar", "llguidance"):
            assert case[backend]["error"] is None, (case["name"], backend, case[backend])
        assert all(case["xgrammar"]["texts"]), case


def test_forced_calls_and_replies_token_by_token_on_the_default_vocabulary(
    grammar_backends: Path, qwen_tokenizer_json: Path
) -> None:
    """What vLLM does with the default model: the prompt's reply sampled under the grammar,
    token by token. ``<tool_call>`` is one token of this vocabulary (an added token that is
    not special): xgrammar matches it by its text; llguidance treats every added token as
    special and never lets text match one, so a call grammar spelled in text fails there
    (vLLM falls back to llguidance only for a grammar xgrammar refuses)."""
    tok = load_tokenizer(str(qwen_tokenizer_json))
    qwen = get_dialect("qwen2.5")
    call = output_of(qwen, [("get_weather", ARGS)])
    forced = qwen.call_grammar(TOOLS, required=True)
    one = qwen.call_grammar(TOOLS, required=True, single=True)
    assert forced is not None and one is not None
    # As the model writes it: <tool_call> and </tool_call> as their tokens, the rest as text.
    ids = tok.encode_pieces(split_controls(call, ("<tool_call>", "</tool_call>")))
    assert ids[0] == tok.control_id("<tool_call>")
    cases = [
        {"name": "forced", "gbnf": forced.gbnf, "texts": [], "ids": [ids]},
        {"name": "one", "gbnf": one.gbnf, "texts": [], "ids": [ids, ids + ids[:1]]},
        {
            "name": "json",
            "gbnf": json_grammar(SCHEMAS["object"]).gbnf,
            "texts": [],
            "ids": [tok.encode_text(REPLIES["object"]), tok.encode_text('{"name": "Ada"}')],
        },
    ]
    judged = judge(grammar_backends, qwen_tokenizer_json, IM_END, cases)["cases"]
    verdicts = {c["name"]: c for c in judged}
    assert verdicts["forced"]["xgrammar"]["ids"] == [True]
    # One call only: a second <tool_call> after the first is refused.
    assert verdicts["one"]["xgrammar"]["ids"] == [True, False]
    # A reply that leaves out a required member is refused; a whole one is taken.
    assert verdicts["json"]["xgrammar"]["ids"] == [True, False]
    assert verdicts["json"]["llguidance"]["ids"] == [True, False]
    # The limit said above, pinned so that a fix in llguidance or in chatfmt is noticed.
    assert verdicts["forced"]["llguidance"]["ids"] == [False]


def test_the_empty_alternative_is_what_xgrammar_refuses(
    grammar_backends: Path, qwen_tokenizer_json: Path
) -> None:
    """The judge can fail: the rule chatfmt used to write is refused by xgrammar."""
    old = {"name": "old", "gbnf": 'root ::= "a" ws\nws ::= | " "\n', "texts": [], "ids": []}
    verdict = judge(grammar_backends, qwen_tokenizer_json, IM_END, [old])["cases"][0]
    assert "Expect element" in verdict["xgrammar"]["error"]
