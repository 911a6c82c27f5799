"""Prompts as data: every text the model reads from the agent, one YAML file per protocol in
tinyagent/data/prompts/ (react, check, direct, tools, common), English and Chinese side by side.

A prompt is named `file.key` ("react.system"); its text has named slots (`{tool_descs}`) that `fill`
replaces, and every other brace is left as it is, so a JSON example in a prompt needs no escaping.
`Agent(prompts=...)` overrides any of them (`Prompts.overridden`); `Prompts.sha256` is what the eval
records, so any changed text changes the checksum.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PROMPT_DIR = Path(__file__).resolve().parents[1] / "data" / "prompts"
FILES = ("react", "check", "direct", "tools", "common")
LANGS = ("en", "zh")
_SLOT = re.compile(r"\{([a-z_]+)\}")
#: A format line of a prompt: a ReAct label, then what is to be written there, described.
_FORMAT_LINE = re.compile(r"^(?:Question|Thought|Action|Action Input|Observation|Final Answer): ?(.+)$", re.MULTILINE)
#: The prompts whose format lines describe what to write.
PLACEHOLDER_PROMPTS = ("react.system", "check.body", "check.end", "check.end_none")

Overrides = Mapping[str, "str | Mapping[str, str]"]


@dataclass(frozen=True)
class Prompts:
    """Prompt texts by name and language: {"react.system": {"en": ..., "zh": ...}, ...}."""

    texts: Mapping[str, Mapping[str, str]]

    def text(self, name: str, lang: str = "en") -> str:
        """The prompt `name` in `lang` (English where it has no text in `lang`)."""
        texts = self.texts[name]
        return texts.get(lang) or texts["en"]

    def fill(self, name: str, lang: str = "en", /, **slots) -> str:
        """The prompt `name` in `lang` with its slots filled; a slot the text has but `slots` lacks stays
        as written (an override may leave slots out, and a bug shows in the text rather than raising)."""
        return _SLOT.sub(lambda m: str(slots[m.group(1)]) if m.group(1) in slots else m.group(0), self.text(name, lang))

    def overridden(self, overrides: Overrides | str | os.PathLike | None) -> Prompts:
        """These prompts with `overrides` in place: a mapping {name: text or {lang: text}} or a YAML file
        of the same shape, whose top-level keys may also be file names holding {key: ...}. A name that
        does not exist, a language other than en / zh, or a slot the prompt does not have is a ValueError."""
        if overrides is None:
            return self
        if isinstance(overrides, (str, os.PathLike)):
            overrides = _read(Path(overrides))
        texts = {name: dict(langs) for name, langs in self.texts.items()}
        for name, value in _flat(overrides).items():
            if name not in texts:
                raise ValueError(f"prompts: no prompt named {name!r}; prompts: {', '.join(sorted(texts))}")
            given = {lang: value for lang in LANGS} if isinstance(value, str) else dict(value)
            for lang, text in given.items():
                if lang not in LANGS or not isinstance(text, str):
                    raise ValueError(f"prompts: {name}.{lang} must be text in en or zh")
                unknown = set(_SLOT.findall(text)) - set(_SLOT.findall(" ".join(self.texts[name].values())))
                if unknown:
                    raise ValueError(
                        f"prompts: {name} has no slot {', '.join(sorted(unknown))}; its slots: "
                        f"{', '.join(sorted(set(_SLOT.findall(self.text(name))))) or 'none'}"
                    )
                texts[name][lang] = text
        return Prompts(texts)

    @functools.cached_property
    def placeholders(self) -> tuple[re.Pattern, ...]:
        """What the format lines of the prompts describe rather than show (`Action Input: the tool's arguments
        as a JSON object`, `Final Answer: 问题的答案`), as patterns an answer copied from them fullmatches
        (a slot matches anything): no such text is an answer."""
        found = set()
        for name in PLACEHOLDER_PROMPTS:
            for text in self.texts.get(name, {}).values():
                for m in _FORMAT_LINE.finditer(text):
                    described = m.group(1).strip().rstrip(".。")
                    if len(described) > 3 and not _SLOT.fullmatch(described):
                        found.add(".*".join(re.escape(part) for part in _SLOT.split(described)[::2]))
        return tuple(re.compile(p, re.IGNORECASE) for p in sorted(found))

    def is_placeholder(self, answer: str) -> bool:
        """Whether `answer` is one of the prompts' placeholders copied (`placeholders`)."""
        text = answer.strip().strip("\"'“”「」.。 ")
        return any(p.fullmatch(text) for p in self.placeholders)

    @property
    def sha256(self) -> str:
        """A checksum of every text as loaded (overrides included): a changed prompt is a changed run."""
        return hashlib.sha256(json.dumps(self.texts, ensure_ascii=False, sort_keys=True).encode()).hexdigest()[:16]


@functools.cache
def shipped() -> Prompts:
    """The prompts in tinyagent/data/prompts/, read once."""
    texts: dict[str, dict[str, str]] = {}
    for file in FILES:
        for key, value in _read(PROMPT_DIR / f"{file}.yaml").items():
            texts[f"{file}.{key}"] = {lang: value for lang in LANGS} if isinstance(value, str) else dict(value)
    return Prompts(texts)


def prompts_for(overrides: Overrides | str | os.PathLike | Prompts | None) -> Prompts:
    """The shipped prompts with `overrides` (or `overrides` itself, when it is already a Prompts)."""
    return overrides if isinstance(overrides, Prompts) else shipped().overridden(overrides)


def _read(path: Path) -> dict:
    import yaml  # read on first use: `import tinyagent` does not need it

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ValueError(f"prompts: cannot read {path} ({type(e).__name__})") from None
    except yaml.YAMLError as e:
        raise ValueError(f"prompts: {path} is not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ValueError(f"prompts: {path} must map prompt names to texts")
    return data


def _flat(overrides: Mapping) -> dict:
    """{"react": {"system": ...}} and {"react.system": ...} both as {"react.system": ...}."""
    flat = {}
    for name, value in overrides.items():
        if name in FILES and isinstance(value, Mapping) and not set(value) <= set(LANGS):
            flat.update({f"{name}.{key}": text for key, text in value.items()})
        else:
            flat[name] = value
    return flat
