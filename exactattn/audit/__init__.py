"""``exactattn audit``: which printed digits in a published attention table are wrong.

Read a table as published (:mod:`~exactattn.audit.parse`: Markdown, CSV,
LaTeX ``tabular``, JSON, HTML), say what it is computed from (a head and tokens,
or printed scores in the same file), and get a verdict for every printed
number (:mod:`~exactattn.audit.judge`): right, truncated, rounded half up
where half-even differs (or the reverse), off by one in the last digit, or
wrong, each with the right value at the places printed and the exact value.
:mod:`~exactattn.audit.report` presents the verdicts;
:func:`exactattn.testing.assert_table` fails a test with them.
"""

from .check import HeadSource, ScoreSource, audit, audit_tables, audit_text
from .judge import TIES, VERDICTS, Audit, CellVerdict, RowSum, TableAudit, judge_number
from .layout import QUANTITIES
from .parse import TABLE_FORMATS, Table, parse_tables, read_tables

__all__ = ["QUANTITIES", "TABLE_FORMATS", "TIES", "VERDICTS", "Audit", "CellVerdict",
           "HeadSource", "RowSum", "ScoreSource", "Table", "TableAudit", "audit",
           "audit_tables", "audit_text", "judge_number", "parse_tables", "read_tables"]
