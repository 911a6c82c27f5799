"""Files as passages: Markdown, plain text, HTML (its readable text, not its markup), PDF (its text layer,
through pypdf) and JSONL records of {"title", "text"}. Each passage knows its file, heading and page.

Passages are cut by structure: a heading starts a section; within one, paragraphs are joined while they fit
`passage_chars`, and a longer paragraph is split at sentence ends (at the bound itself where one sentence is
longer). A JSONL record keeps one passage per paragraph, as the shipped corpus always had. (Just over 300 lines:
one reader per kind of file and the one cutter they share.)
"""

from __future__ import annotations

import html.parser
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from .corpus import CorpusError, load_corpus

#: What a file's suffix says it holds; files of other kinds are not read.
KINDS = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".text": "text",
    ".rst": "text",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".jsonl": "jsonl",
}
PASSAGE_CHARS = 600  # the most characters of one passage (a longer sentence is cut there)
MAX_FILE_BYTES = 50 * 2**20  # a bigger file is listed as unreadable, not read

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？；])")
_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r" {0,3}(```|~~~)")
_LINK = re.compile(r"!?\[([^\]\n]*)\]\([^)\n]*\)")
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_BLANK = re.compile(r"\n[ \t]*\n")


class Unreadable(Exception):
    """A file that cannot be read as a document; the message says why, in a few words."""


@dataclass(frozen=True)
class Passage:
    """A piece of a document. `file` is its path under the corpus folder ("" for the records of a corpus that
    is one JSONL file); `heading` the nearest heading (a JSONL record's title); `title` the words indexed
    with more weight (file name and heading trail); `page` counts from 1 in a PDF."""

    file: str
    heading: str
    text: str
    page: int | None = None
    title: str = ""

    @property
    def source(self) -> str:
        """Where the passage is: `docs/setup.md § Installing`, `manual.pdf p. 12`, or a record's title."""
        if self.page is not None:
            return f"{self.file} p. {self.page}"
        return " § ".join(part for part in (self.file, self.heading) if part)


# --- cutting ------------------------------------------------------------------------------------------


def pieces(paragraph: str, limit: int) -> list[str]:
    """`paragraph` in pieces of at most `limit` characters, cut at sentence ends where it can be."""
    if len(paragraph) <= limit:
        return [paragraph]
    out, current = [], ""
    for sentence in _SENTENCE_END.split(paragraph):
        while len(sentence) > limit:  # one sentence longer than a passage: cut at a space before the bound
            cut = sentence.rfind(" ", limit // 2, limit)
            cut = cut if cut > 0 else limit
            if current:
                out.append(current)
                current = ""
            out.append(sentence[:cut].strip())
            sentence = sentence[cut:].strip()
        joined = f"{current} {sentence}".strip() if current and not _cjk_end(current) else current + sentence
        if current and len(joined) > limit:
            out.append(current)
            current = sentence
        else:
            current = joined
    if current.strip():
        out.append(current.strip())
    return [p for p in out if p]


def _cjk_end(text: str) -> bool:
    """Text ending in a CJK character or mark: the next sentence follows without a space."""
    return bool(text) and ("\u3000" <= text[-1] <= "\u9fff" or text[-1] in "！？；：，")


def sections_to_passages(
    sections: list[tuple[list[str], list[str]]], file: str, stem: str, limit: int, page: int | None = None
) -> list[Passage]:
    """Passages of (heading trail, paragraphs) sections: paragraphs joined while they fit `limit`."""
    out = []
    for trail, paragraphs in sections:
        heading = trail[-1] if trail else ""
        title = " › ".join(part for part in ([stem] + trail) if part)
        buffer: list[str] = []
        for paragraph in paragraphs:
            for piece in pieces(paragraph, limit):
                if buffer and len("\n".join(buffer)) + 1 + len(piece) > limit:
                    out.append(Passage(file, heading, "\n".join(buffer), page, title))
                    buffer = []
                buffer.append(piece)
        if buffer:
            out.append(Passage(file, heading, "\n".join(buffer), page, title))
    return out


# --- the kinds of file ------------------------------------------------------------------------------


def markdown_sections(text: str) -> list[tuple[list[str], list[str]]]:
    """(heading trail, paragraphs) per section of a Markdown text: ATX (`## x`) and setext headings; fenced
    code kept whole; front matter, comments and link targets dropped."""
    lines = _COMMENT.sub("", text).split("\n")
    if lines and lines[0].strip() == "---":  # YAML front matter
        end = next((i for i in range(1, min(len(lines), 100)) if lines[i].strip() in ("---", "...")), None)
        if end is not None:
            lines = lines[end + 1 :]
    sections: list[tuple[list[str], list[str]]] = [([], [])]
    levels: list[tuple[int, str]] = []
    paragraph: list[str] = []
    fence = None

    def flush() -> None:
        text = "\n".join(paragraph).strip()
        if text:
            sections[-1][1].append(_LINK.sub(r"\1", text) if fence is None else text)
        paragraph.clear()

    def start(level: int, heading: str) -> None:
        flush()
        while levels and levels[-1][0] >= level:
            levels.pop()
        levels.append((level, _LINK.sub(r"\1", heading).strip()))
        sections.append(([h for _, h in levels if h], []))

    for line in lines:
        if fence is not None:
            paragraph.append(line)
            if line.strip().startswith(fence):
                fence = None
                flush()
            continue
        opening = _FENCE.match(line)
        atx = _ATX.match(line)
        if opening:
            flush()
            fence = opening.group(1)
            paragraph.append(line)
        elif atx:
            start(len(atx.group(1)), atx.group(2) or "")
        elif _SETEXT.match(line) and len(paragraph) == 1 and paragraph[0].strip():
            heading = paragraph.pop()
            start(1 if line.strip()[0] == "=" else 2, heading)
        elif not line.strip():
            flush()
        else:
            paragraph.append(line)
    flush()
    return [s for s in sections if s[1]]


def text_sections(text: str) -> list[tuple[list[str], list[str]]]:
    """Plain text: one section, paragraphs at blank lines."""
    return [([], [p.strip() for p in _BLANK.split(text) if p.strip()])]


class _Readable(html.parser.HTMLParser):
    """The text of an HTML page as sections: headings (h1-h6) start one, block elements end a paragraph,
    and what a reader does not see (scripts, styles, navigation, the head but its title) is left out."""

    SKIP = frozenset({"script", "style", "noscript", "template", "svg", "nav", "head", "iframe", "object"})
    BLOCKS = frozenset(
        {
            "p",
            "div",
            "section",
            "article",
            "main",
            "header",
            "footer",
            "aside",
            "li",
            "ul",
            "ol",
            "dl",
            "dt",
            "dd",
            "table",
            "tr",
            "td",
            "th",
            "br",
            "hr",
            "blockquote",
            "pre",
            "figure",
            "figcaption",
            "form",
            "details",
            "summary",
        }
    )

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.skipping = 0
        self.title = ""
        self.in_title = False
        self.heading: int | None = None
        self.text: list[str] = []
        self.blocks: list[tuple[int, str]] = []  # (heading level, text) or (0, paragraph)

    def flush(self, level: int = 0) -> None:
        text = re.sub(r"\s+", " ", "".join(self.text)).strip()
        if text:
            self.blocks.append((level, text))
        self.text = []

    def handle_starttag(self, tag, attrs):
        if tag == "title":
            self.in_title = True
        if tag in self.SKIP:
            self.skipping += 1
        elif re.fullmatch(r"h[1-6]", tag):
            self.flush()
            self.heading = int(tag[1])
        elif tag in self.BLOCKS:
            self.flush(self.heading or 0)

    def handle_endtag(self, tag):
        if tag == "title":
            self.in_title = False
        if tag in self.SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif re.fullmatch(r"h[1-6]", tag) and self.heading is not None:
            self.flush(self.heading)
            self.heading = None
        elif tag in self.BLOCKS:
            self.flush(self.heading or 0)

    def handle_data(self, data):
        if self.in_title:
            self.title += data
        elif not self.skipping:
            self.text.append(data)


def html_sections(text: str) -> list[tuple[list[str], list[str]]]:
    parser = _Readable()
    parser.feed(text)
    parser.close()
    parser.flush(parser.heading or 0)
    title = re.sub(r"\s+", " ", parser.title).strip()
    sections: list[tuple[list[str], list[str]]] = [([title] if title else [], [])]
    levels: list[tuple[int, str]] = []
    for level, block in parser.blocks:
        if level:
            while levels and levels[-1][0] >= level:
                levels.pop()
            levels.append((level, block))
            sections.append(([h for _, h in levels], []))
        else:
            sections[-1][1].append(block)
    return [s for s in sections if s[1]]


def read_pdf(path: Path) -> tuple[str, list[tuple[int, str]]]:
    """The PDF's title ("" when it has none) and (page number from 1, its text) for each page with text,
    through pypdf."""
    try:
        from pypdf import PdfReader
    except ImportError:
        raise Unreadable("reading PDF files needs pypdf (pip install pypdf)") from None
    quiet = logging.getLogger("pypdf")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # its notes on a damaged file would be lines of their own: ours is one
    try:
        reader = PdfReader(path)
        if reader.is_encrypted and not reader.decrypt(""):
            raise Unreadable("the PDF is encrypted")
        pages = [(number, page.extract_text() or "") for number, page in enumerate(reader.pages, 1)]
        title = str((reader.metadata or {}).get("/Title") or "")
    except Unreadable:
        raise
    except Exception as e:  # a malformed file can raise anything from the parser: say it is not readable
        raise Unreadable(f"not a readable PDF ({type(e).__name__}: {str(e)[:120]})") from None
    finally:
        quiet.setLevel(level)
    if not any(text.strip() for _, text in pages):
        raise Unreadable("the PDF has no text layer (a scan? run OCR on it first)")
    return " ".join(title.split()), [(number, text) for number, text in pages if text.strip()]


# --- one file --------------------------------------------------------------------------------------


def decode(data: bytes) -> str:
    """UTF-8 text (a byte-order mark allowed, UTF-16 with one); anything else is unreadable."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise Unreadable("not UTF-16 text, though it starts like it") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise Unreadable(f"not UTF-8 text (byte {e.start})") from None


def read_passages(path: Path, file: str, data: bytes | None = None, limit: int = PASSAGE_CHARS) -> list[Passage]:
    """The passages of one file, named `file` in their sources; raises Unreadable with the reason.
    `data`: the file's bytes when already read."""
    kind = KINDS.get(path.suffix.lower())
    if kind is None:
        raise Unreadable(f"not a kind of file that is searched ({', '.join(sorted(KINDS))})")
    stem = path.stem
    if kind == "pdf":
        title, pages = read_pdf(path)
        named = f"{stem} › {title}" if title else stem  # indexed with each page's passages, as a heading is
        return [
            p
            for number, text in pages
            for p in sections_to_passages(text_sections(text), file, named, limit, page=number)
        ]
    if kind == "jsonl":
        return jsonl_passages(path, file, limit)
    text = decode(path.read_bytes() if data is None else data)
    reader = {"markdown": markdown_sections, "text": text_sections, "html": html_sections}[kind]
    return sections_to_passages(reader(text), file, stem, limit)


def jsonl_passages(path: Path, file: str, limit: int) -> list[Passage]:
    """One passage per paragraph of each {"title", "text"} record (a long one split), titled by the record."""
    try:
        documents = load_corpus(path)
    except CorpusError as e:
        raise Unreadable(str(e).removeprefix(f"{path}, ").removeprefix(f"{path}: ")) from None
    return [
        Passage(file, doc.title, piece, None, doc.title)
        for doc in documents
        for paragraph in doc.paragraphs()
        for piece in pieces(paragraph, limit)
    ]
