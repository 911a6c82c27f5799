"""The recorded episodes every bench script replays: their file format, the tools each offers, and the
texts a random checkpoint's tokenizer is trained on, and the protocol they were recorded in. Of bench/, it
imports only replay.py."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from replay import RecordedReply

from tinyagent import ReAct
from tinyagent.format.prompts import build_system_prompt
from tinyagent.tools.calculator import Calculator
from tinyagent.tools.corpus import DEFAULT_CORPUS, load_corpus
from tinyagent.tools.google_search import GoogleSearch, format_results
from tinyagent.tools.local_search import LocalSearch
from tinyagent.tools.tool import ToolError

EPISODES = Path(__file__).parent / "episodes"
#: The episodes are ReAct from the first reply, the model searching by its own calls (recorded before the working
#: first and the search first): replayed as they were.
PROTOCOL = ReAct(working_first=False, search="tool")


class EpisodeError(ValueError):
    """An episode file is malformed, or replaying it did not give the recorded episode."""


@dataclass
class Episode:
    id: str
    lang: str
    question: str
    answer: str
    steps: list[dict]

    def replies(self) -> list[RecordedReply]:
        return [RecordedReply(s["reply"], s.get("continuation", ""), bool(s.get("runs_on"))) for s in self.steps]

    def search_pages(self) -> list[str]:
        """The google_search observations in order: the recorded Serper responses, formatted as the tool does."""
        return [format_results(s["serper"]) for s in self.steps if "serper" in s]


def load_episodes(paths: list[Path]) -> list[Episode]:
    """Episodes of JSONL files; lines with a "_comment" key document the file and are skipped."""
    episodes = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if "_comment" in record:
                    continue
                episode = Episode(record["id"], record["lang"], record["question"], record["answer"], record["steps"])
                if not episode.steps or not all(isinstance(s.get("reply"), str) for s in episode.steps):
                    raise KeyError("reply")
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise EpisodeError(f"{path}:{number}: not an episode ({type(e).__name__}: {e})") from None
            episodes.append(episode)
    return episodes


class RecordedSearch(GoogleSearch):
    """google_search as the model sees it, answering with an episode's recorded Serper pages in order."""

    def __init__(self, pages: list[str]):
        super().__init__(api_key="no-key:recorded-episode")  # never sent; any key is registered as a secret
        self.pages = list(pages)

    def call(self, search_query: str) -> str:
        if not self.pages:
            raise ToolError("no recorded search result left for this episode")
        return self.pages.pop(0)


@functools.cache
def local_search() -> LocalSearch:
    return LocalSearch()


def episode_tools(episode: Episode) -> list:
    """The tools every episode offers: recorded google_search, the real calculator and local_search."""
    return [RecordedSearch(episode.search_pages()), Calculator(), local_search()]


def tokenizer_texts(episodes: list[Episode]) -> list[str]:
    """Everything the replay prompts hold, to train a tokenizer for a random checkpoint."""
    texts = [build_system_prompt(episode_tools(episodes[0]), lang) for lang in ("en", "zh")]
    for e in episodes:
        texts += [e.question, e.answer, *e.search_pages()]
        texts += [s["reply"] + s.get("continuation", "") for s in e.steps]
    texts += [d.text for d in load_corpus(DEFAULT_CORPUS)]
    return texts
