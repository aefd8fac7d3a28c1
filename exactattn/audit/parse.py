"""Printed tables as published: Markdown, CSV, LaTeX ``tabular``, JSON or HTML, several per file.

Every reader returns :class:`Table` values: a title (the heading, caption or
line above the table), the header cells, the body rows as text.  Nothing is
converted here: :mod:`exactattn.audit.printed` reads the numbers in a cell.

* Markdown: pipe tables (a header row, a ``|---|:--:|`` delimiter row, body
  rows until a blank line); ``\\|`` and pipes inside code spans stay in the
  cell; tables inside fenced code blocks are not tables.  The title is the
  last line of text (a heading, a caption) between the previous table and
  this one.
* CSV: tables separated by blank lines, the first row of each the header.
  A first column named ``table`` (exactattn's own CSV) names the table, and
  its ``note`` rows are dropped.
* LaTeX: every ``tabular`` (``tabular*``, ``tabularx``, ``longtable``);
  rows end at ``\\\\``, cells at ``&``; rules (``\\hline``, ``\\midrule``)
  and comments are dropped, ``\\multicolumn{n}{..}{text}`` fills n cells.
  The title is the ``\\caption`` of the enclosing float, else the last
  ``\\paragraph``/``\\section``/line of text before it.
* JSON: a list of rows (lists, the first one the header, or objects keyed
  by column), a list of such tables, or ``{"tables": [{"title", "columns",
  "rows"}, ...]}`` (exactattn's own JSON).  Numbers are kept as the text they
  were written as (``0.5800`` keeps its four places).
* HTML: every ``<table>`` with a cell, read by the standard library's
  :mod:`html.parser` (a whole saved page is fine: the text of ``<script>``,
  ``<style>``, ``<template>``, ``<title>`` and ``<svg>`` is no table's).
  The header is the ``<thead>`` (else the leading rows of ``<th>`` cells,
  else the first row; of several header rows, each column's lowest
  non-empty cell); ``<tfoot>`` rows come last.  A cell is its text: inline
  tags dropped, ``<br>`` a space, ``<sub>``/``<sup>`` as ``_``/``^``,
  entities decoded (``&minus;`` is U+2212, read as a minus sign like any
  U+2212).  ``colspan``/``rowspan`` fill the cells they cover with empty
  text, and a spanning cell that holds a number is refused (which column it
  belongs to is ambiguous); a row of one cell across the whole table (a
  note, a group name) is left out.  Unclosed ``<td>``, ``<tr>`` and ``<table>``
  close where a browser closes them.  The title is the table's
  ``<caption>``, else its ``<figure>``'s ``<figcaption>``, else, as for
  Markdown, the last block of text (a heading ``<h1>``..``<h6>``, a ``<p>``)
  between the previous table and this one.

>>> t, = parse_tables("Weights\\n\\n| q | k1 | k2 |\\n|---|--:|---|\\n| 1 | 0.25 | 0.75 |\\n")
>>> t.title, t.header, t.rows
('Weights', ('q', 'k1', 'k2'), (('1', '0.25', '0.75'),))
>>> [t.rows for t in parse_tables('[["a", "b"], [1, 0.50]]', "json")]
[(('1', '0.50'),)]
>>> t, = parse_tables("<h3>Weights</h3><table><tr><th>q<th>k<sub>1</sub>"
...                   "<tr><td>1<td><b>&minus;0.25</b></table>")
>>> t.title, t.header, t.rows
('Weights', ('q', 'k_1'), (('1', '−0.25'),))
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from itertools import groupby
from pathlib import Path

from ..errors import InputError, shorten
from ..options import check_choice

TABLE_FORMATS = ("markdown", "csv", "latex", "json", "html")
#: the largest table file read, in bytes (16 MiB): a published table is a few kilobytes
MAX_BYTES = 16 * 2 ** 20
_SUFFIXES = {".md": "markdown", ".markdown": "markdown", ".csv": "csv", ".tex": "latex",
             ".json": "json", ".html": "html", ".htm": "html", ".xhtml": "html"}


@dataclass(frozen=True)
class Table:
    """One printed table: ``number`` (1-based, in file order), ``title``, ``header``, ``rows``.

    ``name`` is the table's own name when the file gives one (exactattn's CSV
    and JSON: ``scores/shares``); ``line`` is the line it starts on (0 when
    unknown).  Cells are the text as printed, stripped.
    """
    number: int
    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    name: str = ""
    line: int = 0


def detect_format(text: str) -> str:
    """The format of a table file's text: json, html, latex, markdown or csv.

    HTML: a text that starts with a tag and holds a ``<table``, or one that
    holds a ``<table`` and no Markdown table.

    >>> detect_format("| a |\\n|---|\\n| 1 |"), detect_format("a,b\\n1,2"), detect_format("[]")
    ('markdown', 'csv', 'json')
    >>> detect_format("<!DOCTYPE html><p>x</p><table><tr><td>1</td></tr></table>")
    'html'
    """
    head = text.lstrip("\ufeff \t\r\n")
    if head[:1] in "[{" and head:
        return "json"
    table = re.search(r"<table[\s>/]", text, re.IGNORECASE) is not None
    if table and head[:1] == "<":
        return "html"
    if re.search(r"\\begin\{(tabular|longtable)", text):
        return "latex"
    if any(_delimiter(line) for line in text.splitlines()):
        return "markdown"
    return "html" if table else "csv"


def read_tables(path: str | Path, fmt: str | None = None) -> list[Table]:
    """The tables of a file; ``fmt`` None: by suffix (.md, .csv, .tex, .json, .html, .htm),
    else by content.

    Raises:
        InputError: the file is missing, unreadable, not UTF-8, larger than
            :data:`MAX_BYTES`, holds no table, or is malformed.
    """
    from ..call.spec import read_user_text
    text = read_user_text(path, what="table file", kinds="a .md, .csv, .tex, .json or .html file",
                          limit=MAX_BYTES, size_fix="audit the page the tables are on",
                          error=InputError)
    p = Path(path)
    return parse_tables(text, fmt or _SUFFIXES.get(p.suffix.lower()),
                        where=shorten(str(p), 200))


def parse_tables(text: str, fmt: str | None = None, *, where: str = "table text") -> list[Table]:
    """The tables in ``text`` (``fmt``: markdown, csv, latex, json, html; None: detected).

    Raises:
        InputError: an unknown format, malformed JSON, an HTML cell spanning
            rows or columns that holds a number, or no table at all.
    """
    fmt = check_choice(detect_format(text) if fmt is None else fmt, "table format", TABLE_FORMATS)
    found = {"markdown": _markdown, "csv": _csv, "latex": _latex, "json": _json,
             "html": _html}[fmt](text.removeprefix("\ufeff"), where)
    tables = [Table(k + 1, *t) for k, t in enumerate(found)]
    if not tables:
        raise InputError(f"{where} must hold at least one {fmt} table (got none); "
                         + _NO_TABLE_FIX.get(fmt, "check the format"))
    return tables


_NO_TABLE_FIX = {"markdown": "a Markdown table needs a |---| line under its header",
                 "html": "an HTML table is a <table> with <tr> rows of <td> or <th> cells"}


def _square(header: list[str], rows: list[list[str]]) -> tuple[tuple, tuple]:
    """Header and rows stripped and padded with empty cells to the widest row's width."""
    width = max([len(header)] + [len(r) for r in rows])

    def pad(r):
        return tuple(c.strip() for c in r) + ("",) * (width - len(r))
    return pad(header), tuple(pad(r) for r in rows)


# --------------------------------------------------------------------------- Markdown
_DELIMITER = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")


def _delimiter(line: str) -> bool:
    """A pipe table's delimiter row: ``|---|:--:|`` (a pipe is needed, as in GFM)."""
    return "|" in line and bool(_DELIMITER.match(line))


#: one cell and the pipe after it: ``\\|`` and code spans (to the closing backtick, else to
#: the end of the line) are the cell's
_CELL = re.compile(r"((?:\\\||`[^`]*`?|[^|`])*)(\|?)")


def _cells(line: str) -> list[str]:
    """The cells of a pipe-table row: ``\\|`` and pipes in code spans stay in their cell."""
    s, pos, cells = line.strip(), 0, []
    while True:
        m = _CELL.match(s, pos)
        cells.append(m.group(1).replace("\\|", "|"))
        if not m.group(2):
            break
        pos = m.end()
    if s.startswith("|"):
        cells = cells[1:]
    if s.endswith("|") and not s.endswith("\\|") and cells:
        cells = cells[:-1]
    return cells


def _title(lines: list[str]) -> str:
    """The last line of text among ``lines`` (a heading's ``#`` and emphasis dropped)."""
    text = [ln.strip() for ln in lines if ln.strip()]
    pick = text[-1].lstrip("#").strip() if text else ""
    for mark in ("**", "__", "`"):
        pick = pick.replace(mark, "")
    return pick.strip().strip("*_").strip().rstrip(":").strip()


def _markdown(text: str, where: str) -> list[tuple]:
    lines = text.splitlines()
    found, since, k, fence = [], [], 0, None
    while k < len(lines):
        line = lines[k]
        marker = re.match(r"^\s*(```|~~~)", line)
        if fence is not None or marker:
            if marker and (fence is None or marker.group(1) == fence):
                fence = marker.group(1) if fence is None else None
            k += 1
            continue
        if "|" in line and k + 1 < len(lines) and _delimiter(lines[k + 1]) \
                and len(_cells(line)) == len(_cells(lines[k + 1])):
            j = k + 2
            while j < len(lines) and lines[j].strip() and "|" in lines[j]:
                j += 1
            found.append((_title(since), *_square(_cells(line), [_cells(r) for r in lines[k + 2:j]]),
                          "", k + 1))
            since, k = [], j
            continue
        since.append(line)
        k += 1
    return found


# --------------------------------------------------------------------------- CSV
def _csv(text: str, where: str) -> list[tuple]:
    found = []
    for blank, block in groupby(enumerate(text.splitlines(), 1), lambda k: not k[1].strip()):
        if blank:
            continue
        block = list(block)
        start = block[0][0]
        try:
            rows = list(csv.reader(io.StringIO("\n".join(line for _, line in block))))
        except csv.Error as e:
            raise InputError(f"{where}: line {start} must be CSV (got {e})") from None
        header, body, name = rows[0], rows[1:], ""
        if header and header[0].strip() == "table":      # exactattn's own CSV
            name = body[0][0].strip() if body and body[0] else ""
            header = header[1:]
            body = [r[1:] for r in body if not (len(r) == 3 and r[1].strip() == "note")]
        if header:
            found.append((name, *_square(header, body), name, start))
    return found


# --------------------------------------------------------------------------- LaTeX
_BEGIN = re.compile(r"\\begin\{(tabular\*?|tabularx|longtable|array)\}")
_RULES = re.compile(r"\\(hline|toprule|midrule|bottomrule|endhead|endfirsthead|endfoot|"
                    r"endlastfoot|addlinespace|noalign\{[^}]*\})|\\c(mid)?rule(\([^)]*\))?"
                    r"\{[^}]*\}")
_MULTI = re.compile(r"\\multicolumn\{(\d+)\}\{[^}]*\}\{((?:[^{}]|\{[^{}]*\})*)\}")


def _group(text: str, k: int) -> int:
    """The index after the brace group opening at ``text[k]`` (``{...}``, nested)."""
    depth = 0
    for j in range(k, len(text)):
        if text[j] == "{" and (j == 0 or text[j - 1] != "\\"):
            depth += 1
        elif text[j] == "}" and text[j - 1] != "\\":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def _latex_title(before: str, env: str) -> str:
    for command, where in (("caption", env), ("paragraph|(?:sub)*section", before)):
        found = re.findall(rf"\\(?:{command})\*?\{{((?:[^{{}}]|\{{[^{{}}]*\}})*)\}}", where)
        if found:
            return found[-1].strip()
    lines = [ln.strip() for ln in before.splitlines()
             if ln.strip() and not ln.strip().startswith("\\")]
    return lines[-1].rstrip("\\").strip() if lines else ""


def _split_cells(row: str) -> list[str]:
    out = []
    for c in re.split(r"(?<!\\)&", row):
        m = _MULTI.search(c)
        out += [m.group(2)] + [""] * (int(m.group(1)) - 1) if m else [c]
    return out


def _latex(text: str, where: str) -> list[tuple]:
    text = re.sub(r"(?<!\\)%.*", "", text)                        # comments
    found, pos = [], 0
    for m in _BEGIN.finditer(text):
        if m.start() < pos:
            continue
        env, k, line = m.group(1), m.end(), text.count("\n", 0, m.start()) + 1
        if env in ("tabular*", "tabularx"):
            k = _group(text, k)                                 # the width
        k = _group(text, k)                                     # the column spec
        end = text.find(f"\\end{{{env}}}", k)
        if end < 0:
            raise InputError(f"{where}: \\begin{{{env}}} on line {line} must have its "
                             f"\\end{{{env}}} (got none)")
        outer_start = text.rfind("\\begin{table", pos, m.start())
        outer_end = text.find("\\end{table", end)
        float_text = text[outer_start:outer_end] if outer_start >= 0 and outer_end >= 0 else ""
        title = _latex_title(text[pos:m.start()], float_text)
        body = _RULES.sub("", text[k:end])
        rows = [_split_cells(r.replace("\n", " ")) for r in re.split(r"\\\\(?:\[[^]]*\])?", body)]
        rows = [r for r in rows if any(c.strip() for c in r)]
        if rows:
            found.append((title, *_square(rows[0], rows[1:]), "", line))
        pos = end
    return found


# --------------------------------------------------------------------------- JSON
class _Number(str):
    """A JSON number, kept as the text it was written as."""


def _json_cell(v) -> str:
    if isinstance(v, list):          # a vector: (0, 1/2, 0.75), each entry as written
        return "(" + ", ".join(_json_cell(x) for x in v) + ")"
    return "" if v is None else str(v) if isinstance(v, str) else json.dumps(v)  # true, {...}


def _json_rows(rows, where: str, title: str = "", name: str = "", columns=None) -> tuple:
    if not isinstance(rows, list) or not rows:
        raise InputError(f"{where}: a table must be a non-empty list of rows (got "
                         f"{shorten(rows, quote=True)})")
    if all(isinstance(r, dict) for r in rows):
        header = list(columns or dict.fromkeys(k for r in rows for k in r))
        body = [[_json_cell(r.get(c)) for c in header] for r in rows]
    elif all(isinstance(r, list) for r in rows):
        header, body = (list(columns), rows) if columns is not None else \
            ([f"column {c + 1}" for c in range(len(rows[0]))], rows) \
            if any(isinstance(c, _Number) for c in rows[0]) else (rows[0], rows[1:])
        body = [[_json_cell(c) for c in r] for r in body]
    else:
        raise InputError(f"{where}: rows must be all lists or all objects (got "
                         f"{shorten(rows, quote=True)})")
    return (title, *_square([_json_cell(c) for c in header], body), name, 0)


def _json(text: str, where: str) -> list[tuple]:
    def constant(word: str):
        raise InputError(f"{where}: numbers must be finite (got {word})")
    try:
        doc = json.loads(text, parse_float=_Number, parse_int=_Number, parse_constant=constant)
    except json.JSONDecodeError as e:
        raise InputError(f"{where} must be valid JSON (got {e})") from None
    except RecursionError:
        raise InputError(f"{where} must be nested at most a few levels (got deeper)") from None
    if isinstance(doc, dict):
        tables = doc.get("tables")
        if not isinstance(tables, list):
            raise InputError(f"{where}: a JSON object must have a \"tables\" list (got keys "
                             f"{shorten(sorted(doc), quote=True)}); or give a list of rows")
        out = []
        for t in tables:
            if not isinstance(t, dict) or "rows" not in t:
                raise InputError(f"{where}: each of \"tables\" must be an object with \"rows\" "
                                 f"(got {shorten(t, quote=True)})")
            out.append(_json_rows(t["rows"], where, str(t.get("title", t.get("name", ""))),
                                  str(t.get("name", "")), t.get("columns")))
        return out
    if isinstance(doc, list) and doc and all(      # a list of tables, each a list of rows
            isinstance(t, list) and t and all(isinstance(r, (list, dict)) for r in t) for t in doc):
        return [_json_rows(t, where) for t in doc]
    return [_json_rows(doc, where)]


# --------------------------------------------------------------------------- HTML
#: elements whose text is no table's: scripts, styles, templates, the page's title, pictures
_HTML_HIDDEN = frozenset({"script", "style", "template", "title", "svg"})
#: elements that end a block of text outside a table (a title is the last block); in a
#: cell or a caption they separate words
_HTML_BLOCKS = frozenset({
    "address", "article", "aside", "blockquote", "body", "dd", "details", "dialog", "div", "dl",
    "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5",
    "h6", "header", "hgroup", "hr", "html", "legend", "li", "main", "nav", "ol", "p", "pre",
    "section", "summary", "ul"})
#: the most columns and rows one cell may span (the limits browsers apply)
_MAX_COLSPAN, _MAX_ROWSPAN = 1000, 65534


def _collapse(parts: list[str]) -> str:
    """Text as a browser shows it: runs of white space (``&nbsp;`` too) one space."""
    return " ".join("".join(parts).split())


def _span(attrs, name: str, most: int) -> int:
    """A cell's ``colspan``/``rowspan``: a whole number, 1 when missing or unreadable
    (``rowspan="0"``, to the end of the table, is returned as ``most``)."""
    m = re.match(r"\s*(\d+)", dict(attrs).get(name) or "")
    n = int(m.group(1)[:9]) if m else 1
    return most if n == 0 and name == "rowspan" else max(1, min(n, most))


@dataclass
class _HTMLCell:
    parts: list[str]
    colspan: int = 1
    rowspan: int = 1
    th: bool = False


@dataclass
class _HTMLTable:
    """A table being read: its rows by group (thead, tbody, tfoot), the open row and cell."""
    index: int
    line: int
    title: str
    rows: list = field(default_factory=list)
    group: str = "tbody"
    row: list | None = None
    cell: _HTMLCell | None = None
    caption: list[str] | None = None
    sink: list[str] | None = None      # where text goes: the open cell's, the caption's

    def end_cell(self) -> None:
        self.sink = None
        if self.cell is not None:
            self.row.append(self.cell)
            self.cell = None

    def end_row(self) -> None:
        self.end_cell()
        if self.row:
            self.rows.append((self.group, self.row))
        self.row = None


class _HTMLTables(HTMLParser):
    """Every ``<table>`` of a page, in the order they start (see the module docstring)."""

    def __init__(self, where: str):
        super().__init__(convert_charrefs=True)
        self.where = where
        self.found: list = []            # per table: [title, header, rows, line, captioned]
        self.open: list[_HTMLTable] = []
        self.hidden: list[str] = []      # the hidden elements open (their text is dropped)
        self.block: list[str] = []       # the text of the block being read, outside tables
        self.since: list[str] = []       # the blocks since the last table ended
        self.figures: list = []          # open <figure>s: [figcaption text, table indices]
        self.in_figcaption = False

    # ---- text
    def _flush(self) -> None:
        text = _collapse(self.block)
        if text:
            self.since.append(text)
        self.block = []

    def handle_data(self, data: str) -> None:
        if self.hidden:
            return
        if self.open:
            if self.open[-1].sink is not None:
                self.open[-1].sink.append(data)
            return                      # text between cells is shown outside the table
        self.block.append(data)
        if self.in_figcaption and self.figures:
            self.figures[-1][0].append(data)

    # ---- tags
    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in _HTML_HIDDEN:
            self.hidden.append(tag)
        if self.hidden:
            return
        t = self.open[-1] if self.open else None
        if tag == "table":
            title = ""                   # a table in a cell: titled by its caption only
            if t is None:
                self._flush()
                title, self.since = _title(self.since), []
                if self.figures:
                    self.figures[-1][1].append(len(self.found))
            self.open.append(_HTMLTable(len(self.found), self.getpos()[0], title))
            self.found.append(None)
            return
        if t is not None:
            if tag in ("caption", "thead", "tbody", "tfoot", "tr"):
                t.end_row()
                if tag == "caption":
                    t.caption = t.sink = t.caption or []
                elif tag == "tr":
                    t.row = []
                else:
                    t.group = tag
            elif tag in ("td", "th"):
                t.end_cell()
                t.row = t.row or []
                t.cell = _HTMLCell([], _span(attrs, "colspan", _MAX_COLSPAN),
                                   _span(attrs, "rowspan", _MAX_ROWSPAN), tag == "th")
                t.sink = t.cell.parts
            else:
                self.handle_data(self._mark(tag))
            return
        if tag in _HTML_BLOCKS:
            self._flush()
        if tag == "figure":
            self.figures.append([[], []])
        elif tag == "figcaption":
            self.in_figcaption = True
        else:
            self.handle_data(self._mark(tag))

    @staticmethod
    def _mark(tag: str) -> str:
        """The text an element's start adds: a space for a block or ``<br>``, ``_`` for a
        subscript, ``^`` for a superscript, else nothing (inline tags are dropped)."""
        return " " if tag in _HTML_BLOCKS or tag == "br" else \
            {"sub": "_", "sup": "^"}.get(tag, "")

    def handle_endtag(self, tag: str) -> None:
        if self.hidden:
            if tag in self.hidden:
                while self.hidden.pop() != tag:
                    pass
            return
        t = self.open[-1] if self.open else None
        if t is not None:
            if tag == "table":
                self._finish(self.open.pop())
            elif tag == "caption" and t.sink is t.caption:
                t.sink = None
            elif tag in ("td", "th"):
                t.end_cell()
            elif tag in ("tr", "thead", "tbody", "tfoot"):
                t.end_row()
                t.group = "tbody" if tag != "tr" else t.group
            elif tag in _HTML_BLOCKS:
                self.handle_data(" ")
            return
        if tag in _HTML_BLOCKS:
            self._flush()
        if tag == "figcaption":
            self.in_figcaption = False
        if tag == "figure" and self.figures:
            caption, indices = self.figures.pop()
            text = _title([_collapse(caption)])
            for k in indices:
                if text and self.found[k] is not None and not self.found[k][4]:
                    self.found[k][0] = text

    def close(self) -> None:
        super().close()
        while self.open:                 # unclosed tables end with the page
            self._finish(self.open.pop())

    # ---- one table
    def _finish(self, t: _HTMLTable) -> None:
        t.end_row()
        caption = _collapse(t.caption or [])
        ordered = [cells for g in ("thead", "tbody", "tfoot") for group, cells in t.rows if group == g]
        heads = sum(group == "thead" for group, _ in t.rows)
        if not ordered:
            return                       # no cell: not a table
        grid, width = self._grid(t, ordered)
        grid = [r[:width] for r in grid]
        # a row of one cell across the whole table (a note, a group name) holds no number
        # (a spanning number is refused): it is no row of the table
        keep = [r for r, cells in enumerate(ordered)
                if not (len(cells) == 1 and cells[0].colspan > 1 and cells[0].colspan >= width)]
        if not keep:
            return
        n_head = sum(1 for r in keep if r < heads)
        grid, ordered = [grid[r] for r in keep], [ordered[r] for r in keep]
        if not n_head:                   # leading rows of <th> cells, else the first row
            while n_head < len(ordered) and all(c.th for c in ordered[n_head]):
                n_head += 1
            if n_head in (0, len(ordered)):
                n_head = 1
        header = [next((r[c] for r in reversed(grid[:n_head]) if c < len(r) and r[c]), "")
                  for c in range(width)]
        self.found[t.index] = [_title([caption]) if caption else t.title,
                               *_square(header, grid[n_head:]), t.line, bool(caption)]

    def _grid(self, t: _HTMLTable, ordered: list) -> tuple[list[list[str]], int]:
        """The rows as cells, each spanning cell's text in its first slot and empty text in
        the others, and the table's width (the columns a cell starts in: a ``colspan`` past
        the last column adds none); a spanning cell that holds a number is refused."""
        from .printed import read_cell
        covered: dict[int, int] = {}     # column -> the last row a rowspan above covers
        grid, width = [], 1
        for r, cells in enumerate(ordered):
            row: list[str] = []
            for cell in cells:
                while covered.get(len(row), -1) >= r:
                    row.append("")
                text = _collapse(cell.parts)
                rowspan = min(cell.rowspan, len(ordered) - r)
                if (cell.colspan > 1 or rowspan > 1) and read_cell(text):
                    attr, what = (f"colspan={cell.colspan}", "column") if cell.colspan > 1 \
                        else (f"rowspan={rowspan}", "row")
                    raise InputError(
                        f"{self.where}: the table on line {t.line}, row {r + 1}: a cell with "
                        f"{attr} must not hold a number (got {shorten(text, quote=True)}); "
                        f"which {what} the number is in is ambiguous: give each number its "
                        "own cell")
                if rowspan > 1:
                    for c in range(len(row), len(row) + cell.colspan):
                        covered[c] = r + rowspan - 1
                width = max(width, len(row) + 1)
                row += [text] + [""] * (cell.colspan - 1)
            grid.append(row)             # covered slots at the end: padded by _square
        return grid, width


def _html(text: str, where: str) -> list[tuple]:
    reader = _HTMLTables(where)
    reader.feed(text)
    reader.close()
    return [(title, header, rows, "", line)
            for title, header, rows, line, _ in filter(None, reader.found)]
