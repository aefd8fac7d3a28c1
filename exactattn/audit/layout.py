"""What a printed table holds: its label, value and sum columns, its quantity, its rows.

A table's first column is a label column when its header says so (``query``,
``token``, an empty header, ...) or when one of its cells is not a number.
A column headed ``sum`` (``row sum``, ``total``, ``Σ``) holds row sums; every
other column with a number in it holds values.

The quantity a table prints is read, when not given, from exactattn's own
table names (``scores/shares`` in its CSV and JSON), then from a
query/key/value column of vectors (a projections table), then from the title:
the earliest of ``raw score``, ``scaled score``, ``share``/``attention
weight``/``softmax``, ``output``, ``queries``, ``keys``, ``values`` (a bare
``score`` is the raw one only when nothing divides the scores); then from the
headers (value columns ``out 1``, ``out 2`` are outputs).

Row and column labels name tokens and columns: a number from 1 (``2``), a
token's text (``t1``), or a word and a number (``key 3``, ``q2``, ``dim 1``).

>>> detect_quantity("Outputs: sum_j shares[i][j] * values[j]", (), divided=True)
'outputs'
>>> index_of("key 3", 4, []), index_of("t2", 2, ["t1", "t2"]), index_of("x", 2, [])
(2, 1, None)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .parse import Table
from .printed import clean, read_cell

QUANTITIES = ("raw", "scaled", "shares", "outputs", "queries", "keys", "values")
#: quantities with a column per key (the others have a column per slot of a vector)
KEY_QUANTITIES = ("raw", "scaled", "shares")
#: exactattn's own table names (its CSV and JSON) and what they print
OWN_NAMES = {"square/raw": "raw", "square/scaled": "scaled", "scores/shares": "shares",
             "scores/outputs": "outputs", "project": "projections"}
#: headers of a first column that labels the rows
LABEL_HEADERS = ("", "query", "queries", "token", "tokens", "q", "i", "n", "#", "row", "word",
                 "words", "position", "pos", "index", "input", "from", "query \\ key",
                 "query/key", "q \\ k", "q/k")
_PROJECTION_HEADERS = {"query": "queries", "queries": "queries", "q": "queries",
                       "key": "keys", "keys": "keys", "k": "keys",
                       "value": "values", "values": "values", "v": "values"}
_KEYWORDS = (("raw score", "raw"), ("unscaled score", "raw"), ("raw attention score", "raw"),
             ("dot product", "raw"), ("scaled score", "scaled"), ("scaled dot", "scaled"),
             ("share", "shares"), ("attention weight", "shares"), ("softmax", "shares"),
             ("probabilit", "shares"), ("attention pattern", "shares"), ("weights", "shares"),
             ("output", "outputs"), ("context vector", "outputs"),
             ("queries", "queries"), ("query vectors", "queries"), ("keys", "keys"),
             ("key vectors", "keys"), ("values", "values"), ("value vectors", "values"),
             ("score", "score"))
_NOT_ATTENTION = ("w_q", "w_k", "w_v", "projection matri", "weight matri", "w^q", "w^k", "w^v")


@dataclass(frozen=True)
class Columns:
    """The roles of a table's columns: ``label`` (or None), ``values``, ``sums``."""
    label: int | None
    values: tuple[int, ...]
    sums: tuple[int, ...]


def columns_of(table: Table) -> Columns:
    """The label, value and sum columns of ``table``.

    >>> t = Table(1, "", ("query", "k1", "k2", "sum", "largest"),
    ...           (("q1", "0.5", "0.5", "1.0", "0.5 at k1"),))
    >>> columns_of(t)
    Columns(label=0, values=(1, 2), sums=(3,))
    """
    width = len(table.header)
    label = None
    if width > 1:
        first = clean(table.header[0]).lower()
        if first in LABEL_HEADERS or any(w in first for w in ("query", "token", "\\")) or \
                any(r[0].strip() and not read_cell(r[0]) for r in table.rows):
            label = 0
    heads = [clean(h).lower() for h in table.header]
    sums = tuple(c for c in range(width) if c != label and (heads[c] in (
        "sum", "row sum", "total", "row total") or heads[c].startswith(("sum ", "σ", "∑"))))
    return Columns(label, tuple(c for c in range(width) if c != label and c not in sums and any(
        read_cell(r[c]) for r in table.rows)), sums)


def projection_columns(table: Table, cols: Columns) -> dict[int, str] | None:
    """``{column: queries|keys|values}`` for a table of query/key/value vectors, else None."""
    found = {c: _PROJECTION_HEADERS.get(clean(table.header[c]).lower()) for c in cols.values}
    vectors = all(q is not None and any(len(read_cell(r[c])) > 1 for r in table.rows)
                  for c, q in found.items())
    return found if found and vectors else None


def detect_quantity(title: str, name: str = "", *, divided: bool) -> str | None:
    """The quantity a table's title (or exactattn's own table ``name``) says it prints, or None.

    ``divided``: whether the scores are divided (a bare "scores" is then
    ambiguous: None).  Returns one of :data:`QUANTITIES` or ``projections``.
    """
    if name in OWN_NAMES:
        return OWN_NAMES[name]
    low = clean(title).lower()
    if not low or any(w in low for w in _NOT_ATTENTION):
        return None
    found = [(m.start(), q) for word, q in _KEYWORDS
             if (m := re.search(r"\b" + re.escape(word), low))]
    best = min(found, key=lambda f: f[0], default=(0, None))[1]      # the earliest word
    return (None if divided else "raw") if best == "score" else best


def header_quantity(table: Table) -> str | None:
    """The quantity a table's headers name (for a table whose title names none): value
    columns headed ``out 1``, ``output 2`` are outputs.

    >>> header_quantity(Table(1, "", ("token", "out 1", "out 2"), (("t1", "0.5", "1.5"),)))
    'outputs'
    """
    cols = columns_of(table)
    heads = [clean(table.header[c]).lower() for c in cols.values]
    if heads and all(re.fullmatch(r"(out|output|outputs)\s*_?\(?\d+\)?", h) for h in heads):
        return "outputs"
    return None


def quantity_columns(table: Table, cols: Columns, size: int, names: list[str]) -> bool:
    """Whether the value columns are headed by quantities (``raw score``, ``share``) rather
    than keys or slots: a table with a row per key of one query, which is not read as a
    table with a row per query (its columns would be judged as keys, in order).

    >>> t = Table(1, "Shares of query 3", ("word", "raw score", "share"), (("the", "0", "0.19"),))
    >>> quantity_columns(t, columns_of(t), 4, ["the", "bank"])
    True
    """
    headers = [table.header[c] for c in cols.values]
    return indices_of(headers, size, names) is None and \
        any(detect_quantity(h, divided=False) is not None for h in headers)


def index_of(label: str, size: int, names: list[str]) -> int | None:
    """The 0-based index a row or column label names among ``size``, or None.

    A number from 1 to size; else a name in ``names`` (given once); else a word
    followed by such a number (``key 3``, ``q2``, ``x_1``, ``dim (2)``).
    """
    t = clean(label).strip().strip("\"'\u201c\u201d")
    if t.isdigit():
        k = int(t) - 1
        if 0 <= k < size:
            return k
    low = [n.lower() for n in names]
    if t.lower() in low and low.count(t.lower()) == 1:
        return low.index(t.lower())
    m = re.fullmatch(r"[^\W\d]*[\s_.]*\(?(\d{1,9})\)?", t)
    if m:
        k = int(m.group(1)) - 1
        if 0 <= k < size:
            return k
    return None


def indices_of(labels: list[str], size: int, names: list[str]) -> list[int] | None:
    """Each label's index, or None unless every label names a different one."""
    out = [index_of(lab, size, names) for lab in labels]
    if None in out or len(set(out)) != len(out):
        return None
    return out


def title_label(title: str) -> str | None:
    """The token a title names for a one-row table: ``Shares for the query "2"`` -> ``2``."""
    m = re.search(r"\b(?:query|token|row)\s+[\"'\u201c]?([^\"'\u201d\s,):]+)", clean(title),
                  re.IGNORECASE)
    return m.group(1) if m else None
