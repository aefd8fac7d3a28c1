"""Test helpers for authors' own docs: keep published attention tables honest in CI.

:func:`assert_table` audits every table of a page (Markdown, CSV, LaTeX or
JSON) against what it is computed from and fails with the cell-by-cell
report when a printed digit is not the right one::

    # test_tables.py in a course repository
    from exactattn.testing import assert_table

    def test_lesson_3_tables():
        assert_table("lessons/3-attention.md", spec="lessons/3-head.json")

>>> import tempfile, os
>>> page = "Scores\\n\\n| query | k1 | k2 |\\n|---|---|---|\\n| q1 | 0 | 0 |\\n\\n" \\
...        "Shares\\n\\n| query | k1 | k2 |\\n|---|---|---|\\n| q1 | 0.5 | 0.3 |\\n"
>>> with tempfile.TemporaryDirectory() as d:
...     path = os.path.join(d, "page.md")
...     _ = open(path, "w").write(page)
...     assert_table(path)
Traceback (most recent call last):
...
AssertionError: page.md: 1 of 2 cells not right (1 wrong)
...
q1   k2      shares[1][2]  0.3      wrong    0.5 ...
"""

from __future__ import annotations

from pathlib import Path

from .audit import Audit, audit
from .audit.report import report_text, summary_line

__all__ = ["assert_table"]


def assert_table(path: str | Path, spec=None, quantity=None, **options) -> Audit:
    """Audit the tables of the file at ``path``; raise ``AssertionError`` unless every printed
    number is right.

    ``spec`` (a head spec file) or ``example=`` (a built-in example) is what
    the tables are computed from; with neither, the file's table of printed
    scores (``scores=N``, ``divisor=``).  ``quantity`` is what the tables
    print (one, or one per audited table; default: read from their titles).
    Other options: those of :func:`exactattn.audit.audit` (``which``,
    ``rows``, ``no_scale``, ``ties``, ``fmt``).

    Returns the :class:`~exactattn.audit.Audit` when every cell is right.

    Raises:
        AssertionError: a cell is not right; the message is the report of the
            cells that are not (row, column, printed, verdict, right value,
            exact value) and the count per verdict.
        InputError: the file or the spec cannot be read, or no table can be judged.
    """
    __tracebackhide__ = True      # pytest shows the report, not this frame
    result = audit(path, spec=spec, quantity=quantity, **options)
    if not result.clean:
        line = summary_line(result).replace("audit: ", "", 1)
        raise AssertionError(f"{Path(path).name}: {line}\n\n"
                             + report_text(result, only_not_right=True))
    return result
