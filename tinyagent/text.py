"""Text helpers every layer uses: reasoning blocks, stop strings, the question's language, one-line
errors and clipping. A leaf: it imports nothing of the project but the redaction in `secrets`."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable

from .redaction import redact

log = logging.getLogger(__name__)

# --- reasoning blocks ---------------------------------------------------------------------------

_THINK_TAG = re.compile(r"<(/?)think>", re.IGNORECASE)


def mask_thinking(text: str) -> str:
    """`text` with every reasoning block (`<think>…</think>`, an unclosed `<think>…`, or everything
    before a lone `</think>`) blanked to spaces of the same length, so positions still line up.

    One pass over the tags, so linear in the length: a streamed reply is masked again at every
    update, and one full of `<think>` fragments once cost cubic time."""
    blanked: list[tuple[int, int]] = []
    opened, lone_close_end = None, 0
    for tag in _THINK_TAG.finditer(text):
        if not tag.group(1):
            opened = tag.start() if opened is None else opened
        elif opened is not None:
            blanked.append((opened, tag.end()))
            opened = None
        else:  # the template opened the block in the prompt (DeepSeek-R1 distills)
            lone_close_end = tag.end()
    if lone_close_end:
        blanked = [(0, lone_close_end)] + [(a, b) for a, b in blanked if b > lone_close_end]
    if opened is not None:
        blanked.append((opened, len(text)))
    if not blanked:
        return text
    parts, at = [], 0
    for start, end in blanked:
        parts += [text[at:start], " " * (end - start)]
        at = end
    return "".join(parts) + text[at:]


# --- stop strings ---------------------------------------------------------------------------------


def stop_index(text: str, stop: Iterable[str] | None) -> int | None:
    """Where the earliest stop string in `text` begins, or None.

    A stop string that starts with a newline means "at a line start", so it also matches at the very
    start of the text without its newline. Stop strings inside a reasoning block (`<think>…</think>`,
    or one still open) do not count: a model may think about an observation without ending its reply.
    """
    visible = mask_thinking(text) if "think>" in text.lower() else text
    cut = None
    for s in stop or ():
        if not s:
            continue
        i = visible.find(s)
        if s.startswith("\n") and visible.startswith(s[1:]):
            i = 0
        if i >= 0 and (cut is None or i < cut):
            cut = i
    return cut


def trim_at_stop(text: str, stop: Iterable[str] | None) -> str:
    """Cut `text` before the earliest stop string (see `stop_index`)."""
    cut = stop_index(text, stop)
    return text if cut is None else text[:cut]


def partial_stop_length(text: str, stop: Iterable[str]) -> int:
    """Length of the longest tail of `text` that is a proper prefix of some stop string (or, for a stop
    string that starts with a newline, all of `text` when it could still become that string without it)."""
    best = 0
    for s in stop:
        if s.startswith("\n") and len(text) < len(s) - 1 and s[1:].startswith(text):
            best = max(best, len(text))
        for k in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:k]):
                best = k
                break
    return best


TextCallback = Callable[[str], None]


class StopHoldback:
    """Feeds `on_text` with the safe part of the text generated so far: `on_text` must only ever
    receive text that ends up in the returned text, so a tail such as "Obser" (maybe the start of
    "Observation:") waits until the next text shows what it is.

    `update(text)` takes everything generated so far; `finish(final)` sends what is left of the
    returned text, so the chunks sent always concatenate to exactly `final`.
    """

    def __init__(self, on_text: TextCallback, stop: Iterable[str] | None):
        self.on_text = on_text
        self.stop = [s for s in stop or () if s]
        self.sent = ""
        self.stopped = False

    def update(self, text: str) -> None:
        if self.stopped:
            return
        safe = trim_at_stop(text, self.stop)
        if len(safe) < len(text):
            self.stopped = True
        else:
            safe = text[: len(text) - partial_stop_length(text, self.stop)]
        self._send(safe)

    def finish(self, final: str) -> None:
        if final.startswith(self.sent):
            self._send(final)
        else:  # the decoder revised text it had already shown; nothing sensible left to send
            log.warning("streamed text diverged from the final text; the stream ends early")

    def _send(self, text: str) -> None:
        if len(text) > len(self.sent) and text.startswith(self.sent):
            chunk, self.sent = text[len(self.sent) :], text
            self.on_text(chunk)


# --- language -----------------------------------------------------------------------------------

_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f]")
_KANA_HANGUL = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")
_LATIN_WORD = re.compile(r"[A-Za-z\u00c0-\u024f]+")


def detect_lang(text: str) -> str:
    """'zh' for Chinese text, else 'en' (the prompt for every other language).

    Chinese means Han characters that are not Japanese or Korean (those carry kana / hangul: at
    least one for every four Han characters) and that make up the text rather than a quote in
    it: at least as many Han characters as Latin words, so "What does 水 mean?" stays English.
    """
    han = len(_HAN.findall(text or ""))
    if not han or 4 * len(_KANA_HANGUL.findall(text)) >= han:
        return "en"
    return "zh" if han >= len(_LATIN_WORD.findall(text)) else "en"


def lang_for(setting: str, text: str) -> str:
    """The prompt language for `text` under a `lang` setting: the setting itself, or detected for "auto"."""
    return setting if setting != "auto" else detect_lang(text)


# --- token counts without a tokenizer ----------------------------------------------------------

#: Characters per token assumed for ASCII text, and tokens per other character (Chinese, accents, emoji):
#: on the high side of what BPE tokenizers produce (README: measurements), so a prompt fitted to an
#: estimate fits the real count.
ASCII_CHARS_PER_TOKEN = 3.0
TOKENS_PER_OTHER_CHAR = 2.0


def estimate_tokens(text: str) -> int:
    """About how many tokens `text` takes, rounded up; for a server whose tokenizer is not at hand."""
    other = sum(1 for ch in text if ord(ch) > 127) if not text.isascii() else 0
    return int((len(text) - other) / ASCII_CHARS_PER_TOKEN + other * TOKENS_PER_OTHER_CHAR) + 1


# --- one line -----------------------------------------------------------------------------------

LINE_LIMIT = 300  # characters of an error shown on one line (CLI, chat page, results)


def clip(text: str, limit: int, mark: str = "…") -> str:
    """`text` redacted, then cut to at most `limit` characters, ending with `mark` when cut: redacting
    first, so no part of a secret that straddles the cut survives it."""
    text = redact(text)
    return text if len(text) <= limit else text[: max(0, limit - len(mark))] + mark


def one_line(error: BaseException, limit: int | None = LINE_LIMIT, with_type: bool = True, whole: bool = False) -> str:
    """What a person is shown of an error: `Type: first line of its message` (`whole`: all its lines
    joined), redacted before it is cut to `limit` characters (so no part of a secret survives the cut;
    None: not cut). Never a traceback."""
    lines = str(error).strip().splitlines()
    first = " ".join(" ".join(lines).split()) if whole else lines[0].strip() if lines else ""
    if with_type:
        text = f"{type(error).__name__}: {first}" if first else type(error).__name__
    else:
        text = first or type(error).__name__
    return redact(text) if limit is None else clip(text, limit)


# --- text shown on a terminal -------------------------------------------------------------------

#: Characters that drive a terminal instead of showing: the C0 controls but tab and newline, DEL, and the C1
#: controls (8-bit CSI, OSC, NEL, ...). ESC starts every escape sequence (OSC 52 writes the clipboard, OSC 0
#: the window title, CSI 2J clears the screen), so escaping it leaves the rest of a sequence as plain text.
_TERMINAL_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: Characters that change how the text around them shows without showing themselves: bidirectional
#: overrides, embeddings, isolates and marks, zero-width spaces and joiners, the byte-order mark.
_INVISIBLE = re.compile("[\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")


def _escaped(match: re.Match) -> str:
    return f"\\u{ord(match.group(0)):04x}"


def escape_controls(text: str, invisible: bool = False) -> str:
    """Model or tool text made safe to write to a terminal: each control character that could drive it
    (ESC and the rest of C0 but tab and newline, DEL, C1) shown as a visible `\\u001b`, so no escape
    sequence reaches the terminal; a CR before a newline dropped. `invisible`: also the characters that
    reorder or hide text (right-to-left overrides, directional isolates, zero-width characters), where a
    person decides on what they read (approving a call). The escapes are JSON's, so JSON stays JSON."""
    text = _TERMINAL_CONTROLS.sub(_escaped, text.replace("\r\n", "\n"))
    return _INVISIBLE.sub(_escaped, text) if invisible else text


# --- names --------------------------------------------------------------------------------------

try:
    from enum import StrEnum
except ImportError:  # Python 3.10
    from enum import Enum

    class StrEnum(str, Enum):  # type: ignore[no-redef]
        """Members that are their value: they compare, print, format and serialise as that string."""

        def __str__(self) -> str:
            return str.__str__(self)

        def __format__(self, spec: str) -> str:
            return str.__format__(str.__str__(self), spec)
