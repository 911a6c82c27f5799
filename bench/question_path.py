"""Which of the package's files one question goes through, and how many lines they hold: a scripted model,
the calculator, one call then the answer, with the model's working first (the default) and without
(the tutorial's loop). Every file a function is called from counts whole; imports are done before.

    python bench/question_path.py            # this checkout
    git stash; python bench/question_path.py; git stash pop   # or any commit, to compare

Runs on this commit and on the commits before the protocol objects (84d018d), whose Agent took the working
first as a keyword.
"""

from __future__ import annotations

import sys
from pathlib import Path

import tinyagent
from tinyagent import Agent, BaseModel
from tinyagent.tools import Calculator

PACKAGE = Path(tinyagent.__file__).resolve().parent
CALL = 'Thought: check it\nAction: calculator\nAction Input: {"expression": "3 * 4 + 1"}'
REPLIES = {
    "working first": ["3 * 4 = 12, and 12 + 1 = 13.\nThe answer is 13.", CALL, "Final Answer: 13"],
    "ReAct from the first reply": [CALL, "Final Answer: 13"],
}


class Scripted(BaseModel):
    def __init__(self, replies):
        self.replies = list(replies)

    def generate(self, messages, stop=None, **kwargs):
        return self.replies.pop(0)


def agent_for(mode: str, model: BaseModel) -> Agent:
    working_first = mode == "working first"
    try:
        from tinyagent import ReAct
    except ImportError:  # before the protocol objects: the working first was the Agent's keyword
        return Agent(model, [Calculator()], working_first=working_first)
    return Agent(model, [Calculator()], ReAct(working_first=working_first))


def files_entered(mode: str) -> set[Path]:
    agent = agent_for(mode, Scripted(REPLIES[mode]))
    seen: set[Path] = set()

    def profile(frame, event, arg):
        if event == "call":
            path = Path(frame.f_code.co_filename)
            if path.is_relative_to(PACKAGE):
                seen.add(path)

    sys.setprofile(profile)
    try:
        result = agent.run("Ann has 3 bags of 4 apples and finds one more. How many?")
    finally:
        sys.setprofile(None)
    assert result.answer == "13", result
    return seen


def main() -> None:
    for mode in REPLIES:
        files = sorted(files_entered(mode))
        lines = {p: len(p.read_text(encoding="utf-8").splitlines()) for p in files}
        print(f"{mode}: {len(files)} files, {sum(lines.values())} lines")
        for path, count in lines.items():
            print(f"  {count:5d}  {path.relative_to(PACKAGE.parent)}")


if __name__ == "__main__":
    main()
