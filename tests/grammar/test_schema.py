"""JSON schema → GBNF, judged by llama.cpp's grammar engine: valid instances are accepted
(hypothesis generates them from the schema), invalid ones refused, and what cannot be
enforced is an error under ``strict``."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import GrammarOracle

from chatfmt.grammar import SchemaError, json_grammar
from profiles import examples

ADDRESS = {
    "type": "object",
    "properties": {
        "street": {"type": "string", "minLength": 1, "maxLength": 12},
        "zip": {"type": "string", "format": "date"},
    },
    "required": ["street"],
    "additionalProperties": False,
}
SCHEMAS: dict[str, dict[str, Any]] = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 10},
            "age": {"type": "integer", "minimum": 0},
            "height": {"type": "number"},
            "tags": {"type": "array", "items": {"enum": ["a", "b", "ü"]}, "maxItems": 3},
            "address": ADDRESS,
            "nickname": {"type": ["string", "null"], "maxLength": 6},
            "active": {"type": "boolean"},
        },
        "required": ["name", "age", "active"],
        "additionalProperties": False,
    },
    "defs": {
        "$defs": {
            "Item": {
                "type": "object",
                "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 50}},
                "required": ["id"],
                "additionalProperties": False,
            }
        },
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {"$ref": "#/$defs/Item"},
                "minItems": 1,
                "maxItems": 4,
            },
            "kind": {"const": "order"},
            "note": {
                "anyOf": [
                    {"type": "string", "maxLength": 8},
                    {"type": "integer", "minimum": 0, "maximum": 9},
                ]
            },
        },
        "required": ["items", "kind"],
        "additionalProperties": False,
    },
    "tuple": {
        "type": "array",
        "prefixItems": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "boolean"}],
        "items": False,
    },
    "free-values": {
        "type": "object",
        "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 99},
        "maxProperties": 3,
    },
}


def instances(schema: Any, defs: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid for ``schema`` (the keywords of SCHEMAS), members in declared order."""
    if "$ref" in schema:
        return st.deferred(lambda: instances(defs[schema["$ref"].rsplit("/", 1)[-1]], defs))
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([instances(s, defs) for s in schema["anyOf"]])
    kind = schema["type"]
    if isinstance(kind, list):
        return st.one_of([instances({**schema, "type": k}, defs) for k in kind])
    if kind == "string":
        if schema.get("format") == "date":
            return st.dates().map(lambda d: d.isoformat())
        low, high = schema.get("minLength", 0), schema.get("maxLength", 20)
        return st.text(min_size=low, max_size=high)
    if kind == "integer":
        return st.integers(schema.get("minimum", -(10**15)), schema.get("maximum", 10**15))
    if kind == "number":
        return st.floats(-1e15, 1e15, allow_nan=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        if "prefixItems" in schema:
            return st.tuples(*(instances(s, defs) for s in schema["prefixItems"])).map(list)
        item = instances(schema["items"], defs)
        return st.lists(
            item, min_size=schema.get("minItems", 0), max_size=schema.get("maxItems", 4)
        )
    if "properties" not in schema:
        values = instances(schema["additionalProperties"], defs)
        return st.dictionaries(st.text(max_size=5), values, max_size=schema.get("maxProperties", 3))
    required = set(schema.get("required", ()))
    members = {
        k: instances(v, defs) if k in required else st.one_of(st.just(_ABSENT), instances(v, defs))
        for k, v in schema["properties"].items()
    }
    order = list(schema["properties"])  # fixed_dictionaries does not keep it
    return st.fixed_dictionaries(members).map(
        lambda d: {k: d[k] for k in order if d[k] is not _ABSENT}
    )


_ABSENT = object()


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(max_examples=examples(0.2), suppress_health_check=list(HealthCheck))
@given(data=st.data(), indent=st.sampled_from([None, 2]))
def test_valid_instances_are_accepted(
    judge: GrammarOracle, name: str, data: st.DataObject, indent: int | None
) -> None:
    schema = SCHEMAS[name]
    grammar = json_grammar(schema)
    value = data.draw(instances(schema, schema.get("$defs", {})))
    jsonschema.validate(value, schema)
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    assert judge.accepts(grammar.gbnf, text), text


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("person", '{"name": "Al", "age": 3}'),  # "active" is required
        ("person", '{"name": "Al", "age": -3, "active": true}'),  # minimum 0
        ("person", '{"name": "Al", "age": 3.5, "active": true}'),  # integer
        ("person", '{"name": "Al", "age": 3, "active": true, "x": 1}'),  # no extras
        ("person", '{"name": "Al", "age": 3, "active": "yes"}'),
        ("person", '{"name": "Alexander The Great", "age": 3, "active": true}'),  # maxLength
        ("person", '{"name": "Al", "age": 3, "active": true, "tags": ["c"]}'),  # enum
        ("defs", '{"items": [], "kind": "order"}'),  # minItems
        ("defs", '{"items": [{"id": 51}], "kind": "order"}'),  # maximum
        ("defs", '{"items": [{"id": 5}], "kind": "other"}'),  # const
        ("tuple", "[1, true, 3]"),  # no more items
        ("free-values", '{"a": "x"}'),
    ],
)
def test_invalid_instances_are_refused(judge: GrammarOracle, name: str, text: str) -> None:
    schema = SCHEMAS[name]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(json.loads(text), schema)
    assert not judge.accepts(json_grammar(schema).gbnf, text)


def test_recursive_schemas(judge: GrammarOracle) -> None:
    tree = {
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer"},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                },
                "required": ["v", "kids"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/Node",
    }
    g = json_grammar(tree).gbnf
    assert judge.accepts(g, '{"v": 1, "kids": [{"v": 2, "kids": []}, {"v": 3, "kids": []}]}')
    assert not judge.accepts(g, '{"v": 1, "kids": [{"v": 2}]}')


def test_json_object_and_python_literals(judge: GrammarOracle) -> None:
    from chatfmt.grammar import ANY_OBJECT

    g = json_grammar(ANY_OBJECT).gbnf
    assert judge.accepts(g, '{"a": [1, {"b": null}], "c": "\\u00e9"}')
    assert not judge.accepts(g, "[1]") and not judge.accepts(g, "{'a': 1}")


@pytest.mark.parametrize(
    ("schema", "keyword", "where"),
    [
        ({"type": "string", "pattern": "^a"}, "pattern", "At the root"),
        (
            {"type": "object", "properties": {"n": {"type": "number", "minimum": 1}}},
            "minimum",
            "In context=(.properties.n)",
        ),
        (
            {"type": "object", "properties": {"s": {"type": "string", "format": "email"}}},
            "format",
            "In context=(.properties.s)",
        ),
        ({"not": {"type": "string"}}, "not", "At the root"),
    ],
)
def test_strict_refuses_what_a_grammar_cannot_enforce(
    schema: dict[str, Any], keyword: str, where: str
) -> None:
    with pytest.raises(SchemaError) as info:
        json_grammar(schema, strict=True, name="x")
    message = str(info.value)
    assert message.startswith(f"Invalid schema for response_format 'x': {where}, ")
    assert f"{keyword!r} is not supported" in message
    json_grammar(schema)  # not strict: ignored, the rest still constrained


def test_malformed_schemas_are_errors() -> None:
    for bad, what in [
        ({"$ref": "https://example.com/s.json"}, "only references inside the schema"),
        ({"$ref": "#/$defs/Missing"}, "points at nothing"),
        (
            {"type": "object", "properties": {}, "required": ["a"], "additionalProperties": False},
            "not in 'properties'",
        ),
        (False, "allows no value"),
    ]:
        with pytest.raises(SchemaError, match=what):
            json_grammar(bad)


def test_definitions_cannot_take_over_shared_rules(judge: GrammarOracle) -> None:
    schema = {
        "$defs": {"Integer": {"type": "string"}, "Root": {"type": "boolean"}},
        "type": "object",
        "properties": {
            "a": {"$ref": "#/$defs/Integer"},
            "b": {"type": "integer"},
            "c": {"$ref": "#/$defs/Root"},
        },
        "required": ["a", "b", "c"],
        "additionalProperties": False,
    }
    g = json_grammar(schema).gbnf
    assert judge.accepts(g, '{"a": "x", "b": 1, "c": true}')
    assert not judge.accepts(g, '{"a": "x", "b": "1", "c": true}')


def test_siblings_merge_and_stay_where_they_are(judge: GrammarOracle) -> None:
    any_of = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "required": ["a"],
        "anyOf": [{"required": ["b"]}],
        "additionalProperties": False,
    }
    g = json_grammar(any_of).gbnf
    assert judge.accepts(g, '{"a": "x", "b": "y"}')
    assert not judge.accepts(g, '{"b": "y"}')
    refs = {
        "$defs": {"S": {"type": "string"}},
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/S", "maxLength": 3}, "b": {"$ref": "#/$defs/S"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    }
    assert judge.accepts(json_grammar(refs).gbnf, '{"a": "abc", "b": "longer than three"}')


def test_bounds_large_or_impossible(judge: GrammarOracle) -> None:
    big = {"type": "string", "maxLength": 5000}
    assert judge.compiles(json_grammar(big).gbnf)  # not spelled out: llama.cpp would refuse
    with pytest.raises(SchemaError, match="maxLength"):
        json_grammar(big, strict=True)
    with pytest.raises(SchemaError, match="no value is valid"):
        json_grammar({"type": "array", "minItems": 3, "maxItems": 1})
    with pytest.raises(SchemaError, match="refers to itself"):
        json_grammar({"$defs": {"A": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"})


def test_lenient_schemas_still_constrain(judge: GrammarOracle) -> None:
    """Not strict: a required name without a schema takes any value, an unknown type any
    value, draft-4 tuple ``items`` is a tuple."""
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string"}, "t": {"type": "any"}},
        "required": ["q", "limit"],
    }
    g = json_grammar(schema).gbnf
    assert judge.accepts(g, '{"q": "x", "t": [1], "limit": {"n": 1}}')
    assert not judge.accepts(g, '{"q": "x"}')
    assert judge.accepts(
        json_grammar({"items": [{"type": "integer"}], "additionalItems": False}).gbnf, "[1]"
    )
