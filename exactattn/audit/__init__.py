"""``exactattn audit``: which printed digits in a published attention table are wrong.

Read a table as published (:mod:`~exactattn.audit.parse`: Markdown, CSV,
LaTeX ``tabular``, JSON, HTML), say what it is computed from (a head and tokens,
or printed scores in the same file), and get a verdict for every printed
number (:mod:`~exactattn.audit.judge`): right, truncated, rounded half up
where half-even differs (or the reverse), off by one in the last digit, or
wrong, each with the right value at the places printed and the exact value.
:mod:`~exactattn.audit.report` presents the verdicts;
:func:`exactattn.testing.assert_table` fails a test with them.

:mod:`~exactattn.audit.flops` audits the FLOP counters the same way
(``exactattn cost --audit``): each counter run on fixed calls
(:mod:`~exactattn.audit.counters`), each figure judged against the derived count.
"""

from .check import audit, audit_text
from .judge import Audit

__all__ = ["Audit", "audit", "audit_text"]
