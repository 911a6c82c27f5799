"""The comparison as pictures: a PNG (matplotlib, the optional `charts` extra) and an HTML page that needs
nothing (its bars are inline SVG) with the same figures, the summary table, and every question with each
column's answer and, one click away, its whole trace."""

from __future__ import annotations

import html
import json
from pathlib import Path

from .table import AGENT, DIRECT, RAG, only_right, rows, shown_answer

COLOURS = {AGENT: "#1f77b4", DIRECT: "#ff7f0e", RAG: "#2ca02c"}  # one colour per mode, in both pictures
INSTALL_HINT = "pip install 'tinyagent[charts]'"
SVG_BAR_WIDTH = 360  # pixels of the longest bar on the page
PAGE_ANSWER_CLIP = 80  # characters of an answer in a question's cell (its trace has all of it)


def figures(data: dict) -> list[dict]:
    """The charted figures: {"title", "unit", "bars": [(label, mode, value or None)]}."""

    def bars(key: str, scale: float = 1, mode: str | None = None) -> list:
        return [
            (
                c["label"],
                c["mode"],
                None if c["summary"].get(key) is None or (mode and c["mode"] != mode) else c["summary"][key] * scale,
            )
            for c in data["columns"]
        ]

    return [
        {"title": "right answers", "unit": "%", "bars": bars("success_rate", 100)},
        {"title": "format-valid questions (agent)", "unit": "%", "bars": bars("format_valid_rate", 100, AGENT)},
        {"title": "completion tokens per question", "unit": "", "bars": bars("mean_completion_tokens")},
        {"title": "seconds per question", "unit": "s", "bars": bars("mean_seconds")},
    ]


def write_png(path: Path, data: dict) -> bool:
    """The figures as one PNG; False (nothing written) when matplotlib is not installed."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return False
    panels = figures(data)
    n = len(data["columns"])
    figure = Figure(figsize=(11, 2.2 + 0.9 * n), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    for axes, panel in zip(figure.subplots(2, 2).flat, panels):
        labels = [b[0] for b in panel["bars"]][::-1]
        values = [b[2] or 0 for b in panel["bars"]][::-1]
        axes.barh(labels, values, color=[COLOURS.get(b[1], "#777777") for b in panel["bars"]][::-1])
        for y, bar in enumerate(panel["bars"][::-1]):
            axes.text(bar[2] or 0, y, f" {_value(bar[2], panel['unit'])}", va="center", fontsize=8)
        axes.set_title(panel["title"], fontsize=10)
        axes.tick_params(labelsize=8)
        if panel["unit"] == "%":
            axes.set_xlim(0, 105)
        else:
            axes.set_xlim(0, max(values + [1]) * 1.2)
    figure.savefig(path)
    return True


def _value(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:.0f}{unit}" if unit == "%" or value >= 10 else f"{value:.1f}{unit}"


def _svg(panel: dict) -> str:
    """One figure as an inline SVG bar chart."""
    top = max([b[2] or 0 for b in panel["bars"]] + [100 if panel["unit"] == "%" else 1])
    bars = []
    for i, (label, mode, value) in enumerate(panel["bars"]):
        y, width = 22 * i, round(SVG_BAR_WIDTH * (value or 0) / top)
        bars.append(
            f'<text x="0" y="{y + 15}">{html.escape(label)}</text>'
            f'<rect x="240" y="{y + 3}" width="{width}" height="16" fill="{COLOURS.get(mode, "#777")}"/>'
            f'<text x="{246 + width}" y="{y + 15}">{_value(value, panel["unit"])}</text>'
        )
    height = 22 * len(panel["bars"]) + 4
    return (
        f'<figure><figcaption>{html.escape(panel["title"])}</figcaption><svg width="{280 + SVG_BAR_WIDTH + 60}" '
        f'height="{height}" font-size="12" font-family="sans-serif">{"".join(bars)}</svg></figure>'
    )


def _trace(record: dict) -> str:
    """A record's run, step by step, as preformatted text."""
    trace = record.get("trace") or {}
    parts = []
    for step in trace.get("steps") or []:
        head = f"[step {step.get('index', 0) + 1}: {step.get('kind')}]" + (
            f" error: {step['error']}" if step.get("error") else ""
        )
        parts.append(head + "\n" + (step.get("text") or ""))
        if step.get("observation"):
            parts.append("Observation: " + step["observation"])
    if record.get("error"):
        parts.append(f"run error: {record['error']}")
    return "\n\n".join(parts) or "(no trace recorded)"


def _cell(record: dict | None) -> str:
    if record is None:
        return "<td>-</td>"
    mark = "ok" if record["success"] else "FAIL"
    answer = html.escape(shown_answer(record.get("prediction") or "", PAGE_ANSWER_CLIP))
    return (
        f'<td class="{mark.lower()}"><details><summary>{mark} {answer}</summary>'
        f"<pre>{html.escape(_trace(record))}</pre></details></td>"
    )


def question_rows(data: dict, runs: dict) -> str:
    """Every question (the first column's order, then any others), a cell per column."""
    cols = [(c, {r["id"]: r for r in runs[c["folder"]].records.get(c["mode"], [])}) for c in data["columns"]]
    order: dict[str, str] = {}
    for _, found in cols:
        for qid, record in found.items():
            order.setdefault(qid, record.get("question", ""))
    flips = {f["id"]: only_right(f) for f in data["flips"]}
    lines = []
    for qid, question in order.items():
        cells = "".join(_cell(found.get(qid)) for _, found in cols)
        only = f'<br><small>only {html.escape(flips[qid])}</small>' if flips.get(qid) else ""
        lines.append(
            f'<tr class="{"flip" if qid in flips else ""}"><th title="{html.escape(question)}">'
            f"{html.escape(qid)}{only}</th>{cells}</tr>"
        )
    return "\n".join(lines)


STYLE = """body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top;text-align:left;font-size:13px}
td.ok summary{color:#176c1a}td.fail summary{color:#a11}tr.flip th{background:#fff3c4}
pre{white-space:pre-wrap;max-width:600px;font-size:12px}figure{display:inline-block;margin:0 2em 1em 0}
figcaption{font-weight:bold;margin-bottom:4px}"""


def write_html(path: Path, data: dict, runs: dict) -> None:
    """The page: figures, the summary table, then every question (rows that flip are highlighted)."""
    header, *body = rows(
        [(c["label"], c["summary"]) for c in data["columns"]], [("settings", [c["settings"] for c in data["columns"]])]
    )
    head = "".join(f"<th>{html.escape(label)}</th>" for label in header[1:])
    summary = "".join(
        "<tr><th>"
        + html.escape(row[0].strip())
        + "</th>"
        + "".join(f"<td>{html.escape(cell)}</td>" for cell in row[1:])
        + "</tr>"
        for row in body
    )
    alone = [only_right(f) for f in data["flips"]]
    counts = "; ".join(f"{html.escape(c['label'])} {alone.count(c['label'])}" for c in data["columns"])
    only = f" Right in one column only: {counts}." if len(data["columns"]) > 2 else ""
    provenance = "".join(
        f"<h3>{html.escape(c['label'])}</h3><pre>{html.escape(json.dumps(c['run'], indent=1))}</pre>"
        for c in data["columns"]
    )
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>TinyAgent eval comparison</title>
<style>{STYLE}</style></head><body><h1>Evaluation comparison</h1>
{"".join(_svg(p) for p in figures(data))}
<h2>Summary</h2><table><tr><th></th>{head}</tr>{summary}</table>
<h2>Questions</h2><p>{len(data["flips"])} questions are right in some columns only (highlighted).{only} Click an
answer for its whole run.</p><table><tr><th>question</th>{head}</tr>
{question_rows(data, runs)}</table>
<h2>How each run was made</h2><details><summary>settings</summary>{provenance}</details></body></html>
"""
    path.write_text(page, encoding="utf-8")


def write_all(out: Path, data: dict, runs: dict) -> list[str]:
    """Write compare.html and compare.png into `out`; the lines saying what was written."""
    write_html(out / "compare.html", data, runs)
    lines = [f"page: {out / 'compare.html'}"]
    if write_png(out / "compare.png", data):
        lines.append(f"chart: {out / 'compare.png'}")
    else:
        lines.append(f"chart: not drawn (matplotlib is not installed: {INSTALL_HINT}); the page has the figures")
    return lines
