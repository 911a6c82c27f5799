"""Tool, @tool schema extraction and argument validation."""

from __future__ import annotations

import asyncio
import contextvars
import enum
import json
import threading
from typing import Literal

import pytest

from tinyagent import ReAct, Tool, tool
from tinyagent.tools import ToolArgumentError, ToolError, ToolTimeout, invoke

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False, search="tool")


@tool
def book_flight(
    origin: str, destination: str, passengers: int = 1, flexible: bool | None = None, budget: float = 0.0
) -> str:
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
        {
            "name": "destination",
            "description": "the arrival city, written in English",
            "required": True,
            "schema": {"type": "string"},
        },
        {
            "name": "passengers",
            "description": "how many people travel",
            "required": False,
            "schema": {"type": "integer"},
        },
        {
            "name": "flexible",
            "description": "whether dates may move",
            "required": False,
            "schema": {"type": ["boolean", "null"]},
        },
        {
            "name": "budget",
            "description": "the most to spend, in euros",
            "required": False,
            "schema": {"type": "number"},
        },
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


@pytest.mark.parametrize(
    "args,message",
    [
        ({"origin": "Paris"}, "missing required parameter"),
        ({"origin": "Paris", "destination": "Rome", "seats": 2}, "unknown parameter"),
        ({"origin": 3, "destination": "Rome"}, "must be of type string"),
        ({"origin": "a", "destination": "b", "passengers": "two"}, "must be of type integer"),
        ({"origin": "a", "destination": "b", "passengers": 1.5}, "must be of type integer"),
        ({"origin": "a", "destination": "b", "flexible": "yes"}, "must be of type boolean"),
        ({"origin": "a", "destination": "b", "budget": True}, "must be of type number"),
    ],
)
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
        parameters = [{"name": "text", "description": "what to repeat", "required": True, "schema": {"type": "string"}}]

        def call(self, text: str) -> str:
            return text * 2

    assert Echo()(text="ab") == "abab"
    with pytest.raises(ToolArgumentError):
        Echo()()


# --- types beyond the plain ones: Optional, Literal, Enum, number unions, lists ------------------


class Unit(enum.Enum):
    CELSIUS = "c"
    FAHRENHEIT = "f"


@tool
def forecast(
    city: str,
    unit: Unit = Unit.CELSIUS,
    days: Literal[1, 3, 7] = 1,
    scale: int | float = 1,
    hours: list[int] | None = None,
    note: str | None = None,
    mode: Literal["fast", "exact"] = "fast",
    tags: list[str] = (),
) -> str:
    """Weather forecast."""
    return json.dumps([city, unit.name, days, scale, hours, note, mode, list(tags)])


def test_schema_of_richer_types():
    props = forecast.json_schema()["properties"]
    assert props["unit"] == {"type": "string", "enum": ["c", "f"]}
    assert props["days"] == {"type": "integer", "enum": [1, 3, 7]}
    assert props["mode"] == {"type": "string", "enum": ["fast", "exact"]}
    assert props["scale"] == {"type": "number"}
    assert props["hours"] == {"type": ["array", "null"], "items": {"type": "integer"}}
    assert props["note"] == {"type": ["string", "null"]}
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}


def test_richer_types_are_validated_and_converted():
    args = forecast.validate(
        {
            "city": "Oslo",
            "unit": "f",
            "days": 3.0,
            "scale": 2.5,
            "hours": [6, 12.0],
            "note": None,
            "mode": "exact",
            "tags": ["a"],
        }
    )
    assert args == {
        "city": "Oslo",
        "unit": "f",
        "days": 3,
        "scale": 2.5,
        "hours": [6, 12],
        "note": None,
        "mode": "exact",
        "tags": ["a"],
    }  # JSON values: traces and repeated-call checks stay plain
    assert json.loads(forecast(**args)) == ["Oslo", "FAHRENHEIT", 3, 2.5, [6, 12], None, "exact", ["a"]]
    assert json.loads(forecast(city="Oslo", unit=Unit.FAHRENHEIT))[1] == "FAHRENHEIT"  # a member is fine too
    assert forecast.validate({"city": "Oslo", "hours": None}) == {"city": "Oslo", "hours": None}


@pytest.mark.parametrize(
    "args,message",
    [
        ({"unit": "kelvin"}, "parameter 'unit' must be one of \"c\", \"f\", got str 'kelvin'"),
        ({"days": 2}, "parameter 'days' must be one of 1, 3, 7, got int 2"),
        ({"days": True}, "must be one of 1, 3, 7"),
        ({"mode": "Fast"}, "must be one of \"fast\", \"exact\""),
        ({"scale": "2"}, "parameter 'scale' must be of type number, got str"),
        ({"hours": [6, "noon"]}, "parameter 'hours\\[1\\]' must be of type integer, got str 'noon'"),
        ({"hours": "6"}, "parameter 'hours' must be of type array or null"),
        ({"tags": None}, "parameter 'tags' must be of type array, got NoneType"),
        ({"city": None}, "parameter 'city' must be of type string, got NoneType"),
    ],
)
def test_richer_types_reject_with_clear_messages(args, message):
    with pytest.raises(ToolArgumentError, match=message):
        forecast.validate({"city": "Oslo", **args})


def test_dict_and_list_results_are_json_text():
    @tool
    def lookup(city: str) -> dict:
        """Facts about a city."""
        return {"city": city, "名字": "上海", "districts": [1, 2]}

    @tool
    def names() -> list:
        """Some names."""
        return ["周杰伦", "Jay"]

    assert lookup(city="Shanghai") == '{"city": "Shanghai", "名字": "上海", "districts": [1, 2]}'
    assert names() == '["周杰伦", "Jay"]'


async def _async_add(a: int, b: int) -> int:
    """Add two numbers, asynchronously.

    Args:
        a: the first
        b: the second
    """
    await asyncio.sleep(0)
    return a + b


def test_async_tools_are_awaited():
    add = tool(_async_add)
    assert add.parameters[0]["schema"] == {"type": "integer"}
    assert add(a=2, b=3) == "5"


def test_async_tools_are_awaited_when_called_from_a_running_event_loop():
    add = tool(_async_add)

    async def inside_a_loop():
        return add(a=20, b=22)  # a synchronous agent run inside async code (a web handler, a notebook)

    assert asyncio.run(inside_a_loop()) == "42"


# --- invoke: the agent's call, with a timeout ---------------------------------------------------


def test_invoke_runs_the_validated_call_and_serialises_the_result():
    @tool
    def where(unit: Unit) -> dict:
        """Which thread runs the tool, and the unit it got."""
        return {"unit": unit.name, "main": threading.current_thread() is threading.main_thread()}

    args = where.validate({"unit": "f"})
    assert invoke(where, args, timeout=30) == '{"unit": "FAHRENHEIT", "main": false}'  # in a worker thread
    assert invoke(where, args, timeout=None) == '{"unit": "FAHRENHEIT", "main": true}'  # no timeout: inline


def test_invoke_gives_up_on_a_hung_tool():
    started, release = threading.Event(), threading.Event()

    @tool
    def hang() -> str:
        """Never answers until released."""
        started.set()
        release.wait(60)  # bounded, so a broken timeout fails the test instead of hanging it
        return "late"

    try:
        with pytest.raises(ToolTimeout, match=r"^the tool hang did not answer within 0\.2 s$"):
            invoke(hang, {}, timeout=0.2)
        assert started.is_set()
        assert issubclass(ToolTimeout, ToolError)  # the agent turns it into an observation like other tool errors
    finally:
        release.set()


def test_invoke_passes_on_the_tools_own_errors_and_context():
    request_id = contextvars.ContextVar("request_id", default="none")

    @tool
    def fail(kind: str) -> str:
        """Fails on demand."""
        if kind == "tool":
            raise ToolError(f"service down ({request_id.get()})")
        raise KeyError(kind)

    request_id.set("r-17")
    with pytest.raises(ToolError, match=r"service down \(r-17\)"):
        invoke(fail, {"kind": "tool"}, timeout=30)
    with pytest.raises(KeyError):
        invoke(fail, {"kind": "bug"}, timeout=30)
    with pytest.raises(ValueError, match="positive number of seconds"):
        invoke(fail, {"kind": "tool"}, timeout=0)


def test_optional_and_enum_parameters_through_the_agent(scripted):
    """The agent's argument reading and its error hint handle the richer schemas (type lists, enums)."""
    from tinyagent import Agent

    @tool
    def count(times: int | None = None) -> str:
        """Count."""
        return repr(times)

    @tool
    def repeat(times: int | None = None, unit: Unit | None = None) -> str:
        """Repeat."""
        return f"{times} {unit and unit.name}"

    model = scripted(
        [
            "Action: count\nAction Input: 5",
            'Action: repeat\nAction Input: {"unit": "k"}',
            'Action: repeat\nAction Input: {"times": null, "unit": "c"}',
            "Final Answer: done",
        ]
    )
    steps = Agent(model, tools=[count, repeat], protocol=CLASSIC).run("go").steps
    assert steps[0].observation == "5"  # a bare value for the only parameter, read as a number
    assert steps[1].kind == "bad_input" and 'must be one of "c", "f", null' in steps[1].observation
    assert 'Action Input: {"times": 1, "unit": "c"}' in steps[1].observation  # the form to copy
    assert steps[2].observation == "None CELSIUS"
