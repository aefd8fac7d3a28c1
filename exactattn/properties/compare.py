"""How results are compared: exactly for exact functions, within the tolerance for float ones.

Exact entries are ``Fraction`` or :class:`~exactattn.softmax.ExpRatio`; every
comparison is the value type's own (``==``, ``<``, exact by
Lindemann-Weierstrass).  A float result ``got`` passes against an exact
``want`` when ``|got - want| <= atol + rtol * M`` (``M`` the largest
``|value|`` of the output column, 1 for shares), and two float results of
one function agree within twice that.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Iterable, Sequence

import flint  # noqa: F401  (loaded with the checks, not inside the first example Hypothesis times)

from ..softmax import ExpRatio
from .implementation import Result

__all__ = ["at_least", "at_most", "column_scales", "equals", "exact_sum", "identity", "is_nan",
           "plus", "same", "sign", "total"]


def identity(n: int) -> list[list[Fraction]]:
    """The n x n identity: as values, it makes a function's outputs its shares."""
    return [[Fraction(int(i == j)) for j in range(n)] for i in range(n)]


def column_scales(values: Sequence[Sequence[Fraction]]) -> list[Fraction]:
    """``M`` of every column: its largest ``|value|``."""
    return [max(abs(e) for e in column) for column in zip(*values)]


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


def _tol(res: Result, M: Fraction) -> float:
    return res.atol + res.rtol * float(M)


def same(res: Result, a, b, M: Fraction) -> bool:
    """Two results of the function agree: exactly, or within twice the tolerance."""
    if res.exact:
        return not _nan(a) and not _nan(b) and a == b
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= 2 * _tol(res, M)


def equals(res: Result, got, want, M: Fraction) -> bool:
    """A result equals an exact value (``Fraction`` or ``ExpRatio``)."""
    if res.exact:
        return not _nan(got) and got == want
    return math.isfinite(got) and abs(got - float(want)) <= _tol(res, M)


def at_least(res: Result, got, lo: Fraction, M: Fraction) -> bool:
    if res.exact:
        return not _nan(got) and got >= lo
    return math.isfinite(got) and got >= float(lo) - _tol(res, M)


def at_most(res: Result, got, hi: Fraction, M: Fraction) -> bool:
    if res.exact:
        return not _nan(got) and got <= hi
    return math.isfinite(got) and got <= float(hi) + _tol(res, M)


def plus(res: Result, a, q: Fraction):
    """A result plus a rational: exactly, or in floats."""
    return a + q if res.exact else a + float(q)


def total(res: Result, xs: Sequence):
    """The sum of results: exactly, or ``math.fsum``."""
    return exact_sum(xs) if res.exact else math.fsum(xs)
