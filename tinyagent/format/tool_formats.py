"""The model's own tool-call formats, beside ReAct text: how each family writes a call, how its tools and
tool results are shown to it when its chat template does not do that, and which family a template is.

Four families (their instruct models' documented formats):
- hermes: Qwen2.5 / Qwen3, Hermes, and most templates that take `tools=`:
  `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, results in `<tool_response>`.
- llama3: Llama 3.1 / 3.2 / 3.3 custom tools: a bare `{"name": ..., "parameters": {...}}` (or after
  `<|python_tag|>`), several joined by `;`; results in the `ipython` role.
- mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` (v11 writes `[TOOL_CALLS]name[ARGS]{...}`).
- internlm2: `<|action_start|><|plugin|>\\n{"name": ..., "parameters": {...}}<|action_end|>`, tools in a
  `system name=<|plugin|>` message, results in an `environment name=<|plugin|>` turn (what lagent sends).
Pure text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .step_format import StepFormat, escape_pattern

#: Free text of a constrained tools reply: it cannot hold `<`, `[` or `{`, which start a call.
CALL_FREE_TEXT = r"[^<\[{\s][^<\[{]*"


@dataclass(frozen=True)
class ToolFormat:
    """One family's tool-call text. `markers` are the tokens a reply in this format holds, kept when a
    reply is decoded (some are special tokens); `calls_in_thinking`: the family may write its call inside
    a `<think>` block, and such a call is taken when none follows the block."""

    name: str
    open: str  # what starts a call
    close: str  # what ends one ("" when the call runs to the end of the reply)
    arguments_key: str  # "arguments" or "parameters"
    separator: str  # between two calls of one turn
    markers: tuple[str, ...]
    calls_in_thinking: bool = False

    def write_call(self, name: str, arguments: dict) -> str:
        """One call as this family writes it."""
        body = json.dumps({"name": name, self.arguments_key: arguments}, ensure_ascii=False)
        if self.name == "mistral":
            return f"[TOOL_CALLS][{body}]"
        if self.name == "hermes":
            return f"<tool_call>\n{body}\n</tool_call>"
        return f"{self.open}{body}{self.close}"

    def calls_pattern(self, objects: list[str]) -> str:
        """The regex of a turn's calls (one or more), given the regex of each tool's call object."""
        one = "(?:" + "|".join(objects) + ")"
        if self.name == "mistral":
            return rf"\[TOOL_CALLS\]\[{one}(?:, {one})*\]"
        if self.name == "hermes":
            call = rf"<tool_call>\n{one}\n</tool_call>"
            return rf"{call}(?:\n{call})*"
        if self.name == "llama3":
            return rf"{one}(?:; {one})*"
        return escape_pattern(self.open) + one + escape_pattern(self.close)

    def reply_pattern(self, fmt: StepFormat, arguments_pattern) -> str:
        """The regex of a constrained reply: free text, or (optional text, then) calls of `fmt.tools` whose
        arguments match `arguments_pattern(schema_json)`; only text when `fmt.answer_only`."""
        if fmt.answer_only or not fmt.tools:
            return CALL_FREE_TEXT
        objects = [self.call_object_pattern(name, arguments_pattern(schema)) for name, schema in fmt.tools]
        calling = f"(?:{CALL_FREE_TEXT}\n)?{self.calls_pattern(objects)}"
        return f"{calling}|{CALL_FREE_TEXT}" if fmt.final_answer else calling

    def call_object_pattern(self, name: str, arguments_pattern: str) -> str:
        """The regex of one call object of tool `name`, its arguments matching `arguments_pattern`."""
        return rf'\{{"name": "{escape_pattern(name)}", "{self.arguments_key}": {arguments_pattern}\}}'


FORMATS: dict[str, ToolFormat] = {
    f.name: f
    for f in (
        ToolFormat(
            "hermes",
            "<tool_call>",
            "</tool_call>",
            "arguments",
            "\n",
            ("<tool_call>", "</tool_call>"),
            calls_in_thinking=True,
        ),
        ToolFormat("llama3", "", "", "parameters", "; ", ("<|python_tag|>",)),
        ToolFormat("mistral", "[TOOL_CALLS]", "", "arguments", ", ", ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]")),
        ToolFormat(
            "internlm2",
            "<|action_start|><|plugin|>\n",
            "<|action_end|>",
            "parameters",
            "\n",
            ("<|action_start|>", "<|plugin|>", "<|action_end|>"),
        ),
    )
}
#: Every family's markers: tokens a tool-call reply may hold, kept when it is decoded.
MARKERS = tuple(dict.fromkeys(m for f in FORMATS.values() for m in f.markers))
#: The format a model gets when neither its template nor its family says (the most common one).
DEFAULT_FORMAT = "hermes"

_SIGNS = (
    ("internlm2", ("<|plugin|>", "<|action_start|>")),
    ("mistral", ("[TOOL_CALLS]",)),
    ("hermes", ("<tool_call>",)),
    ("llama3", ("<|python_tag|>", "ipython", '"parameters"')),
)


def detect_format(template: str | None) -> str | None:
    """The family a chat template's text writes tool calls in, or None when it shows none."""
    for name, signs in _SIGNS:
        if template and any(s in template for s in signs):
            return name
    return None


def template_takes_tools(template: str | None) -> bool:
    """Whether a chat template renders the `tools` it is given (it names the variable)."""
    return bool(template) and "tools" in template


# --- what the model reads (its system prompt and forced answer: data/prompts/tools.yaml) ---------------


def tools_block(fmt: ToolFormat, schemas: list[dict]) -> str:
    """The tools as the family's documented system text, for a template that does not render `tools=`."""
    lines = "\n".join(json.dumps(s, ensure_ascii=False) for s in schemas)
    if fmt.name == "llama3":
        return (
            "Given the following functions, please respond with a JSON for a function call with its proper "
            'arguments that best answers the given prompt.\n\nRespond in the format {"name": function name, '
            '"parameters": dictionary of argument name and its value}. Do not use variables.\n\n' + lines
        )
    if fmt.name == "mistral":
        return f"[AVAILABLE_TOOLS]{json.dumps(schemas, ensure_ascii=False)}[/AVAILABLE_TOOLS]"
    if fmt.name == "internlm2":
        return json.dumps([s.get("function", s) for s in schemas], ensure_ascii=False)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided "
        f"with function signatures within <tools></tools> XML tags:\n<tools>\n{lines}\n</tools>\n\nFor each "
        "function call, return a json object with function name and arguments within <tool_call></tool_call> "
        'XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def result_text(fmt: ToolFormat, result: str) -> str:
    """A tool result in the family's wrapping, for a template without a tool role."""
    if fmt.name == "hermes":
        return f"<tool_response>\n{result}\n</tool_response>"
    if fmt.name == "mistral":
        return f"[TOOL_RESULTS]{result}[/TOOL_RESULTS]"
    return result


def tool_schema(tool, lang: str = "en") -> dict:
    """A tool as the OpenAI-style function schema chat templates and servers take (`tools=`)."""
    schema = tool.json_schema()
    for p in tool.parameters_for(lang):
        if p.get("description"):
            schema["properties"][p["name"]] = {**schema["properties"][p["name"]], "description": p["description"]}
    return {
        "type": "function",
        "function": {"name": tool.name_for_model, "description": tool.description(lang), "parameters": schema},
    }
