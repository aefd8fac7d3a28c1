"""Audit printed tables against what they claim to be computed from.

Two sources:

* a head and its tokens (a spec file or a built-in example): every table
  is judged as the quantity it prints (``raw``, ``scaled``, ``shares``,
  ``outputs``, ``queries``, ``keys``, ``values``; given, or read from the
  table, see :mod:`exactattn.audit.layout`), against the exact values of
  :func:`exactattn.engines.head.attend`;
* a table of printed scores in the same file: every other table is judged
  as the softmax of those scores, read exactly as printed (``3.2`` is
  16/5), divided by ``divisor`` (none by default).

Row sums are judged as printed: a decimal sum against the sum of the
printed cells of its row (so ``1.0001`` is right exactly when the printed
cells add up to it), ``exactly 1`` against the exact values.

Reference: the softmax of scaled scores and the outputs of Vaswani et al.
2017, "Attention is all you need", sec. 3.2.1.

>>> text = "Scores\\n\\n| query | k1 | k2 |\\n|---|---|---|\\n| q1 | 0 | 0 |\\n\\n" \\
...        "Shares\\n\\n| query | k1 | k2 |\\n|---|---|---|\\n| q1 | 0.5 | 0.49 |\\n"
>>> [(c.printed, c.verdict, c.right) for c in audit_text(text).cells]
[('0.5', 'right', '0.5'), ('0.49', 'off_by_one', '0.50')]
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Sequence

from ..call.policy import parse_divisor
from ..errors import InputError, shorten
from ..numbers.exact import rational_sqrt
from ..options import check_choice, check_whole_list
from ..numbers.softmax import SoftmaxRow
from ..reference.logits import scaled_logit
from .judge import (EXACT_PLACES, TIES, Audit, CellVerdict, RowSum, TableAudit,
                    exact_decimal, judge_entry, places_rank)
from .layout import (KEY_QUANTITIES, OWN_NAMES, QUANTITIES, columns_of, detect_quantity,
                     header_quantity, index_of, indices_of, projection_columns,
                     quantity_columns, title_label)
from .parse import Table, parse_tables, read_tables
from .printed import clean, read_cell


class _Source:
    """What a table is judged against: ``size``, ``value`` and the sum of a row."""
    names: tuple = ()

    def column_names(self, quantity: str) -> list[str]:
        return []

    def total(self, quantity: str, i: int):
        """The exact sum of row i of ``quantity`` (hidden keys left out)."""
        values = (self.value(quantity, i, j)[0] for j in range(self.size(quantity)[1]))
        return sum((v for v in values if v is not None), Fraction(0))


class HeadSource(_Source):
    """The exact values of a head run on its tokens (an :class:`~exactattn.examples.Example`)."""

    def __init__(self, example, *, no_scale: bool = False):
        from ..engines.head import attend
        head = example.head
        if no_scale:
            head = head.with_policy(head.policy.replace(divisor_squared=None))
        self.trace = attend(head, example.x)
        if self.trace.engine == "symbolic":
            raise InputError("spec must hold numbers to audit a table against (got symbols); "
                             "substitute values for them first")
        self.names = [t.text for t in example.tokens]
        self.D = head.divisor_squared
        self.root = None if self.D is None else rational_sqrt(self.D)

    def size(self, quantity: str) -> tuple[int, int]:
        t = self.trace
        return t.n, {"outputs": t.head.d_v, "values": t.head.d_v, "queries": t.head.d_k,
                     "keys": t.head.d_k}.get(quantity, t.n)

    def column_names(self, quantity: str) -> list[str]:
        return self.names if quantity in KEY_QUANTITIES else []

    def value(self, quantity: str, i: int, j: int):
        """``(exact value, hidden)``: None as the value of a hidden key's score."""
        t = self.trace
        if quantity in ("raw", "scaled", "shares"):
            r = t.raw_score_row(i)[j]
            if quantity == "shares":
                return t.share(i, j), r is None
            scaled = quantity == "scaled" and r is not None and r != 0     # 0 stays 0
            return (t.scaled_score(i, j) if scaled else r), r is None
        if quantity == "outputs":
            return t.output(i, j), False
        return {"queries": t.queries, "keys": t.keys, "values": t.values}[quantity][i][j], False

    def total(self, quantity: str, i: int):
        if quantity == "scaled" and self.D is not None and self.root is None:
            raw = sum((r for r in self.trace.raw_score_row(i) if r is not None), Fraction(0))
            return raw if raw == 0 else scaled_logit(raw, self.D)
        return super().total(quantity, i)


class ScoreSource(_Source):
    """The softmax of a printed score table, each score read exactly as printed."""

    def __init__(self, table: Table, divisor_squared: Fraction | None):
        cols = columns_of(table)
        if not cols.values:
            raise InputError(f"score table {table.number} must hold numbers (got none)")
        self.table, self.D, self.width = table, divisor_squared, len(cols.values)
        self.labels = [r[cols.label] if cols.label is not None else "" for r in table.rows]
        self.rows = []
        for k, r in enumerate(table.rows):
            raw = []
            for c in cols.values:
                entries = read_cell(r[c])
                if len(entries) != 1:
                    raise InputError(
                        f"score table {table.number}, row {k + 1}, column "
                        f"{shorten(table.header[c], quote=True)} must hold one number (got "
                        f"{shorten(r[c], quote=True)}); a score row needs every score")
                # an exact reading (a fraction) if the cell has one, else its first
                raw.append(next((p for p in entries[0] if p.places is None), entries[0][0]).value)
            if all(v is None for v in raw):
                raise InputError(f"score table {table.number}, row {k + 1} must show a key "
                                 "(got every key hidden)")
            self.rows.append(SoftmaxRow(raw, divisor_squared))

    def size(self, quantity: str) -> tuple[int, int]:
        return len(self.rows), self.width

    def value(self, quantity: str, i: int, j: int):
        return self.rows[i].share(j), self.rows[i].gaps[j] is None


# --------------------------------------------------------------------------- one table
def _rows_of(t: Table, label: int | None, source, n: int, rows) -> list[int]:
    m = len(t.rows)
    if rows is not None:
        if len(rows) != m:
            raise InputError(f"rows must name one token per printed row of table {t.number} "
                             f"(got {len(rows)} for {m} rows)")
        if rows and max(rows) >= n:
            raise InputError(f"rows must name tokens from 1 to {n} (got {max(rows) + 1})")
        return list(rows)
    if isinstance(source, ScoreSource):
        if label is not None:
            want = [lab.strip().lower() for lab in source.labels]
            got = [t.rows[k][label].strip().lower() for k in range(m)]
            if all(g in want and want.count(g) == 1 for g in got):
                return [want.index(g) for g in got]
    elif label is not None:
        found = indices_of([r[label] for r in t.rows], n, source.names)
        if found is not None:
            return found
        if m == n:
            return list(range(m))
        raise InputError(f"row labels of table {t.number} must name tokens (a number from 1 "
                         f"to {n}, a token's text, or q1, t1, ...) (got "
                         f"{shorten(t.rows[0][label], quote=True)}); pass rows=[...] "
                         "(--rows) to say which tokens the rows are")
    elif m == 1 and title_label(t.title) is not None:
        k = index_of(title_label(t.title), n, source.names)
        if k is not None:
            return [k]
    if m > n:
        raise InputError(f"table {t.number} must have at most {n} rows, one per query (got "
                         f"{m})")
    return list(range(m))


def _columns_of(t: Table, values: tuple[int, ...], quantity: str, source) -> list[int]:
    n_cols = source.size(quantity)[1]
    headers = [t.header[c] for c in values]
    found = indices_of(headers, n_cols, source.column_names(quantity))
    if found is not None and not isinstance(source, ScoreSource):
        return found
    if len(values) > n_cols or (isinstance(source, ScoreSource) and len(values) != n_cols):
        what = "keys" if quantity in KEY_QUANTITIES else "columns"
        raise InputError(f"table {t.number} must have {'' if isinstance(source, ScoreSource) else 'at most '}"
                         f"{n_cols} value columns, one per {what[:-1]} of the {quantity} (got "
                         f"{len(values)}); pick the tables to audit with --tables")
    return list(range(len(values)))


def _verdict(t, k, c, e, row_label, what, v, forms, ties, hidden=False):
    """The verdict of the number in row k, column c (element e of a vector) of table t."""
    verdict, right, decided = judge_entry(v, forms, ties=ties, hidden=hidden)
    places = EXACT_PLACES if decided.places is None else max(EXACT_PLACES, decided.places + 4)
    dec, exactly = exact_decimal(v, places)
    printed = clean(t.rows[k][c]) if e is None else decided.text
    return CellVerdict(t.number, k, c, e, row_label, clean(t.header[c]), what, printed,
                       decided.places, verdict, right, v, dec, exactly)


def judge_table(t: Table, quantity: str, found_by: str, source, *, rows=None,
                ties: str = "half_even") -> TableAudit:
    """Judge every number of ``t`` as ``quantity`` of ``source`` (``projections``: per column)."""
    cols = columns_of(t)
    audit = TableAudit(t, quantity, found_by)
    if not cols.values:
        audit.skipped = "no numbers"
        return audit
    per_column = projection_columns(t, cols) if quantity == "projections" else None
    if quantity == "projections" and per_column is None:
        raise InputError(f"table {t.number} must have query, key and value columns of vectors "
                         "to be a projections table (got other columns)")
    n = source.size("raw" if per_column else quantity)[0]
    vectors = per_column is not None or (len(cols.values) == 1 and any(
        len(read_cell(r[cols.values[0]])) > 1 for r in t.rows))
    if not vectors and quantity_columns(t, cols, source.size(quantity)[1],
                                        source.column_names(quantity)):
        audit.skipped = "quantity columns"      # a row per key of one query: not read
        return audit
    targets = _rows_of(t, cols.label, source, n, rows)
    col_index = None if vectors else _columns_of(t, cols.values, quantity, source)
    for k, (r, i) in enumerate(zip(t.rows, targets)):
        row_label = clean(r[cols.label]) if cols.label is not None else f"row {k + 1}"
        printed_total, places_seen, complete = Fraction(0), [], True
        for m, c in enumerate(cols.values):
            entries = read_cell(r[c])
            if not entries:
                complete = False
                continue
            q = per_column[c] if per_column else quantity
            if vectors and len(entries) > source.size(q)[1]:
                raise InputError(f"table {t.number}, row {k + 1}: a vector of {q} must have "
                                 f"at most {source.size(q)[1]} numbers (got {len(entries)})")
            if not vectors and len(entries) > 1:
                raise InputError(f"table {t.number}, row {k + 1}, column "
                                 f"{shorten(t.header[c], quote=True)} must hold one number (got "
                                 f"{shorten(r[c], quote=True)})")
            for e, forms in enumerate(entries):
                j = e if vectors else col_index[m]
                v, hidden = source.value(q, i, j)
                audit.cells.append(_verdict(t, k, c, e if vectors else None, row_label,
                                            f"{q}[{i + 1}][{j + 1}]", v, forms, ties, hidden))
            if vectors:
                continue
            # what the cell adds to a printed sum: its most precise reading (a hidden key adds
            # exactly 0: places None, like an exact fraction)
            best = max(entries[0], key=places_rank)
            value, places = (Fraction(0), None) if any(p.hidden for p in entries[0]) else \
                (best.value, best.places)
            printed_total += value
            places_seen.append(places)
        for c in cols.sums:
            entries = read_cell(r[c])
            if len(entries) != 1 or vectors:
                continue
            forms = entries[0]
            exact_forms = tuple(p for p in forms if p.places is None and not p.hidden)
            printed_forms = tuple(p for p in forms if p.places is not None)
            what = f"sum of {quantity} row {i + 1}"
            if exact_forms:
                audit.cells.append(_verdict(t, k, c, None, row_label, what,
                                            source.total(quantity, i), exact_forms, ties))
            if printed_forms:
                audit.cells.append(_verdict(t, k, c, None, row_label,
                                            f"{what} (of the printed cells)", printed_total,
                                            printed_forms, ties))
        rounded = [p for p in places_seen if p is not None]
        if quantity == "shares" and not cols.sums and complete and not vectors and \
                len(cols.values) == source.size(quantity)[1] and printed_total != 1:
            slack = sum((Fraction(1, 2 * 10 ** p) for p in rounded), Fraction(0))
            audit.row_sums.append(RowSum(row_label, printed_total, max(rounded, default=0),
                                         slack))
    return audit


# --------------------------------------------------------------------------- a file
def _quantities(quantity, count: int) -> list[str | None]:
    if quantity is None:
        return [None] * count
    qs = list(quantity) if isinstance(quantity, (list, tuple)) else [quantity]
    for q in qs:
        check_choice(q, "quantity", QUANTITIES + ("projections",))
    if len(qs) == 1:
        return qs * count
    if len(qs) != count:
        raise InputError(f"quantity must be one quantity or one per audited table (got "
                         f"{len(qs)} for {count} tables); pick the tables with --tables")
    return qs


def audit_tables(tables: Sequence[Table], *, spec=None, example: str | None = None,
                 scores: int | None = None, divisor=None, quantity=None,
                 which: Sequence[int] | None = None, rows: Sequence[int] | None = None,
                 no_scale: bool = False, ties: str = "half_even") -> Audit:
    """Audit parsed tables (see :func:`audit` for the arguments)."""
    check_choice(ties, "ties", TIES)
    which, rows = (v if v is None else check_whole_list(v, name, low=low, most=None)
                   for v, name, low in ((which, "which", 1), (rows, "rows", 0)))
    check_choice(str(no_scale) if isinstance(no_scale, bool) else no_scale, "no_scale", ("True", "False"))
    if spec is not None and example is not None:
        raise InputError("spec and example must not both be given (got both); a table is "
                         "computed from one head")
    numbers = [t.number for t in tables]
    for name, picked in (("tables", which or []), ("scores", [] if scores is None else [scores])):
        for k in picked:
            if isinstance(k, bool) or k not in numbers:
                raise InputError(f"{name} must be table numbers from 1 to {len(tables)}, the "
                                 f"tables of the file (got {k})")
    head_given = spec is not None or example is not None
    if head_given:
        if scores is not None or divisor is not None:
            raise InputError(f"{'scores' if scores is not None else 'divisor'} must come "
                             "without a spec or example (got both); the head's own divisor "
                             "applies (no_scale drops it)")
        if spec is not None and not hasattr(spec, "head"):    # a path, not an Example
            from ..engines.spec import load
            ex, source_kind, name = load(spec), "spec", shorten(str(spec), 200)
        elif spec is not None:
            ex, source_kind, name = spec, "spec", spec.name
        else:
            from ..examples import example as built_in
            ex, source_kind, name = built_in(example), "example", example
        source = HeadSource(ex, no_scale=no_scale)
        D, score_table = source.D, None
    else:
        if no_scale:
            raise InputError("no_scale must come with a spec or example (got printed scores); "
                             "printed scores are divided by divisor, none by default")
        if scores is None:
            scores = next((t.number for t in tables if detect_quantity(
                t.title, t.name, divided=False) in ("raw", "scaled")), None)
        if scores is None:
            raise InputError("the tables must come with what they are computed from (got no "
                             "head and no table titled scores); pass a spec (--spec) or "
                             "example (--example), or the number of the table of printed "
                             "scores (--scores N)")
        D = parse_divisor("none" if divisor is None else divisor, name="divisor")
        score_table = tables[numbers.index(scores)]
        source = ScoreSource(score_table, D)
        source_kind, name = "printed scores", str(scores)
    picked = [t for t in tables if (which is None or t.number in which)
              and (score_table is None or t.number != score_table.number)]
    given = _quantities(quantity, len(picked))
    if not head_given:
        for q in given:
            if q not in (None, "shares"):
                raise InputError(f"quantity must be shares with printed scores (got {q}); the "
                                 "tables are judged as the softmax of the scores")
    results = []
    if score_table is not None and (which is None or score_table.number in which):
        results.append(TableAudit(score_table, None, "", skipped="source"))
    for t, q in zip(picked, given):
        found_by = "option" if q is not None else ""
        if q is None and head_given:
            q = detect_quantity(t.title, t.name, divided=D is not None)
            found_by = "name" if t.name in OWN_NAMES else "title"
            if q is None:
                q, found_by = header_quantity(t), "headers"
            if q != "projections" and projection_columns(t, columns_of(t)) is not None:
                q, found_by = "projections", "columns"
        elif q is None:
            q, found_by = detect_quantity(t.title, t.name, divided=True), "scores"
            if q not in (None, "shares"):
                results.append(TableAudit(t, None, "", skipped="not shares"))
                continue
            q = "shares"
        if q is None:
            results.append(TableAudit(t, None, "", skipped="no quantity"))
            continue
        results.append(judge_table(t, q, found_by, source, rows=rows, ties=ties))
    results.sort(key=lambda a: a.table.number)
    if not any(a.cells for a in results):
        raise InputError("the file must hold a table the audit can judge (got none: " + shorten(
            "; ".join(f"table {a.table.number}: {a.skipped}" for a in results), 120)
                         + "); pass quantity (--quantity) and pick tables with --tables")
    return Audit(results, source_kind, name, D, ties)


def audit(path: str | Path, *, fmt: str | None = None, **options) -> Audit:
    """Audit every table of the file at ``path`` (Markdown, CSV, LaTeX, JSON or HTML).

    Options: ``spec`` (a head spec file, or an Example) or ``example`` (a
    built-in example's name), or neither and ``scores`` (the number of the
    table of printed scores; default: the first table titled as scores) with ``divisor`` (``"2"``, ``"sqrt(2)"``; none by default);
    ``quantity`` (one of :data:`~exactattn.audit.layout.QUANTITIES`, or a
    list, one per audited table; default: read from each table);
    ``which`` (table numbers to audit, from 1); ``rows`` (0-based tokens
    the printed rows are); ``no_scale`` (drop the head's divisor); ``ties``
    (``half_even``, the default, or ``half_up``).

    Raises:
        InputError: an unreadable file or spec, a table that cannot be the
            quantity named (too many rows or columns, labels that name no
            token), or no table to judge.
    """
    for k in options:         # a misspelt option named, not a TypeError
        check_choice(k, "option", tuple(audit_tables.__kwdefaults__))
    return audit_tables(read_tables(path, fmt), **options)


def audit_text(text: str, *, fmt: str | None = None, **options) -> Audit:
    """Audit the tables in ``text``; the options of :func:`audit`."""
    return audit_tables(parse_tables(text, fmt), **options)
