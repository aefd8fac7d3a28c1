"""The audit as tables: one per audited table (a line per printed number), then a summary.

Nothing is computed here: the verdicts, right values and exact decimals come
from :mod:`exactattn.audit.judge`; this module writes them in words.

>>> from exactattn.audit import audit_text
>>> a = audit_text("Scores\\n\\n| q | k1 | k2 |\\n|---|---|---|\\n| 1 | 0 | 0 |\\n\\n"
...                "| q | k1 | k2 |\\n|---|---|---|\\n| 1 | 0.5 | 0.3 |\\n")
>>> summary_line(a)
'audit: 1 of 2 cells not right (1 wrong)'
"""

from __future__ import annotations

from fractions import Fraction

from ..call.policy import divisor_text
from ..numbers.digits import format_exact, fraction_text
from ..present.cells import root_text, with_rounded
from ..present.render import Section, plural, printable, render
from ..numbers.reals import Surd
from .judge import VERDICTS, Audit, CellVerdict, TableAudit

#: each verdict in words
VERDICT_WORDS = {
    "right": "right",
    "truncated": "truncated",
    "half_up": "rounded half up where half-even differs",
    "half_even": "rounded half even where half-up differs",
    "off_by_one": "off by one in the last digit",
    "wrong": "wrong",
}
_SKIPPED = {
    "source": "the printed scores the other tables are judged against",
    "no quantity": "not judged: its title names no quantity (pass --quantity, with --tables)",
    "no numbers": "not judged: no cell holds a number",
    "quantity columns": "not judged: its columns are headed by quantities (a row per key of "
                        "one query), a layout the audit does not read",
    "not shares": "not judged: its title names another quantity than the softmax of the scores",
}
_FOUND_BY = {"option": "as given", "name": "by its name", "title": "from its title",
             "headers": "from its column headers",
             "columns": "from its query, key and value columns",
             "scores": "as the softmax of the printed scores"}


def _exact_cell(cell: CellVerdict) -> str:
    """The exact value for readers: ``25/8 = 3.125``, ``1/3 ~ 0.3333333333``, ``~0.5799772562``."""
    v = cell.exact
    if v is None:
        return "-inf (hidden key)"
    if not isinstance(v, (Fraction, Surd)) and v.rational() is not None:
        v = v.rational()                    # a share or output that is rational: 1/8
    if isinstance(v, Fraction):
        whole = fraction_text(v)
        if v.denominator == 1:
            return whole
        return with_rounded(whole, v.numerator, v.denominator, rounded=cell.exact_decimal,
                            exact=cell.exactly)
    return cell.exact_decimal if cell.exactly else f"~{cell.exact_decimal}"


def _parts(counts: dict[str, int], verdicts=VERDICTS) -> str:
    return ", ".join(f"{counts[v]} {VERDICT_WORDS[v]}" for v in verdicts if counts[v])


def _counts_text(counts: dict[str, int]) -> str:
    total = sum(counts.values())
    return f"{plural(total, 'cell')}: {_parts(counts)}" if total else "no cells"


def summary_line(audit: Audit) -> str:
    """One line: how many cells are not right, by verdict."""
    counts = audit.counts
    total = sum(counts.values())
    bad = total - counts["right"]
    return f"audit: {bad} of {plural(total, 'cell')} not right ({_parts(counts, VERDICTS[1:])})" \
        if bad else f"audit: all {plural(total, 'cell')} right"


def _title(t: TableAudit) -> str:
    name = printable(t.table.title) if t.table.title else "untitled"
    return f"Table {t.table.number}: {name}"


def _table_section(t: TableAudit, audit: Audit, only_not_right: bool,
                   closed_forms: bool) -> Section:
    quantity = "query, key and value vectors" if t.quantity == "projections" else t.quantity
    columns = ["row", "column", "value", "printed", "verdict", "right value",
               "exact value"] + (["closed form"] if closed_forms else [])
    rows, data = [], []
    for c in t.cells:
        column = printable(c.column_label) + ("" if c.element is None else f" [{c.element + 1}]")
        v = c.exact      # as a closed form: exp(1)/(1 + exp(1)), 25/8, a score over sqrt(D)
        form = "-inf (hidden key)" if v is None else fraction_text(v) if isinstance(
            v, Fraction) else root_text(v) if isinstance(v, Surd) else v.text()
        data.append({"row": c.row_label, "column": c.column_label, "element": c.element,
                     "value": c.what, "printed": c.printed, "places": c.places,
                     "verdict": c.verdict, "right": c.right, "exact": form,
                     "exact_decimal": c.exact_decimal})
        if only_not_right and c.is_right:
            continue
        rows.append([printable(c.row_label), column, c.what, printable(c.printed),
                     VERDICT_WORDS[c.verdict], "-" if c.right is None else c.right,
                     _exact_cell(c)] + ([form] if closed_forms else []))
    notes = [f"judged as {quantity} ({_FOUND_BY.get(t.found_by, t.found_by)}); "
             f"{_counts_text(t.counts)}"]
    for s in t.row_sums:
        notes.append(f"row {printable(s.row_label)}: the printed shares add up to "
                     f"{format_exact(s.total)}; rounding each to its places moves a sum of 1 "
                     f"by at most {format_exact(s.slack)}"
                     + (" (within it: a sum check alone would not catch this row)"
                        if s.within else " (beyond it: these cannot be one row's rounded "
                                         "shares)"))
    return Section(f"table-{t.table.number}", f"{_title(t)} ({quantity})", columns, rows,
                   notes, {"cells": data})


def report_sections(audit: Audit, *, only_not_right: bool = False,
                    closed_forms: bool = False) -> list[Section]:
    """The audit as sections: one per judged table, then the summary.

    ``only_not_right`` lists only the cells that are not right (the counts
    still count every cell); ``closed_forms`` adds each exact value's closed form.
    """
    judged = [t for t in audit.tables if t.quantity is not None and not t.skipped]
    shown = [t for t in judged if not only_not_right or t.counts["right"] < len(t.cells)]
    sections = [_table_section(t, audit, only_not_right, closed_forms) for t in shown]
    counts = audit.counts
    rows = [[VERDICT_WORDS[v], str(counts[v])] for v in VERDICTS] + \
        [["all", str(sum(counts.values()))]]
    d = audit.divisor_squared
    notes = [f"computed from: the printed scores of table {audit.name} (read exactly as printed), "
             f"divided by {'nothing' if d is None else divisor_text(d)}"
             if audit.source == "printed scores" else f"computed from: {audit.source} "
             f"{printable(audit.name)} (divisor {'none' if d is None else divisor_text(d)})"]
    notes += [f"{_title(t)}: {_SKIPPED[t.skipped] if t.skipped else _counts_text(t.counts)}"
              for t in audit.tables if t.skipped or (t in judged and t not in shown)]
    rule = "half-even" if audit.ties == "half_even" else "half-up (away from zero)"
    notes += [f"right value: the exact value correctly rounded at the places the cell "
              f"prints, an exact tie {rule}; a printed fraction is judged exactly; a "
              "printed sum against the sum of the printed cells of its row", summary_line(audit)]
    sections.append(Section("summary", "Summary: cells per verdict", ["verdict", "cells"], rows,
                            notes, {"counts": counts, "clean": audit.clean}))
    return sections


def report_text(audit: Audit, fmt: str = "text", **options) -> str:
    """The audit rendered in ``fmt`` (text, markdown, latex, json, csv); the options of
    :func:`report_sections`."""
    meta = {"command": "audit", "source": audit.source, "name": audit.name,
            "clean": audit.clean}
    return render(report_sections(audit, **options), fmt, meta)
