"""Which tool a model meant: a tool name as models write it, resolved against the tools at hand
(exact, any case, the human name in English or Chinese, the name before a note, or the one tool a
line mentions). Pure text."""

from __future__ import annotations

import re


def clean_tool_name(text: str) -> str:
    """A tool name as models write it: `calculator`, "calculator", [calculator], calculator."""
    first = text.strip().split("\n", 1)[0].strip()
    return first.strip("`'\"[]()<>*.:： \t").strip()


def find_tool(written: str, tools):
    """The tool a model meant on its Action line: exact name, any case, the human name (en / zh),
    the name before a note (`add (add two numbers)`), or the one tool the line mentions."""
    name = clean_tool_name(written)
    if not name:
        return None
    key = name.casefold()
    for match in (
        lambda t: t.name_for_model == name,
        lambda t: t.name_for_model.casefold() == key,
        lambda t: _norm(t.name_for_model) == _norm(name),
        lambda t: _norm(name) in {_norm(h) for h in _human_names(t)},
    ):
        found = [t for t in tools if match(t)]
        if len(found) == 1:
            return found[0]
    lead = re.match(r"[\w.\-]+", name)
    if lead and lead.group(0) != name:
        found = [t for t in tools if _norm(t.name_for_model) == _norm(lead.group(0))]
        if len(found) == 1:
            return found[0]
    mentioned = mentioned_tools(written, tools)
    return mentioned[0] if len(mentioned) == 1 else None


def mentioned_tools(line: str, tools) -> list:
    """The tools an Action line names, in the tools' order: more than one when the model copied the prompt's
    list of them (`Action: [calculator, local_search] 之一`)."""
    return [t for t in tools if _mentions(line, t)]


def _norm(name: str) -> str:
    name = re.sub(r"[\s\-]+", "_", name.strip().casefold())
    return re.sub(r"_?(api|tool|工具)$", "", name) or name


def _human_names(tool) -> list[str]:
    human = getattr(tool, "human_name", None)
    return [h for h in (human("en"), human("zh")) if h] if callable(human) else []


def _mentions(line: str, tool) -> bool:
    for name in [tool.name_for_model, *_human_names(tool)]:
        if re.search(r"[\u4e00-\u9fff]", name):
            if name in line:
                return True
        elif re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", line, re.IGNORECASE):
            return True
    return False
