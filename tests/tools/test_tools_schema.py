"""Schema generation from signatures, Annotated, docstrings; registry descriptions."""

import enum
from typing import Annotated, Any, Literal, Optional

import pytest
from pydantic import BaseModel, Field

from chatfmt.errors import ToolError
from chatfmt.tools import ToolRegistry, parse_docstring, spec_from_function, tool


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class Point(BaseModel):
    x: int
    y: int = 0


def get_current_weather(
    location: Annotated[str, "The city and state, e.g. San Francisco, CA"],
    unit: Unit = Unit.CELSIUS,
) -> dict[str, Any]:
    """Get the current weather in a given location."""
    return {"location": location, "unit": unit.value}


def test_chatglm3_style_function_matches_prompt_md() -> None:
    spec = spec_from_function(get_current_weather)
    assert spec.function() == {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {
                    "type": "string",
                    "description": "The city and state, e.g. San Francisco, CA",
                },
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
            },
            "required": ["location"],
        },
    }


def test_many_kinds_of_parameters() -> None:
    def search(
        query: str,
        limit: Annotated[int, Field(ge=1, le=50, description="How many results")] = 10,
        mode: Literal["fast", "exact"] = "fast",
        tags: Optional[list[str]] = None,  # noqa: UP045 - the old spelling must work too
        filters: dict[str, float] | None = None,
        at: Point | None = None,
        strict: bool = False,
    ) -> list[str]:
        """Search the index.

        Longer explanation that is not part of the description.

        Args:
            query: The text to look for,
                possibly several words.
            tags (list[str]): Only documents with all these tags.
            filters: Numeric field bounds.
        Returns:
            Matching ids.
        """
        return []

    params = spec_from_function(search).parameters
    assert params == {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "The text to look for, possibly several words.",
            },
            "limit": {
                "type": "integer",
                "description": "How many results",
                "default": 10,
                "maximum": 50,
                "minimum": 1,
            },
            "mode": {"type": "string", "enum": ["fast", "exact"], "default": "fast"},
            "tags": {
                "type": "array",
                "description": "Only documents with all these tags.",
                "items": {"type": "string"},
            },
            "filters": {
                "type": "object",
                "description": "Numeric field bounds.",
                "additionalProperties": {"type": "number"},
            },
            "at": {
                "type": "object",
                "properties": {"x": {"type": "integer"}, "y": {"type": "integer", "default": 0}},
                "required": ["x"],
            },
            "strict": {"type": "boolean", "default": False},
        },
        "required": ["query"],
    }
    assert spec_from_function(search).description == "Search the index."


def test_no_parameters_and_no_docstring() -> None:
    def ping() -> str:
        return "pong"

    spec = spec_from_function(ping)
    assert spec.function() == {
        "name": "ping",
        "description": "",
        "parameters": {"type": "object", "properties": {}},
    }


def test_required_optional_keeps_null() -> None:
    def f(x: int | None) -> None: ...

    assert spec_from_function(f).parameters == {
        "type": "object",
        "properties": {"x": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
        "required": ["x"],
    }


def test_annotated_string_wins_over_field_and_docstring() -> None:
    def f(a: Annotated[str, "from annotated", Field(description="from field")]) -> None:
        """Doc.

        Args:
            a: from docstring
        """

    def g(a: Annotated[str, Field(description="from field")]) -> None:
        """Doc.

        Args:
            a: from docstring
        """

    def h(a: str = Field("x", description="field as default")) -> None: ...

    assert spec_from_function(f).parameters["properties"]["a"]["description"] == "from annotated"
    assert spec_from_function(g).parameters["properties"]["a"]["description"] == "from field"
    assert spec_from_function(h).parameters["properties"]["a"] == {
        "type": "string",
        "description": "field as default",
        "default": "x",
    }


def test_chatglm3_register_tool_required_flag_is_accepted() -> None:
    def f(city: Annotated[str, "City name", True]) -> None: ...

    props = spec_from_function(f).parameters
    assert props["properties"]["city"] == {"type": "string", "description": "City name"}
    assert props["required"] == ["city"]


def test_parameter_names_that_clash_with_basemodel_and_property_named_title() -> None:
    def f(json: str, copy: int = 1, title: str = "t", schema: bool = False) -> None: ...

    params = spec_from_function(f).parameters
    assert list(params["properties"]) == ["json", "copy", "title", "schema"]
    assert params["properties"]["title"] == {"type": "string", "default": "t"}


def test_sphinx_docstring() -> None:
    doc = parse_docstring(
        """Add two numbers.
        Still the first paragraph.

        :param a: the first
        :param int b: the second
        :returns: the sum
        """
    )
    assert doc.description == "Add two numbers. Still the first paragraph."
    assert doc.params == {"a": "the first", "b": "the second"}


def test_decorator_forms_keep_function_callable() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    @tool(name="mul", description="Multiply two integers.")
    async def multiply(a: int, b: int) -> int:
        return a * b

    assert add(2, 3) == 5
    reg = ToolRegistry([add, multiply])
    assert reg.names() == ["add", "mul"]
    assert reg.functions()[1]["description"] == "Multiply two integers."
    assert reg.openai_tools()[0] == {"type": "function", "function": reg.functions()[0]}


def test_registry_register_forms_and_tool_dicts() -> None:
    reg = ToolRegistry()

    @reg.register
    def a() -> None:
        """A."""

    @reg.register(name="bee")
    def b() -> None: ...

    openai_dict = {
        "type": "function",
        "function": {
            "name": "remote_search",
            "description": "Search elsewhere.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
    reg.register(openai_dict)
    reg.register({"name": "bare", "parameters": {"type": "object", "properties": {}}})
    assert reg.names() == ["a", "bee", "remote_search", "bare"]
    assert reg.openai_tools()[2] == openai_dict
    assert reg.functions()[3] == {
        "name": "bare",
        "description": "",
        "parameters": {"type": "object", "properties": {}},
    }
    assert "a" in reg and len(reg) == 4
    with pytest.raises(ToolError, match="already registered"):
        reg.register(a)
    reg.register(a, replace=True)
    reg.unregister("bee")
    assert "bee" not in reg


@pytest.mark.parametrize("bad", ["has space", "", "x" * 65, "new\nline"])
def test_invalid_names_are_refused(bad: str) -> None:
    def f() -> None: ...

    with pytest.raises(ToolError, match="invalid tool name"):
        spec_from_function(f, name=bad)
