"""Tables as text, Markdown, LaTeX, CSV or JSON: the one :class:`Section` type and its writers.

Every table exactattn prints (the pencil-check modes, the sweeps, the divisor
experiment, the cost and verify reports) is a list of :class:`Section`: a
title, header cells, rows of string cells, notes and exact ``data``.
:func:`render` writes them in one of :data:`FORMATS`.

A cell is a ``str``; a :class:`Cell` is a ``str`` that also carries a second
text for readers.  Machine formats (json, csv, latex) print the cell itself
(``0.0000``, the decimal every cell of its column has); text and Markdown print
the reader's text, which marks an exact value as exact (``masked`` for a key
the query does not see, ``1/2 = 0.5`` for a share that is exactly 1/2).

Output is deterministic: the same sections always give the same bytes.

>>> s = Section("demo", "Demo", ["a", "b"], [["1", Cell("0.5000", "1/2 = 0.5")]], ["a note"])
>>> print(render([s], "markdown"))
### Demo
<BLANKLINE>
| a | b |
|---|---|
| 1 | 1/2 = 0.5 |
<BLANKLINE>
a note
<BLANKLINE>
>>> render([s], "csv").splitlines()[1]
'demo,1,0.5000'
>>> render([s], "yaml")
Traceback (most recent call last):
...
exactattn.errors.InputError: format must be one of text, markdown, latex, json, csv (got 'yaml')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from .errors import InputError

__all__ = ["FORMATS", "Cell", "Section", "plural", "printable", "render"]

FORMATS = ("text", "markdown", "latex", "json", "csv")


@dataclass
class Section:
    """One titled table: ``columns`` (header cells), ``rows`` (string cells), notes, data.

    ``name`` identifies the table in CSV and JSON (``scores/shares``);
    ``data`` holds exact values for JSON (strings, numbers, lists, dicts).
    """
    name: str
    title: str
    columns: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


class Cell(str):
    """A cell's text for machines (the ``str`` itself) with another for readers (``reader``).

    >>> c = Cell("0.0000", "masked")
    >>> c == "0.0000", c.reader
    (True, 'masked')
    """

    def __new__(cls, machine: str, reader: str):
        self = super().__new__(cls, machine)
        self.reader = reader
        return self


def _reader(cell: str) -> str:
    return getattr(cell, "reader", cell)


def plural(count: int, word: str, words: str | None = None) -> str:
    """``1 addition``, ``12 additions``: a count with its noun in the right number.

    >>> plural(1, "addition"), plural(0, "addition"), plural(2, "query", "queries")
    ('1 addition', '0 additions', '2 queries')
    """
    return f"{count} {word if count == 1 else (words or word + 's')}"


def printable(text: str) -> str:
    """Text for a cell or a label: unprintable characters (newlines, tabs, controls) escaped.

    >>> printable("a\\u0001 b\\n")
    'a\\\\x01 b\\\\n'
    """
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def _text(sections) -> str:
    parts = []
    for s in sections:
        lines = [s.title, "=" * len(s.title)]
        if s.columns:
            grid = [s.columns] + [[_reader(c) for c in r] for r in s.rows]
            widths = [max(len(r[c]) for r in grid) for c in range(len(s.columns))]

            def fmt(r):
                return "  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip()
            lines.append(fmt(grid[0]))
            lines.append("  ".join("-" * w for w in widths))
            lines.extend(fmt(r) for r in grid[1:])
        lines.extend(_reader(n) for n in s.notes)
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def _md_cell(c: str) -> str:
    return _reader(c).replace("|", "\\|")


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
            lines.extend(_reader(n) for n in s.notes)
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
    import csv
    import io
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for k, s in enumerate(sections):
        if k:
            buf.write("\n")
        if s.columns:
            w.writerow(["table"] + s.columns)
            for r in s.rows:
                w.writerow([s.name] + [str.__str__(c) for c in r])
        for n in s.notes:
            w.writerow([s.name, "note", n])
    return buf.getvalue()


def _json(sections, meta: dict[str, Any] | None) -> str:
    import json
    doc = dict(meta or {})
    doc["tables"] = [{"name": s.name, "title": s.title, "columns": s.columns,
                      "rows": [[str.__str__(c) for c in r] for r in s.rows],
                      "notes": s.notes, "data": s.data} for s in sections]
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def render(sections: Sequence[Section], fmt: str = "text",
           meta: dict[str, Any] | None = None) -> str:
    """Render ``sections`` in ``fmt`` (text, markdown, latex, json, csv).

    ``meta`` (JSON only) adds top-level fields such as the example's name.

    Raises:
        InputError: an unknown format.
    """
    if fmt not in FORMATS:
        raise InputError(f"format must be one of {', '.join(FORMATS)} (got {fmt!r})")
    if fmt == "json":
        return _json(sections, meta)
    return {"text": _text, "markdown": _markdown, "latex": _latex, "csv": _csv}[fmt](sections)
