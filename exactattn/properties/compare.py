"""How results are compared: exactly for exact functions, by verify's comparison module for float ones.

Exact entries are ``Fraction`` or :class:`~exactattn.numbers.softmax.ExpRatio`; every
comparison is the value type's own (``==``, ``<``, exact by
Lindemann-Weierstrass).  Float results are compared by
:mod:`exactattn.verify.compare` in its rtol/atol mode, with the result's
:class:`~exactattn.verify.compare.Tolerance`: ``|got - want| <= atol + rtol *
M`` (``M`` the largest ``|value|`` of the output column, 1 for shares), two
results of one function within twice that.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Iterable, Sequence

import flint  # noqa: F401  (loaded with the checks, not inside the first example Hypothesis times)

from ..numbers.softmax import ExpRatio
from ..verify import compare
from .implementation import Result


def identity(n: int) -> list[list[Fraction]]:
    """The n x n identity: as values, it makes a function's outputs its shares."""
    return [[Fraction(int(i == j)) for j in range(n)] for i in range(n)]


def column_scales(values: Sequence[Sequence[Fraction]]) -> list[Fraction]:
    """``M`` of every column: its largest finite ``|value|`` (an ``inf``/``nan`` a mask hides is skipped)."""
    return [max((abs(e) for e in column if not isinstance(e, float)), default=Fraction(0))
            for column in zip(*values)]


# --------------------------------------------------------------------------- exact values
def _nan(x) -> bool:
    return isinstance(x, ExpRatio) and x.row.nan


def sign(x) -> int:
    """-1, 0 or 1 of an exact entry."""
    return x.sign() if isinstance(x, ExpRatio) else (x > 0) - (x < 0)


def exact_sum(xs: Iterable) -> Fraction | ExpRatio:
    """The exact sum of entries over one softmax normaliser (rationals may be mixed in).

    Raises:
        InputError: two irrational entries over different normalisers.
    """
    return sum(xs, Fraction(0))


# --------------------------------------------------------------------------- either kind
def is_nan(res: Result, x) -> bool:
    return _nan(x) if res.exact else math.isnan(x)


def same(res: Result, a, b, M: Fraction) -> bool:
    """Two results of the function agree: exactly, or within twice the tolerance."""
    if res.exact:
        return not _nan(a) and not _nan(b) and a == b
    return compare.agree(a, b, M, res.tolerance)


def equals(res: Result, got, want, M: Fraction) -> bool:
    """A result equals an exact value (``Fraction`` or ``ExpRatio``)."""
    if res.exact:
        return not _nan(got) and got == want
    return compare.within(got, want, M, res.tolerance)


def at_least(res: Result, got, lo: Fraction, M: Fraction) -> bool:
    if res.exact:
        return not _nan(got) and got >= lo
    return compare.at_least(got, lo, M, res.tolerance)


def at_most(res: Result, got, hi: Fraction, M: Fraction) -> bool:
    if res.exact:
        return not _nan(got) and got <= hi
    return compare.at_most(got, hi, M, res.tolerance)


def plus(res: Result, a, q: Fraction):
    """A result plus a rational: exactly, or in floats."""
    return a + q if res.exact else a + float(q)


def total(res: Result, xs: Sequence):
    """The sum of results: exactly, or ``math.fsum``."""
    return exact_sum(xs) if res.exact else math.fsum(xs)
