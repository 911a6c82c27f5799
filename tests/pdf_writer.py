"""A PDF written by hand, for tests and the walkthrough folder: pages of ASCII text lines in Helvetica, with a
real text layer (what pypdf reads). `python tests/pdf_writer.py OUT.pdf` writes the walkthrough's manual."""

from __future__ import annotations

import sys
from pathlib import Path


def _escape(line: str) -> str:
    return line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def pdf_bytes(pages: list[list[str]], title: str | None = None) -> bytes:
    """A PDF of `pages`, each a list of lines (a blank line is a paragraph break)."""
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]
    kids = []
    for lines in pages:
        body = "BT /F1 11 Tf 14 TL 72 760 Td " + " ".join(f"({_escape(line)}) Tj T*" for line in lines) + " ET"
        stream = body.encode("latin-1")
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{body}\nendstream")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {len(objects)} 0 R "
            "/Resources << /Font << /F1 3 0 R >> >> >>"
        )
        kids.append(f"{len(objects)} 0 R")
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>"
    info = None
    if title:
        objects.append(f"<< /Title ({_escape(title)}) >>")
        info = len(objects)
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    trailer = f"<< /Size {len(objects) + 1} /Root 1 0 R" + (f" /Info {info} 0 R" if info else "") + " >>"
    out += f"trailer\n{trailer}\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def write_pdf(path: str | Path, pages: list[list[str]], title: str | None = None) -> Path:
    path = Path(path)
    path.write_bytes(pdf_bytes(pages, title))
    return path


MANUAL = [  # the walkthrough's examples/docs/kettle-manual.pdf
    [
        "Aurora K2 Electric Kettle - User Manual",
        "",
        "Thank you for choosing the Aurora K2. This manual covers safe use,",
        "cleaning and the error codes shown on the base display.",
        "",
        "Capacity: 1.7 litres. Power: 2200 watts. Keep-warm: 30 minutes at 80 C.",
    ],
    [
        "Descaling",
        "",
        "Descale the kettle every four weeks in hard-water areas.",
        "Fill it to the 1 litre mark with equal parts white vinegar and water,",
        "boil once, leave it for 20 minutes, then rinse three times with clean water.",
    ],
    [
        "Error codes",
        "",
        "E1: the kettle was switched on empty. Let it cool for 10 minutes and refill it.",
        "E2: the base cannot sense the kettle. Lift it and set it down again.",
        "E3: the temperature sensor failed. Contact Aurora support at support@aurora.example.",
    ],
]

if __name__ == "__main__":
    write_pdf(sys.argv[1], MANUAL, title="Aurora K2 Electric Kettle - User Manual")
