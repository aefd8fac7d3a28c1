"""Printed tables as published: Markdown, CSV, LaTeX ``tabular`` or JSON, several per file.

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

>>> t, = parse_tables("Weights\\n\\n| q | k1 | k2 |\\n|---|--:|---|\\n| 1 | 0.25 | 0.75 |\\n")
>>> t.title, t.header, t.rows
('Weights', ('q', 'k1', 'k2'), (('1', '0.25', '0.75'),))
>>> [t.rows for t in parse_tables('[["a", "b"], [1, 0.50]]', "json")]
[(('1', '0.50'),)]
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError, shorten

__all__ = ["MAX_BYTES", "TABLE_FORMATS", "Table", "detect_format", "parse_tables", "read_tables"]

TABLE_FORMATS = ("markdown", "csv", "latex", "json")
#: the largest table file read, in bytes (16 MiB): a published table is a few kilobytes
MAX_BYTES = 16 * 2 ** 20
_SUFFIXES = {".md": "markdown", ".markdown": "markdown", ".csv": "csv", ".tex": "latex",
             ".json": "json"}


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
    """The format of a table file's text: json, latex, markdown or csv.

    >>> detect_format("| a |\\n|---|\\n| 1 |"), detect_format("a,b\\n1,2"), detect_format("[]")
    ('markdown', 'csv', 'json')
    """
    head = text.lstrip("\ufeff \t\r\n")
    if head[:1] in "[{" and head:
        return "json"
    if re.search(r"\\begin\{(tabular|longtable)", text):
        return "latex"
    if any(_delimiter(line) for line in text.splitlines()):
        return "markdown"
    return "csv"


def read_tables(path: str | Path, fmt: str | None = None) -> list[Table]:
    """The tables of a file; ``fmt`` None: by suffix (.md, .csv, .tex, .json), else by content.

    Raises:
        InputError: the file is missing, unreadable, not UTF-8, larger than
            :data:`MAX_BYTES`, holds no table, or is malformed.
    """
    from ..call.spec import read_user_text
    p = Path(path)
    text = read_user_text(p, what="table file", kinds="a .md, .csv, .tex or .json file",
                          limit=MAX_BYTES, size_fix="audit the page the tables are on",
                          error=InputError)
    return parse_tables(text, fmt or _SUFFIXES.get(p.suffix.lower()),
                        where=shorten(str(p), 200))


def parse_tables(text: str, fmt: str | None = None, *, where: str = "table text") -> list[Table]:
    """The tables in ``text`` (``fmt``: markdown, csv, latex, json; None: detected).

    Raises:
        InputError: an unknown format, malformed JSON, or no table at all.
    """
    if fmt is None:
        fmt = detect_format(text)
    if fmt not in TABLE_FORMATS:
        raise InputError(f"table format must be one of {', '.join(TABLE_FORMATS)} (got "
                         f"{shorten(fmt, quote=True)})")
    found = {"markdown": _markdown, "csv": _csv, "latex": _latex, "json": _json}[fmt](
        text.removeprefix("\ufeff"), where)
    tables = [Table(k + 1, *t) for k, t in enumerate(found)]
    if not tables:
        raise InputError(f"{where} must hold at least one {fmt} table (got none); "
                         + ("a Markdown table needs a |---| line under its header"
                            if fmt == "markdown" else "check the format"))
    return tables


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


def _cells(line: str) -> list[str]:
    """The cells of a pipe-table row: ``\\|`` and pipes in code spans stay in their cell."""
    cells, cur, code, k = [], "", False, 0
    s = line.strip()
    while k < len(s):
        ch = s[k]
        if ch == "\\" and k + 1 < len(s) and s[k + 1] == "|":
            cur += "|"
            k += 2
            continue
        if ch == "`":
            code = not code
        if ch == "|" and not code:
            cells.append(cur)
            cur = ""
        else:
            cur += ch
        k += 1
    cells.append(cur)
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
            header = _cells(line)
            body, j = [], k + 2
            while j < len(lines) and lines[j].strip() and "|" in lines[j]:
                body.append(_cells(lines[j]))
                j += 1
            found.append((_title(since), *_square(header, body), "", k + 1))
            since, k = [], j
            continue
        since.append(line)
        k += 1
    return found


# --------------------------------------------------------------------------- CSV
def _csv(text: str, where: str) -> list[tuple]:
    blocks, cur, start = [], [], 1
    lines = text.splitlines()
    for k, line in enumerate(lines + [""]):
        if line.strip():
            if not cur:
                start = k + 1
            cur.append(line)
        elif cur:
            blocks.append((start, cur))
            cur = []
    found = []
    for start, block in blocks:
        try:
            rows = list(csv.reader(io.StringIO("\n".join(block))))
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
    cap = re.findall(r"\\caption\*?\{((?:[^{}]|\{[^{}]*\})*)\}", env)
    if cap:
        return cap[-1].strip()
    heads = re.findall(r"\\(?:paragraph|(?:sub)*section)\*?\{((?:[^{}]|\{[^{}]*\})*)\}", before)
    if heads:
        return heads[-1].strip()
    lines = [ln.strip() for ln in before.splitlines()
             if ln.strip() and not ln.strip().startswith("\\")]
    return lines[-1].rstrip("\\").strip() if lines else ""


def _split_cells(row: str) -> list[str]:
    cells = re.split(r"(?<!\\)&", row)
    out = []
    for c in cells:
        m = _MULTI.search(c)
        if m:
            out += [m.group(2)] + [""] * (int(m.group(1)) - 1)
        else:
            out.append(c)
    return out


def _latex(text: str, where: str) -> list[tuple]:
    text = re.sub(r"(?<!\\)%.*", "", text)                        # comments
    found, pos = [], 0
    for m in _BEGIN.finditer(text):
        if m.start() < pos:
            continue
        env = m.group(1)
        k = m.end()
        if env in ("tabular*", "tabularx"):
            k = _group(text, k)                                 # the width
        k = _group(text, k)                                     # the column spec
        end = text.find(f"\\end{{{env}}}", k)
        if end < 0:
            line = text.count("\n", 0, m.start()) + 1
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
            found.append((title, *_square(rows[0], rows[1:]), "",
                          text.count("\n", 0, m.start()) + 1))
        pos = end
    return found


# --------------------------------------------------------------------------- JSON
class _Number(str):
    """A JSON number, kept as the text it was written as."""


def _json_cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):          # a vector: (0, 1/2, 0.75), each entry as written
        return "(" + ", ".join(_json_cell(x) for x in v) + ")"
    if isinstance(v, dict):
        return json.dumps(v)
    return str(v)


def _json_rows(rows, where: str, title: str = "", name: str = "", columns=None) -> tuple:
    if not isinstance(rows, list) or not rows:
        raise InputError(f"{where}: a table must be a non-empty list of rows (got "
                         f"{shorten(rows, quote=True)})")
    if all(isinstance(r, dict) for r in rows):
        header = list(columns or dict.fromkeys(k for r in rows for k in r))
        body = [[_json_cell(r.get(c)) for c in header] for r in rows]
    elif all(isinstance(r, list) for r in rows):
        if columns is not None:
            header, body = list(columns), rows
        elif any(isinstance(c, _Number) for c in rows[0]):
            header, body = [f"column {c + 1}" for c in range(len(rows[0]))], rows
        else:
            header, body = rows[0], rows[1:]
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
    if isinstance(doc, list) and doc and all(_is_table(t) for t in doc):
        return [_json_rows(t, where) for t in doc]
    return [_json_rows(doc, where)]


def _is_table(t) -> bool:
    """A list of rows (each a list or an object): one table of a list of tables."""
    return isinstance(t, list) and bool(t) and all(isinstance(r, (list, dict)) for r in t)
