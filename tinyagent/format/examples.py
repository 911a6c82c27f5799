"""Worked ReAct examples (few-shot) for the system prompt, in English and Chinese.

Each example is a dict as `prompts.format_example` renders it. Its observations are exactly what the
shipped tools return for its inputs on the shipped corpus (tests/test_prompts.py replays them), so an
example never shows the model an output format that the real tool does not produce.

Use `examples_for(tool names, lang)` to get the examples that fit an agent's tools:

    agent = Agent(model, tools, examples=examples_for([t.name_for_model for t in tools], "en"))
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

EXAMPLES: dict[str, list[dict]] = {
    "en": [
        {
            "question": "When was the Eiffel Tower completed, and how tall is it?",
            "steps": [
                {
                    "thought": "I need facts about the Eiffel Tower, so I will search for it.",
                    "action": "local_search",
                    "action_input": {"search_query": "Eiffel Tower"},
                    "observation": "[1] Eiffel Tower\nThe Eiffel Tower is a wrought-iron lattice tower on the Champ "
                    "de Mars in Paris, France. It was built by the company of the engineer Gustave "
                    "Eiffel and completed in 1889 for the World's Fair. It is about 330 metres tall.",
                }
            ],
            "final_thought": "The search result gives both the year and the height.",
            "answer": "The Eiffel Tower was completed in 1889 and is about 330 metres tall.",
        },
        {
            "question": "A train travels 420 km in 3.5 hours. What is its average speed?",
            "steps": [
                {
                    "thought": "Average speed is distance divided by time, so I will compute 420 / 3.5.",
                    "action": "calculator",
                    "action_input": {"expression": "420 / 3.5"},
                    "observation": "120",
                }
            ],
            "final_thought": "The calculator gives 120, in kilometres per hour.",
            "answer": "Its average speed is 120 km/h.",
        },
        {
            "question": "A baker makes 3 trays of 12 muffins. She sells 25 muffins and gives 4 to a friend. "
            "How many muffins are left?",
            "steps": [
                {
                    "thought": "She makes 3 * 12 = 36 muffins.\nShe sells 25 and gives away 4, so 25 + 4 = 29 are "
                    "gone.\nThat leaves 36 - 29 = 7 muffins. I will check the whole computation.",
                    "action": "calculator",
                    "action_input": {"expression": "3 * 12 - (25 + 4)"},
                    "observation": "7",
                }
            ],
            "final_thought": "The calculator confirms my working: 36 made, 29 gone, 7 left.",
            "answer": "7",
        },
        {
            "question": "Tom earns $15 an hour and works 8 hours a day, 5 days a week. He spends $120 a week "
            "on food. How much money does he keep each week?",
            "steps": [
                {
                    "thought": "First his pay for one day: 15 * 8.",
                    "action": "calculator",
                    "action_input": {"expression": "15 * 8"},
                    "observation": "120",
                },
                {
                    "thought": "He earns 120 dollars a day, but that is only one step. Over 5 days he earns "
                    "120 * 5, and he spends 120 on food, so he keeps 120 * 5 - 120.",
                    "action": "calculator",
                    "action_input": {"expression": "120 * 5 - 120"},
                    "observation": "480",
                },
            ],
            "final_thought": "He earns 600 dollars a week and keeps 600 - 120 = 480 dollars.",
            "answer": "480",
        },
        {
            "question": "In which year did Albert Einstein publish his paper on special relativity?",
            "steps": [
                {
                    "thought": "I will search for Albert Einstein and look for the paper in his article.",
                    "action": "search",
                    "action_input": {"entity": "Albert Einstein"},
                    "observation": "Albert Einstein\nAlbert Einstein was a theoretical physicist born on 14 March "
                    "1879 in Ulm, Germany, and died on 18 April 1955 in Princeton, United States. "
                    "He developed the theory of relativity. He received the 1921 Nobel Prize in "
                    "Physics for his explanation of the photoelectric effect.",
                },
                {
                    "thought": "The first paragraph does not say when. I will look up special relativity.",
                    "action": "lookup",
                    "action_input": {"keyword": "special relativity"},
                    "observation": "(Result 1 / 1) In 1905, often called his miracle year, he published four "
                    "papers: on the photoelectric effect, on Brownian motion, on special relativity, "
                    "and on the equivalence of mass and energy (E = mc2).",
                },
            ],
            "final_thought": "The paper on special relativity was one of his four papers of 1905.",
            "answer": "1905",
        },
    ],
    "zh": [
        {
            "question": "珠穆朗玛峰有多高？",
            "steps": [
                {
                    "thought": "我需要查询珠穆朗玛峰的海拔，先搜索一下。",
                    "action": "local_search",
                    "action_input": {"search_query": "珠穆朗玛峰 海拔"},
                    "observation": "[1] 珠穆朗玛峰\n珠穆朗玛峰是世界最高峰，位于中国与尼泊尔边境。"
                    "2020年中国和尼泊尔共同测定其海拔为8848.86米。",
                }
            ],
            "final_thought": "搜索结果给出了海拔，我现在知道最终答案了。",
            "answer": "珠穆朗玛峰的海拔为8848.86米（2020年中国和尼泊尔共同测定）。",
        },
        {
            "question": "一个正方形的边长是12厘米，它的面积是多少？",
            "steps": [
                {
                    "thought": "正方形的面积等于边长的平方，我用计算器算 12**2。",
                    "action": "calculator",
                    "action_input": {"expression": "12**2"},
                    "observation": "144",
                }
            ],
            "final_thought": "计算结果是144，单位是平方厘米。",
            "answer": "它的面积是144平方厘米。",
        },
        {
            "question": "面包师做了3盘松饼，每盘12个。她卖掉25个，又送给朋友4个。还剩多少个松饼？",
            "steps": [
                {
                    "thought": "她一共做了 3 * 12 = 36 个松饼。\n卖掉25个、送出4个，一共少了 25 + 4 = 29 个。\n"
                    "所以还剩 36 - 29 = 7 个。我用计算器核对整个算式。",
                    "action": "calculator",
                    "action_input": {"expression": "3 * 12 - (25 + 4)"},
                    "observation": "7",
                }
            ],
            "final_thought": "计算器证实了我的推算：做了36个，少了29个，还剩7个。",
            "answer": "7",
        },
        {
            "question": "小王每小时挣15元，每天工作8小时，每周工作5天。他每周伙食花120元。他每周能存下多少钱？",
            "steps": [
                {
                    "thought": "先算他一天的工资：15 * 8。",
                    "action": "calculator",
                    "action_input": {"expression": "15 * 8"},
                    "observation": "120",
                },
                {
                    "thought": "他一天挣120元，但这只是其中一步。5天挣 120 * 5 元，再减去伙食费120元，"
                    "所以存下 120 * 5 - 120 元。",
                    "action": "calculator",
                    "action_input": {"expression": "120 * 5 - 120"},
                    "observation": "480",
                },
            ],
            "final_thought": "他每周挣600元，存下 600 - 120 = 480 元。",
            "answer": "480",
        },
        {
            "question": "孔子周游列国大约多少年？",
            "steps": [
                {
                    "thought": "我先搜索孔子，再在他的文章里查找周游列国。",
                    "action": "search",
                    "action_input": {"entity": "孔子"},
                    "observation": "孔子\n孔子（公元前551年—公元前479年）是春秋时期的思想家和教育家，"
                    "儒家学派的创始人。他的言行由弟子及再传弟子记录在《论语》中。",
                },
                {
                    "thought": "第一段没有提到周游列国，我来查找这个关键词。",
                    "action": "lookup",
                    "action_input": {"keyword": "周游列国"},
                    "observation": "(Result 1 / 1) 他曾带领弟子周游列国约十四年，晚年回到鲁国，专心教学并整理古代典籍。",
                },
            ],
            "final_thought": "查找结果说是约十四年，我现在知道最终答案了。",
            "answer": "孔子带领弟子周游列国大约十四年。",
        },
    ],
}


def examples_for(tool_names: Iterable[str], lang: str = "en", limit: int | None = None) -> list[dict]:
    """The shipped `lang` examples whose every action is one of `tool_names` (copies, safe to edit).

    A search example is written for `local_search`; when only `google_search` is available it is
    re-targeted to `google_search` (same parameter; its observation keeps the local corpus's text,
    which shows the shape of a step rather than Serper's exact output). `limit` keeps the first few.
    """
    if lang not in EXAMPLES:
        raise ValueError(f"no examples for language {lang!r}; choose one of {', '.join(EXAMPLES)}")
    names = set(tool_names)
    rename = {}
    if "local_search" not in names and "google_search" in names:
        rename["local_search"] = "google_search"
    chosen = []
    for example in EXAMPLES[lang]:
        actions = [rename.get(step["action"], step["action"]) for step in example["steps"]]
        if all(a in names for a in actions):
            copied = copy.deepcopy(example)
            for step, action in zip(copied["steps"], actions):
                step["action"] = action
            chosen.append(copied)
    return chosen[:limit] if limit is not None else chosen
