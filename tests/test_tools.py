"""Tool, @tool schema extraction and argument validation."""
from __future__ import annotations

import pytest

from tinyagent import Tool, tool
from tinyagent.tools import ToolArgumentError


@tool
def book_flight(origin: str, destination: str, passengers: int = 1, flexible: bool | None = None,
                budget: float = 0.0) -> str:
    """Book a flight between two cities.

    Checks availability first.

    Args:
        origin: the departure city
        destination (str): the arrival city,
            written in English
        passengers: how many people travel
        flexible: whether dates may move
        budget: the most to spend, in euros

    Returns:
        a booking reference
    """
    return f"{origin}->{destination} x{passengers}"


def test_tool_from_function():
    assert isinstance(book_flight, Tool)
    assert book_flight.name_for_model == "book_flight"
    assert book_flight.name_for_human == "Book Flight"
    assert book_flight.description_for_model == "Book a flight between two cities. Checks availability first."
    assert book_flight.parameters == [
        {"name": "origin", "description": "the departure city", "required": True, "schema": {"type": "string"}},
        {"name": "destination", "description": "the arrival city, written in English", "required": True,
         "schema": {"type": "string"}},
        {"name": "passengers", "description": "how many people travel", "required": False,
         "schema": {"type": "integer"}},
        {"name": "flexible", "description": "whether dates may move", "required": False,
         "schema": {"type": "boolean"}},
        {"name": "budget", "description": "the most to spend, in euros", "required": False,
         "schema": {"type": "number"}},
    ]
    assert book_flight(origin="Paris", destination="Rome", passengers=2) == "Paris->Rome x2"


def test_tool_with_overrides_and_bilingual_names():
    @tool(name="wx", name_for_human={"en": "Weather", "zh": "天气"}, description={"en": "Weather.", "zh": "天气。"})
    def weather(city: str) -> str:
        return city

    assert weather.name_for_model == "wx"
    assert weather.human_name("zh") == "天气" and weather.human_name("en") == "Weather"
    assert weather.description("zh") == "天气。"
    assert weather.parameters[0]["description"] == ""


def test_json_schema():
    schema = book_flight.json_schema()
    assert schema["required"] == ["origin", "destination"]
    assert schema["properties"]["passengers"] == {"type": "integer"}
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize("args,message", [
    ({"origin": "Paris"}, "missing required parameter"),
    ({"origin": "Paris", "destination": "Rome", "seats": 2}, "unknown parameter"),
    ({"origin": 3, "destination": "Rome"}, "must be of type string"),
    ({"origin": "a", "destination": "b", "passengers": "two"}, "must be of type integer"),
    ({"origin": "a", "destination": "b", "passengers": 1.5}, "must be of type integer"),
    ({"origin": "a", "destination": "b", "flexible": "yes"}, "must be of type boolean"),
    ({"origin": "a", "destination": "b", "budget": True}, "must be of type number"),
])
def test_validation_errors(args, message):
    with pytest.raises(ToolArgumentError, match=message):
        book_flight.validate(args)


def test_validation_accepts_close_types():
    assert book_flight.validate({"origin": "a", "destination": "b", "passengers": 2.0})["passengers"] == 2
    assert book_flight.validate({"origin": "a", "destination": "b", "budget": 3})["budget"] == 3


def test_subclass_tool():
    class Echo(Tool):
        name_for_model = "echo"
        name_for_human = "Echo"
        description_for_model = "Repeats the text."
        parameters = [{"name": "text", "description": "what to repeat", "required": True,
                       "schema": {"type": "string"}}]

        def call(self, text: str) -> str:
            return text * 2

    assert Echo()(text="ab") == "abab"
    with pytest.raises(ToolArgumentError):
        Echo()()
