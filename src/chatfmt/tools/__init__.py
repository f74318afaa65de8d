"""Tools: plain Python functions described to the model and called safely.

>>> from typing import Annotated
>>> @tool
... def get_weather(city: Annotated[str, "The city name"], unit: str = "celsius") -> dict:
...     '''Get the current weather in a city.'''
...     return {"city": city, "temperature": 22, "unit": unit}
>>> registry = ToolRegistry([get_weather])
>>> registry.functions()[0]["parameters"]["required"]
['city']
>>> registry.call("get_weather", '{"city": "北京"}').content
'{"city": "北京", "temperature": 22, "unit": "celsius"}'
"""

from .dispatch import ToolResult
from .registry import ToolRegistry, tool
from .schema import FunctionSpec, parse_docstring, spec_from_function
from .truncate import truncate

__all__ = [
    "FunctionSpec",
    "ToolRegistry",
    "ToolResult",
    "parse_docstring",
    "spec_from_function",
    "tool",
    "truncate",
]
