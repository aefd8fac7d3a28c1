"""Render table sections as text, Markdown, LaTeX, CSV or JSON.

Output is deterministic: the same sections always give the same bytes.

>>> from exactattn.tables import Section
>>> s = Section("demo", "Demo", ["a", "b"], [["1", "1/2"]], ["a note"])
>>> print(render([s], "markdown"))
### Demo
<BLANKLINE>
| a | b |
|---|---|
| 1 | 1/2 |
<BLANKLINE>
a note
<BLANKLINE>
>>> render([s], "yaml")
Traceback (most recent call last):
...
exactattn.errors.InputError: format must be one of text, markdown, latex, json, csv (got 'yaml')
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any, Sequence

from .errors import InputError

__all__ = ["FORMATS", "render"]

FORMATS = ("text", "markdown", "latex", "json", "csv")


def _text(sections) -> str:
    parts = []
    for s in sections:
        lines = [s.title, "=" * len(s.title)]
        if s.columns:
            grid = [s.columns] + s.rows
            widths = [max(len(r[c]) for r in grid) for c in range(len(s.columns))]

            def fmt(r):
                return "  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip()
            lines.append(fmt(s.columns))
            lines.append("  ".join("-" * w for w in widths))
            lines.extend(fmt(r) for r in s.rows)
        lines.extend(s.notes)
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def _md_cell(c: str) -> str:
    return c.replace("|", "\\|")


def _markdown(sections) -> str:
    parts = []
    for s in sections:
        lines = [f"### {s.title}", ""]
        if s.columns:
            lines.append("| " + " | ".join(_md_cell(c) for c in s.columns) + " |")
            lines.append("|" + "|".join("---" for _ in s.columns) + "|")
            lines.extend("| " + " | ".join(_md_cell(c) for c in r) + " |" for r in s.rows)
        if s.notes:
            lines.append("")
            lines.extend(s.notes)
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                  "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                  "^": r"\textasciicircum{}", "×": r"$\times$"}


def _tex(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def _latex(sections) -> str:
    parts = []
    for s in sections:
        lines = [f"\\paragraph{{{_tex(s.title)}}}"]
        if s.columns:
            lines.append("\\begin{tabular}{" + "l" * len(s.columns) + "}")
            lines.append(" & ".join(_tex(c) for c in s.columns) + r" \\ \hline")
            lines.extend(" & ".join(_tex(c) for c in r) + r" \\" for r in s.rows)
            lines.append("\\end{tabular}")
        lines.extend(_tex(n) + r"\par" for n in s.notes)
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def _csv(sections) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for k, s in enumerate(sections):
        if k:
            buf.write("\n")
        if s.columns:
            w.writerow(["table"] + s.columns)
            for r in s.rows:
                w.writerow([s.name] + r)
        for n in s.notes:
            w.writerow([s.name, "note", n])
    return buf.getvalue()


def _json(sections, meta: dict[str, Any] | None) -> str:
    doc = dict(meta or {})
    doc["tables"] = [{"name": s.name, "title": s.title, "columns": s.columns,
                      "rows": s.rows, "notes": s.notes, "data": s.data} for s in sections]
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def render(sections: Sequence, fmt: str = "text", meta: dict[str, Any] | None = None) -> str:
    """Render ``sections`` in ``fmt`` (text, markdown, latex, json, csv).

    ``meta`` (JSON only) adds top-level fields such as the example's name.
    """
    if fmt not in FORMATS:
        raise InputError(f"format must be one of {', '.join(FORMATS)} (got {fmt!r})")
    if fmt == "json":
        return _json(sections, meta)
    return {"text": _text, "markdown": _markdown, "latex": _latex, "csv": _csv}[fmt](sections)
