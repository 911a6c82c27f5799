"""The printed tables: summaries side by side (the agent, the model alone (`direct`) and retrieve-then-answer
(`rag`) of one run, or many runs for `compare`), and the questions on which they disagree, each with every
column's answer, and which column alone got it right."""

from __future__ import annotations

from collections.abc import Sequence

from ..text import escape_controls

AGENT, DIRECT, RAG = "agent", "direct", "rag"
MODES = (AGENT, DIRECT, RAG)
BASELINES = (DIRECT, RAG)  # one plain prompt and one reply each (rag: after its one search)
ANSWER_CLIP = 40  # characters of an answer shown in the disagreement list


def _num(summary: dict, key: str, fmt: str, scale: float = 1) -> str:
    value = summary.get(key)
    return "-" if value is None else format(value * scale, fmt)


def _rate_of(modes: str | tuple[str, ...], key: str):
    """A cell with the summary's rate `key` as a percentage, for summaries of `modes` only ("-" for others)."""
    modes = (modes,) if isinstance(modes, str) else modes
    return lambda s: f"{_num(s, key, '.1f', 100)}%" if s.get("mode", AGENT) in modes else "-"


def _success(s: dict) -> str:
    return f"{_num(s, 'success_rate', '.1f', 100)}% ({s['n_success']}/{s['n']})"


def _tokens(s: dict) -> str:
    return f"{_num(s, 'mean_prompt_tokens', '.0f')} / {_num(s, 'mean_completion_tokens', '.0f')}"


#: (label, cell) of each row; "format-valid" on a direct or rag run means its reply ended with the answer line.
ROWS = [
    ("questions", lambda s: f"{s['n']}{' (interrupted)' if s.get('interrupted') else ''}"),
    ("success", _success),
    ("format-valid questions (agent)", _rate_of(AGENT, "format_valid_rate")),
    ("format-valid replies (agent)", _rate_of(AGENT, "reply_format_valid_rate")),
    ("questions with tool errors", _rate_of(AGENT, "tool_error_rate")),
    ("answer line written (direct, rag)", _rate_of(BASELINES, "format_valid_rate")),
    ("searches that failed (rag)", _rate_of(RAG, "tool_error_rate")),
    ("runs that crashed", lambda s: str(s["n_errors"])),
    ("mean steps", lambda s: _num(s, "mean_steps", ".2f")),
    ("tokens / question (prompt / completion)", _tokens),
    ("seconds / question", lambda s: _num(s, "mean_seconds", ".2f")),
    ("wall seconds", lambda s: _num(s, "wall_seconds", ".1f")),
]


def _cells(summary: dict) -> list[str]:
    cells = []
    for _, cell in ROWS:
        try:
            cells.append(cell(summary))
        except (KeyError, TypeError):  # a summary from an older format may lack the row
            cells.append("?")
    return cells


def rows(columns: Sequence[tuple[str, dict]], notes: Sequence[tuple[str, Sequence[str]]] = ()) -> list[list[str]]:
    """The table as cells: a header row (labels), then one row per figure, a row per suite "needs" group
    after success, and `notes` (extra rows: a label and a cell per column, such as the settings)."""
    body = [[label, *cells] for label, cells in zip([r[0] for r in ROWS], zip(*[_cells(s) for _, s in columns]))]
    needs = sorted({need for _, s in columns for need in (s.get("by_need") or {})})
    for need in reversed(needs):
        row = [f"  questions that need {need}"]
        for _, s in columns:
            group = (s.get("by_need") or {}).get(need)
            row.append(f"{group['n_success']}/{group['n']}" if group else "-")
        body.insert(2, row)  # under "success"
    return [["", *[label for label, _ in columns]], *body, *[[label, *cells] for label, cells in notes]]


def side_by_side(columns: Sequence[tuple[str, dict]], notes: Sequence[tuple[str, Sequence[str]]] = ()) -> str:
    """`rows` as aligned text: one column per (label, summary)."""
    table = rows(columns, notes)
    widths = [max(len(str(r[i])) for r in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in table)


def only_right(row: dict) -> str | None:
    """The label of the one column that got a disagreement's question right, when only one did (of three or
    more columns: with two, each flip is right in one only and the line says which)."""
    right = [a["label"] for a in row["answers"] if a["success"]]
    return right[0] if len(right) == 1 and len(row["answers"]) > 2 else None


def format_disagreements(rows: Sequence[dict], limit: int | None = None) -> str:
    """One line per question that is right in some columns only, with each column's mark and answer; with
    three or more columns, first how many each column alone got right, and the line of such a question ends
    with `only <column>`."""
    if not rows:
        return "no question is right in one column and wrong in another"
    lines = [f"right in some columns only ({len(rows)}):"]
    alone = [only_right(row) for row in rows]
    if len(rows[0]["answers"]) > 2:
        labels = [a["label"] for a in rows[0]["answers"]]
        lines.insert(0, "right in one column only: " + ", ".join(f"{label} {alone.count(label)}" for label in labels))
    for row, label in list(zip(rows, alone))[:limit]:
        answers = "   ".join(
            f"{a['label']}: {'ok' if a['success'] else 'FAIL'} {_answer(a['prediction'])}" for a in row["answers"]
        )
        lines.append(f"  {row['id']}  {answers}" + (f"   (only {label})" if label else ""))
    if limit is not None and len(rows) > limit:
        lines.append(f"  ... and {len(rows) - limit} more (see the HTML page)")
    return "\n".join(lines)


def shown_answer(prediction: str | None, limit: int = ANSWER_CLIP) -> str:
    """An answer on one line, cut to its last `limit` characters: a reply taken whole ends with its result."""
    if prediction is None:
        return "(none)"
    text = escape_controls(" ".join(str(prediction).split()))  # a model's text: nothing in it drives the terminal
    return text if len(text) <= limit else "…" + text[len(text) - limit + 1 :]


def _answer(prediction: str | None) -> str:
    return "(none)" if prediction is None else f"'{shown_answer(prediction)}'"
