"""Tables as text, Markdown, LaTeX, CSV or JSON: the one :class:`Section` type and its writers.

Every table exactattn prints (the pencil-check modes, the sweeps, the divisor
experiment, the cost and verify reports) is a list of :class:`Section`: a
title, header cells, rows of string cells, notes and exact ``data``.
:func:`render` writes them in one of :data:`FORMATS`.

A cell is a ``str``; a :class:`Cell` is a ``str`` that also carries a second
text for readers.  Machine formats (json, csv) print the cell itself
(``0.0000``, the decimal every cell of its column has); text, Markdown and
LaTeX print the reader's text, which marks an exact value as exact (``masked``
for a key the query does not see, ``1/2 = 0.5`` for a share that is exactly
1/2).  LaTeX writes a number or closed form as math (:func:`latex_cell`:
``$\\frac{1}{2} = 0.5$``), so a table compiles in a plain ``article``.

Output is deterministic: the same sections always give the same bytes.

Rows and data may be lazy (:class:`~exactattn.present.stream.LazyRows`): :func:`write`
streams them to a file row by row, so a table of n x n cells never sits in
memory as text.  JSON is written exactly as ``json.dumps(doc, indent=2)``
would write it, except that with ``wrap`` a list of more than ``wrap`` plain
values goes on one line (the same JSON, n^2 numbers on n lines).  ``jsonl``
(JSON Lines) writes one object per line for tools: the meta and the table
names, then per table its header, each row, and each data item.

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
exactattn.errors.InputError: format must be one of text, markdown, latex, json, csv, jsonl (got 'yaml')
"""

from __future__ import annotations

import functools
import html
import io
import json
import math
import re
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Sequence

from ..options import check_choice
from .stream import LazyRows, progress

__all__ = ["Section", "render"]

FORMATS = ("text", "markdown", "latex", "json", "csv")
#: every format :func:`write` knows: FORMATS and JSON Lines
ALL_FORMATS = FORMATS + ("jsonl",)
#: a lazy table longer than this gets a progress bar (when stderr is a terminal)
_PROGRESS_ROWS = 64


@dataclass
class Section:
    """One titled table: ``columns`` (header cells), ``rows`` (string cells), notes, data.

    ``name`` identifies the table in CSV and JSON (``scores/shares``);
    ``data`` holds exact values for JSON (strings, numbers, lists, dicts).
    ``rows`` and the lists in ``data`` may be lazy sequences, read once by
    the writers.
    """
    name: str
    title: str
    columns: list[str]
    rows: Sequence[list[str]]
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


class Vector(Cell):
    """A vector cell ``(0, 3, 1/2, ... +5 more)``: the machine text, the reader text, and the
    reader texts of the entries it shows (``parts``) with how many it left out (``more``),
    so a text table may show fewer (:meth:`shown`).

    >>> v = Vector("(1, 2, 3)", "(1, 2, 3)", ["1", "2", "3"], 0)
    >>> v.shown(2)
    '(1, 2, ... +1 more)'
    """

    def __new__(cls, machine: str, reader: str, parts: list[str], more: int,
                short: list[str] | None = None):
        self = super().__new__(cls, machine, reader)
        self.parts, self.more = list(parts), more
        #: the entries with long exact texts in short certified form (``~2.265e-1``)
        self.short = list(parts) if short is None else list(short)
        return self

    def shown(self, k: int, short: bool = False) -> str:
        """The reader text with at most ``k`` entries (``short``: long ones in short form)."""
        parts = self.short if short else self.parts
        if k >= len(parts) and not short:
            return self.reader
        left = max(len(parts) - k, 0) + self.more
        return "(" + ", ".join(parts[:k] + ([f"... +{left} more"] if left else [])) + ")"


#: a lone surrogate (UTF-8 cannot hold it): written as its JSON escape
_SURROGATE = re.compile("[\ud800-\udfff]")


def json_text(value, **options) -> str:
    r"""``json.dumps(value, ensure_ascii=False, **options)`` with each lone surrogate (a spec's
    text may hold one; UTF-8 cannot) written as its escape ``\udXXX``, so the JSON stays
    valid and reads back to the same text.

    >>> json_text({"name": "a\ud800b"})
    '{"name": "a\\ud800b"}'
    """
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}",
                          json.dumps(value, ensure_ascii=False, **options))


def reader_text(cell: str) -> str:
    """A cell's text for readers: its :class:`Cell` ``reader``, or the cell itself."""
    return getattr(cell, "reader", cell)


def plural(count: int, word: str, words: str | None = None) -> str:
    """``1 addition``, ``12 additions``: a count with its noun in the right number.

    >>> plural(1, "addition"), plural(0, "addition"), plural(2, "query", "queries")
    ('1 addition', '0 additions', '2 queries')
    """
    return f"{count} {word if count == 1 else (words or word + 's')}"


def number_cell(x, spec: str = ".3g") -> str:
    """A measured number's cell: ``-`` for None (not measured), ``inf`` for an infinite float.

    >>> number_cell(None), number_cell(float("inf"), "d"), number_cell(7, "d"), number_cell(0.012)
    ('-', 'inf', '7', '0.012')
    """
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return format(x, spec)


def printable(text: str) -> str:
    """Text for a cell or a label: unprintable characters (newlines, tabs, controls) escaped.

    >>> printable("a\\u0001 b\\n")
    'a\\\\x01 b\\\\n'
    """
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def _rows(s: Section):
    """The rows of ``s``, with a progress bar for a long lazy table."""
    rows = s.rows
    if isinstance(rows, LazyRows) and len(rows) > _PROGRESS_ROWS:
        return progress(rows, len(rows), s.name)
    return rows


#: text lines are kept within this many characters unless ``width`` says otherwise (0: no limit)
TEXT_WIDTH = 160
_WIDTH = [TEXT_WIDTH]


def text_width(width: int | None) -> None:
    """Set the default width of text tables (the CLI's ``--width``; None: :data:`TEXT_WIDTH`)."""
    _WIDTH[0] = TEXT_WIDTH if width is None else width


def _text(sections, out: IO[str], **_) -> None:
    """Plain text tables.  Within :func:`text_width` characters a line (:data:`TEXT_WIDTH` by
    default; 0 for no limit), as numpy's print options do: vectors show fewer entries, then
    the middle columns give way to one ``...`` column, notes wrap; a table that was cut says
    so.  Markdown, CSV and JSON keep every column."""
    limit = _WIDTH[0]
    for k, s in enumerate(sections):
        if k:
            out.write("\n\n")
        lines = [s.title, "=" * len(s.title)]
        notes = [reader_text(n) for n in s.notes]
        if s.columns:
            grid, cut = _fitted([s.columns] + list(_rows(s)), limit)
            widths = [max(len(r[c]) for r in grid) for c in range(len(grid[0]))]

            def fmt(r):
                return "  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip()
            lines += [fmt(grid[0]), "  ".join("-" * w for w in widths)] + [fmt(r) for r in grid[1:]]
            if cut:
                notes.append(f"{cut} to fit {limit} characters a line: --width 0 shows "
                             "everything, --format csv or json every value")
        for n in notes:
            lines.extend(_wrapped(n, limit))
        out.write("\n".join(lines))
    out.write("\n")


def _wrapped(note: str, limit: int) -> list[str]:
    """A note within ``limit`` characters a line (continuations indented; a long number is
    never split)."""
    if not limit or len(note) <= limit:
        return [note]
    import textwrap
    return textwrap.wrap(note, limit, subsequent_indent="  ", break_long_words=False,
                         break_on_hyphens=False) or [note]


#: a cell ``exact = decimal`` or ``exact ~ decimal`` (the decimal has no space)
_EXACT_AND_DECIMAL = re.compile(r"^(\S+) ([=~]) (-?[0-9.]+)$")


def _line_width(grid: list[list[str]]) -> int:
    return sum(max(len(r[c]) for r in grid) for c in range(len(grid[0]))) + \
        2 * (len(grid[0]) - 1)


def _fitted(cells: list[list], limit: int) -> tuple[list[list[str]], str]:
    """The grid of reader texts within ``limit`` characters a line, and what was cut ('' if
    nothing): first vector cells show fewer entries (down to 2), then middle columns are
    replaced by one ``...`` column (the first and last columns stay)."""
    grid = [[reader_text(c) for c in r] for r in cells]
    if not limit or _line_width(grid) <= limit:
        return grid, ""
    cut = []
    vectors = [c for c in range(len(grid[0])) if any(isinstance(r[c], Vector) for r in cells[1:])]
    if vectors:
        shown = max(len(r[c].parts) for r in cells[1:] for c in vectors
                    if isinstance(r[c], Vector))
        short = False

        def redo():
            for r, texts in zip(cells[1:], grid[1:]):
                for c in vectors:
                    if isinstance(r[c], Vector):
                        texts[c] = r[c].shown(shown, short)
        for least in (2, 1):        # down to 2 entries, then short forms, then down to 1
            while shown > least and _line_width(grid) > limit:
                shown -= 1
                redo()
            if not short and _line_width(grid) > limit:   # long exact entries in short form
                short = True
                redo()
        cut.append(f"vectors show their first {plural(shown, 'entry', 'entries')}"
                   + (" (~: long exact values rounded to 4 significant digits)" if short else ""))
    long = max(limit // 4, 24)
    if _line_width(grid) > limit:           # a long exact value with its decimal: the decimal
        hits = 0
        for texts in grid[1:]:
            for c, t in enumerate(texts):
                m = _EXACT_AND_DECIMAL.match(t) if len(t) > long else None
                if m:
                    texts[c] = ("~" if m.group(2) == "~" else "") + m.group(3)
                    hits += 1
        if hits:
            cut.append(f"{plural(hits, 'long exact value')} shown by {'its' if hits == 1 else 'their'} "
                       "decimal (~: correctly rounded)")
    ncols = len(grid[0])
    if _line_width(grid) > limit and ncols > 3:
        keep_left, keep_right = 1, 1            # column 0 (the label) always stays
        def trial(a, b):
            return [r[:a + 1] + ["..."] + r[ncols - b:] for r in grid]
        best = trial(keep_left, keep_right)
        while keep_left + keep_right + 1 < ncols:
            a, b = (keep_left + 1, keep_right) if keep_left <= keep_right else \
                (keep_left, keep_right + 1)
            t = trial(a, b)
            if _line_width(t) > limit:
                break
            keep_left, keep_right, best = a, b, t
        dropped = ncols - keep_left - keep_right - 1
        grid = best
        cut.append(f"{dropped} of {ncols - 1} columns left out (shown as ...)")
    return grid, "; ".join(cut)


@dataclass(frozen=True)
class Printer:
    """How one format writes a section, piece by piece (as sympy's ``Printer`` has a method
    per kind of node): its title, its header, each row, what closes the rows, each note.

    One walk (:meth:`write`) reads every section through them; a section without columns
    has no header, rows or close unless ``every``.
    """
    title: Callable[[Section], str]
    header: Callable[[Section], str]
    row: Callable[[Section, list], str]
    note: Callable[[Section, str], str]
    close: str = ""          # after the rows
    notes: str = ""          # before the notes, when there are any
    between: str = "\n\n"   # between two sections
    start: str = ""
    end: str = "\n"
    every: bool = False

    def write(self, sections, out: IO[str], **_) -> None:
        out.write(self.start)
        for k, s in enumerate(sections):
            out.write((self.between if k else "") + self.title(s))
            if s.columns or self.every:
                out.write(self.header(s))
                out.writelines(self.row(s, r) for r in _rows(s))
                out.write(self.close)
            out.write(self.notes if s.notes else "")
            out.writelines(self.note(s, n) for n in s.notes)
        out.write(self.end)


def _md_row(cells) -> str:
    return "\n| " + " | ".join(reader_text(c).replace("|", "\\|") for c in cells) + " |"


_MARKDOWN = Printer(lambda s: f"### {s.title}\n",
                    lambda s: _md_row(s.columns) + "\n|" + "|".join("---" for _ in s.columns) + "|",
                    lambda s, r: _md_row(r), lambda s, n: "\n" + reader_text(n), notes="\n")


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                  "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
                  "^": r"\textasciicircum{}", "×": r"$\times$"}


def _tex(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


#: the names a math cell may hold; any other word (``masked``, ``key``) keeps a cell text
_MATH_NAMES = ("sqrt", "tanh", "exp", "log", "cos", "sin", "inf", "d_k", "d_v", "pi", "t")
#: a closed form sympy may read: ASCII names, digits, operators (no decimal point: a
#: decimal prints verbatim, never re-rounded)
_FORM = re.compile(r"[A-Za-z0-9_()/*^+\- ]{1,400}")
_NAME = re.compile(r"[A-Za-z_]\w*")
_NUMBER = re.compile(r"(-?\d+(?:\.\d+)?)(?:e([+-]?\d+))?")
_FRACTION = re.compile(r"(-?)(\d+)/(\d+)")
_MATH_WORD = rf"(?:{'|'.join(sorted(_MATH_NAMES, key=len, reverse=True))}|[0-9.()/*^+=~,-])+"
#: a run of words of a note that may be math: ``sqrt(d_k) = sqrt(4) = 2``
_MATH_RUN = re.compile(rf"(?<!\S){_MATH_WORD}(?: {_MATH_WORD})*(?=[;:]?(?:\s|$))")


def _folded(product):
    r"""A product with its integer factors and integer reciprocals (what ``25/8`` reads as,
    unevaluated) folded into one rational, so sympy prints ``\frac{1}{16}``, not
    ``1 \cdot \frac{1}{16}``."""
    import sympy
    num, den, rest = 1, 1, []
    for a in product.args:
        if a.is_Integer:
            num *= int(a)
        elif a.is_Pow and a.base.is_Integer and a.exp == -1:
            den *= int(a.base)
        else:
            rest.append(a)
    q = sympy.Rational(num, den)
    if not rest:
        return q
    if q == 1 and len(rest) == 1:
        return rest[0]
    return sympy.Mul(*([] if q == 1 else [q]), *rest)


@functools.lru_cache(maxsize=4096)
def _form(text: str) -> str | None:
    """The closed form ``text`` as sympy's LaTeX (the printed form kept), or None."""
    if not _FORM.fullmatch(text) or not set(_NAME.findall(text)) <= set(_MATH_NAMES) or \
            re.search(r"(?<!\d)0\d", text):
        return None
    import sympy
    from sympy.parsing.sympy_parser import parse_expr
    try:
        expr = parse_expr(text.replace("^", "**"), evaluate=False, local_dict={
            "inf": sympy.oo, "t": sympy.Symbol("t"), "d_k": sympy.Symbol("d_k"),
            "d_v": sympy.Symbol("d_v")})
        if not isinstance(expr, sympy.Expr):
            return None
        with sympy.evaluate(False):
            expr = expr.replace(lambda e: e.is_Mul, _folded)
        return sympy.latex(expr, order="none")
    except Exception:       # anything sympy cannot read stays text
        return None


def _math(text: str, entry: bool = False) -> str | None:
    """The math-mode LaTeX of a cell's text (no ``$``), or None when it is not math.

    ``A = B`` and ``A ~ B`` are read part by part; decimals print verbatim; a vector's
    fractions print as typed (``(0, 1/2)``: an ``entry``), any other closed form via sympy.
    """
    parts = re.split(r" ([=~]) ", text)
    if len(parts) > 1:
        out = [(r"\approx" if p == "~" else "=") if k % 2 else _math(p, entry)
               for k, p in enumerate(parts)]
        return None if None in out else " ".join(out)
    if text.startswith("~"):
        body = _math(text[1:], entry)
        return None if body is None else r"\approx " + body
    number = _NUMBER.fullmatch(text)
    if number:
        return number[1] if number[2] is None else \
            rf"{number[1]} \times 10^{{{int(number[2])}}}"
    if text[:1] + text[-1:] in ("()", "[]") and ", " in text:
        entries = [_math(p, True) for p in text[1:-1].split(", ")]
        return None if None in entries else text[0] + ", ".join(entries) + text[-1]
    fraction = _FRACTION.fullmatch(text)
    if fraction:        # what sympy prints for a fraction, without its parser (a big table)
        return text if entry else \
            ("- " if fraction[1] else "") + rf"\frac{{{fraction[2]}}}{{{fraction[3]}}}"
    return _form(text)


def latex_cell(cell: str) -> str:
    r"""A cell as LaTeX: its reader's text (:func:`reader_text`) as math when it is a number
    or a closed form, else as escaped text.

    Closed forms are printed by sympy (``sympy.latex``) from the text read unevaluated,
    so the printed form is kept; ``A = B`` and ``A ~ B`` are read part by part (``~``:
    ``\approx``); decimals keep their digits; ``X where t = Y`` is two spans.  Text that
    is not math (``masked``, ``0.5800 at key 1``) is escaped.  It never raises.

    >>> latex_cell("25/8 = 3.125"), latex_cell("-inf"), latex_cell(Cell("0.0000", "masked"))
    ('$\\frac{25}{8} = 3.125$', '$-\\infty$', 'masked')
    >>> latex_cell("sqrt(2)/4 ~ 0.3536"), latex_cell("(0, 3, 1/2, 0)"), latex_cell("d_k")
    ('$\\frac{\\sqrt{2}}{4} \\approx 0.3536$', '$(0, 3, 1/2, 0)$', '$d_{k}$')
    """
    text = reader_text(cell)
    math = None if text == "t" else _math(text)      # a lone t is a token's text
    if math is not None:
        return f"${math}$"
    if " where " in text:
        a, b = text.split(" where ", 1)
        if _math(a) is not None and _math(b) is not None:
            return f"${_math(a)}$ where ${_math(b)}$"
    return _tex(text)


def _note(text: str) -> str:
    r"""A note as LaTeX: each run of math words that needs math (a fraction or a function:
    ``sqrt(d_k) = sqrt(4) = 2``) as math, a lone ``~`` as ``$\approx$``, the rest escaped
    text."""
    out, last = [], 0
    for m in _MATH_RUN.finditer(text):
        run = re.fullmatch(r"(?:[=~+*] )*(.*?)[=~+*,;: ]*", m.group())
        start, body = m.start() + run.start(1), run.group(1)
        if m.group() == "~":            # the mark of a rounded value, named in prose
            start, body = m.start(), "~"
        math = r"\approx" if body == "~" else \
            _math(body) if re.search(r"/|[a-z]\(", body) else None
        if math is not None:
            out += [_tex(text[last:start]), f"${math}$"]
            last = start + len(body)
    return "".join(out) + _tex(text[last:])


def _latex_row(cells) -> str:
    return "\n" + " & ".join(latex_cell(c) for c in cells) + r" \\"


_LATEX = Printer(lambda s: f"\\paragraph{{{_tex(s.title)}}}",
                 lambda s: "\n\\begin{tabular}{" + "l" * len(s.columns) + "}" +
                 _latex_row(s.columns) + r" \hline", lambda s, r: _latex_row(r),
                 lambda s, n: "\n" + _note(reader_text(n)) + r"\par", close="\n\\end{tabular}")


def _csv_line(cells) -> str:
    import csv
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(cells)
    return buf.getvalue()


_CSV = Printer(lambda s: "", lambda s: _csv_line(["table"] + s.columns),
               lambda s, r: _csv_line([s.name] + [str.__str__(c) for c in r]),
               lambda s, n: _csv_line([s.name, "note", n]), between="\n", end="")
#: HTML tables (caption, header, rows as people read them, notes): a notebook's display
_HTML = Printer(lambda s: f"\n<table>\n<caption>{html.escape(str(s.title))}</caption>",
                lambda s: "\n<thead><tr>" + "".join(f"<th>{html.escape(str(c))}</th>"
                                                     for c in s.columns) + "</tr></thead>\n<tbody>",
                lambda s, r: "\n<tr>" + "".join(f"<td>{html.escape(str(reader_text(c)))}</td>"
                                                for c in r) + "</tr>",
                lambda s, n: f"\n<p><small>{html.escape(str(n))}</small></p>",
                close="\n</tbody>\n</table>", between="", start='<div class="exactattn">',
                end="\n</div>", every=True)


def tables_html(sections: Sequence[Section]) -> str:
    """Sections as HTML tables (caption, header, rows as people read them, notes).

    >>> print(tables_html([Section("t", "T", ["a"], [["1"]], ["n"])]))
    <div class="exactattn">
    <table>
    <caption>T</caption>
    <thead><tr><th>a</th></tr></thead>
    <tbody>
    <tr><td>1</td></tr>
    </tbody>
    </table>
    <p><small>n</small></p>
    </div>
    """
    buf = io.StringIO()
    _HTML.write(sections, buf)
    return buf.getvalue()


_SCALARS = {str, Cell, int, float, bool, type(None)}


def _dump(value, out: IO[str], level: int, wrap: int | None, tables: dict) -> None:
    """``value`` as ``json.dumps(value, indent=2)`` writes it at nesting ``level``, streamed.

    ``tables``: the sections by the ``id`` of their rows, read through :func:`_rows` (a
    progress bar).
    """
    if isinstance(value, dict):
        ends, items = "{}", value.items()
    elif isinstance(value, (list, tuple, LazyRows)) and not (
            wrap is not None and len(value) > wrap and not isinstance(value, LazyRows) and
            _SCALARS.issuperset(map(type, value))):      # a long list of plain values: one line
        rows = _rows(tables[id(value)]) if id(value) in tables else value
        ends, items = "[]", ((None, item) for item in rows)
    else:
        out.write(json_text(value))       # a Cell is its machine str
        return
    if not len(value):
        out.write(ends)
        return
    pad = "\n" + "  " * (level + 1)
    out.write(ends[0])
    for k, (key, item) in enumerate(items):
        out.write(("," if k else "") + pad + (json_text(key) + ": " if ends == "{}" else ""))
        _dump(item, out, level + 1, wrap, tables)
    out.write("\n" + "  " * level + ends[1])


def _json(sections, out: IO[str], meta: dict[str, Any] | None = None,
          wrap: int | None = None) -> None:
    head = json_text(dict(meta or {}, tables=None), indent=2)
    out.write(head[:head.rindex("null")])        # the meta as json.dumps writes it
    tables = [{"name": s.name, "title": s.title, "columns": s.columns, "rows": s.rows,
               "notes": s.notes, "data": s.data} for s in sections]
    _dump(tables, out, 1, wrap, {id(s.rows): s for s in sections})
    out.write("\n}\n")


def _jsonl(sections, out: IO[str], meta: dict[str, Any] | None = None, **_) -> None:
    def line(obj) -> None:      # a Cell is its machine str; lazy rows a list
        out.write(json_text(obj, default=list) + "\n")
    line(dict(meta or {}, tables=[s.name for s in sections]))
    for s in sections:
        line({"table": s.name, "title": s.title, "columns": s.columns, "notes": s.notes})
        for r in _rows(s):
            line({"table": s.name, "row": r})
        for key, value in s.data.items():
            if isinstance(value, (list, tuple, LazyRows)):
                for i, item in enumerate(value):
                    line({"table": s.name, "data": key, "index": i, "value": item})
            else:
                line({"table": s.name, "data": key, "value": value})


_WRITERS = {"text": _text, "markdown": _MARKDOWN.write, "latex": _LATEX.write,
            "csv": _CSV.write, "json": _json, "jsonl": _jsonl}


def write(sections: Sequence[Section], fmt: str, out: IO[str],
          meta: dict[str, Any] | None = None, *, wrap: int | None = None) -> None:
    """Write ``sections`` to ``out`` in ``fmt`` (text, markdown, latex, json, csv, jsonl),
    row by row.

    ``meta`` (JSON and JSON Lines) adds top-level fields such as the
    example's name; ``wrap`` (JSON) puts a list of more than ``wrap`` plain
    values on one line.

    Raises:
        InputError: an unknown format.
    """
    check_choice(fmt, "format", ALL_FORMATS)
    _WRITERS[fmt](sections, out, meta=meta, wrap=wrap)


def render(sections: Sequence[Section], fmt: str = "text",
           meta: dict[str, Any] | None = None, *, wrap: int | None = None) -> str:
    """Render ``sections`` in ``fmt`` (text, markdown, latex, json, csv, jsonl) as one string.

    ``meta`` (JSON only) adds top-level fields such as the example's name.

    Raises:
        InputError: an unknown format.
    """
    buf = io.StringIO()
    write(sections, fmt, buf, meta, wrap=wrap)
    return buf.getvalue()
