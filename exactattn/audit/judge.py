"""A verdict for every printed number: is it the exact value correctly rounded at its places?

A printed decimal ``P`` at ``k`` places is judged against the exact value
``v`` it claims to be (a share, an output, a score, a projection):

* ``right``: ``P`` is ``v`` correctly rounded to k places (an exact tie to
  the even digit, or with ``ties="half_up"`` away from zero);
* ``half_up`` / ``half_even``: ``v`` is an exact tie and ``P`` follows the
  other rule ("rounded half up where half-even differs", or the reverse);
* ``truncated``: ``P`` is ``v`` with its digits past k cut off
  (``P <= v < P + 10^-k`` for v >= 0, mirrored below 0);
* ``off_by_one``: ``P`` is one unit of its last place from the right value;
* ``wrong``: anything else.

Every comparison is exact: rationals as ``Fraction``, shares and outputs by
:class:`~exactattn.numbers.softmax.ExpRatio`'s exact sign, scores divided by an
irrational divisor exactly, as :class:`~exactattn.numbers.reals.Surd` values.
No binary float is formed.  A printed fraction (``1/2``, ``exactly 1``) is an
exact claim: right only when equal.  ``-inf``/``masked`` claim a hidden key.

>>> from fractions import Fraction as F
>>> from exactattn.audit.printed import read_number
>>> judge_number(F(1, 8), read_number("0.13"))
('half_up', '0.12')
>>> judge_number(F(-2, 3), read_number("-0.666")), judge_number(F(2, 3), read_number("0.668"))
(('truncated', '-0.667'), ('off_by_one', '0.667'))
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ..numbers.digits import format_exact, format_scaled, fraction_text, round_fraction
from ..options import check_choice
from .parse import Table
from .printed import Printed

#: the verdicts, best first
VERDICTS = ("right", "truncated", "half_up", "half_even", "off_by_one", "wrong")
#: the rules for an exact tie: the right value's (the other one names a verdict)
TIES = ("half_even", "half_up")
#: places of the exact value shown beside a verdict (more when the cell prints more)
EXACT_PLACES = 10


# --------------------------------------------------------------------------- one number
def _rational(v) -> Fraction | None:
    return v if isinstance(v, Fraction) else v.rational()


def _sign(v, q: Fraction) -> int:
    """The exact sign of ``v - q``."""
    r = _rational(v)
    return (v - q).sign() if r is None else (r > q) - (r < q)


def _rounded(v, places: int, ties: str) -> tuple[str, str | None]:
    """``(right value, the other rule's value when v is an exact tie and they differ)``."""
    r = _rational(v)
    if r is None:
        return v.decimal(places), None
    even = round_fraction(r, places)
    twice = r * 10 ** places * 2
    if twice.denominator != 1 or twice.numerator % 2 == 0:
        return even, None
    up = format_scaled((twice.numerator + (1 if r > 0 else -1)) // 2, places)  # away from 0
    return (even, up) if ties == "half_even" else (up, even)


def judge_number(v, printed: Printed, *, ties: str = "half_even", hidden: bool = False
                 ) -> tuple[str, str | None]:
    """``(verdict, right value)`` of one printed number against its exact value ``v``.

    ``v``: a ``Fraction``, an ``ExpRatio``, a a :class:`~exactattn.numbers.reals.Surd` (a score over an irrational divisor), or None for
    a hidden key's score; ``hidden``: the key is hidden (its share is ``v`` = 0, and
    ``masked`` or ``-inf`` is right).  The right value is printed at the cell's places; for an
    exact claim it is the exact fraction (None when the value is irrational),
    for a hidden key ``-inf``.
    """
    check_choice(ties, "ties", TIES)
    if printed.hidden:
        if hidden or v is None:
            return "right", printed.text
        r = _rational(v)
        return "wrong", None if r is None else fraction_text(r)
    if v is None:
        return "wrong", "-inf"
    P, k = printed.value, printed.places
    if k is None:
        r = _rational(v)
        return ("right" if _sign(v, P) == 0 else "wrong"), \
            (None if r is None else fraction_text(r))
    right, other = _rounded(v, k, ties)
    R = Fraction(right)
    if P == R:
        return "right", right
    if other is not None and P == Fraction(other):
        return ("half_up" if ties == "half_even" else "half_even"), right
    ulp, s = Fraction(1, 10 ** k), 1 if _sign(v, 0) >= 0 else -1     # s: toward zero is down
    if s * _sign(v, P) >= 0 and s * _sign(v, P + s * ulp) < 0:
        return "truncated", right
    if abs(P - R) == ulp:
        return "off_by_one", right
    return "wrong", right


def judge_entry(v, forms: tuple[Printed, ...], *, ties: str = "half_even", hidden: bool = False
                ) -> tuple[str, str | None, Printed]:
    """The verdict of one printed number given in one or more forms (``25/8 = 3.125``):
    right when every form is right, else the first form that is not; the form decided on.
    """
    judged = [(*judge_number(v, p, ties=ties, hidden=hidden), p) for p in forms]
    return next((j for j in judged if j[0] != "right"), None) or \
        max(judged, key=lambda j: places_rank(j[2]))


def places_rank(p: Printed) -> int:
    """Orders a number's readings by their places, an exact claim (no places) lowest."""
    return -1 if p.places is None else p.places


def exact_decimal(v, places: int) -> tuple[str | None, bool]:
    """``(decimal, exactly)``: v's exact decimal when it terminates within ``places``, else
    v rounded to ``places`` (certified); ``(None, False)`` for a hidden key."""
    if v is None:
        return None, False
    r = _rational(v)
    if r is not None:
        text = format_exact(r)
        if text is not None and len(text.partition(".")[2]) <= places:
            return text, True
        return round_fraction(r, places), False
    return v.decimal(places), False


# --------------------------------------------------------------------------- results
@dataclass(frozen=True)
class CellVerdict:
    """The verdict of one printed number.

    ``table`` is the table's number, ``row``/``column`` the 0-based body row
    and column of the cell, ``element`` the place in a vector cell (else
    None); ``what`` names the value (``shares[2][1]``, 1-based; ``sum of row
    2``).  ``right`` is the right value at the places printed, ``exact`` the
    exact value (``Fraction``, ``ExpRatio``, a :class:`~exactattn.numbers.reals.Surd` (a score over an irrational divisor); None for a
    hidden key), ``exact_decimal`` it at :data:`EXACT_PLACES` or more
    (``exactly``: that decimal is the value itself).
    """
    table: int
    row: int
    column: int
    element: int | None
    row_label: str
    column_label: str
    what: str
    printed: str
    places: int | None
    verdict: str
    right: str | None
    exact: Any
    exact_decimal: str | None
    exactly: bool

    @property
    def is_right(self) -> bool:
        return self.verdict == "right"


@dataclass(frozen=True)
class RowSum:
    """The printed shares of one row added up (a table without a sum column): ``total`` of
    the printed cells, and ``slack``, the most that rounding each cell can move a sum of 1."""
    row_label: str
    total: Fraction
    places: int
    slack: Fraction

    @property
    def within(self) -> bool:
        return abs(self.total - 1) <= self.slack


@dataclass(eq=False)
class TableAudit:
    """One table's audit: the ``quantity`` judged (one of the quantities, ``projections``,
    or None when the table was not judged), how it was found (``found_by``: option, name,
    columns, title), the cells, and why it was skipped (``skipped``: ``source``,
    ``no quantity``, ``no numbers``; empty when judged)."""
    table: Table
    quantity: str | None
    found_by: str = ""
    cells: list[CellVerdict] = field(default_factory=list)
    skipped: str = ""
    row_sums: list[RowSum] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        return _counts(self.cells)


def _counts(cells) -> dict[str, int]:
    return dict.fromkeys(VERDICTS, 0) | Counter(c.verdict for c in cells)


@dataclass(eq=False)
class Audit:
    """Every table of a file audited against one source.

    ``source`` is ``spec``, ``example`` or ``printed scores``; ``name`` the
    spec file, the example or the score table's number; ``divisor_squared``
    the D the scores were divided by (sqrt(D); None: not divided); ``ties``
    the rule of the right value at an exact tie.
    """
    tables: list[TableAudit]
    source: str
    name: str
    divisor_squared: Fraction | None
    ties: str = "half_even"

    @property
    def cells(self) -> list[CellVerdict]:
        return [c for t in self.tables for c in t.cells]

    @property
    def counts(self) -> dict[str, int]:
        """Cells per verdict, every verdict listed (in :data:`VERDICTS` order)."""
        return _counts(self.cells)

    @property
    def clean(self) -> bool:
        """True when every judged cell is right."""
        return all(c.is_right for c in self.cells)

    @property
    def not_right(self) -> list[CellVerdict]:
        return [c for c in self.cells if not c.is_right]

