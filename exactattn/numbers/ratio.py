"""The value type of an exact share or output: :class:`ExpRatio`, ``sum A exp(e) / sum C exp(e)``.

An :class:`ExpRatio` is a ratio over one softmax row (a
:class:`~exactattn.numbers.softmax.SoftmaxRow`): the numerator's coefficients per
exponent, the normaliser from the row.  See :mod:`exactattn.numbers.softmax` for why
equality, sign and rounding are exact (Lindemann-Weierstrass).  Over a row of
certified (transcendental) logits, such as soft-capped scores, the same value
type decides equality by structure and digits by enclosures (see
:mod:`exactattn.numbers.reals`).

>>> from exactattn.numbers.softmax import SoftmaxRow
>>> row = SoftmaxRow([Fraction(1), Fraction(0)], None)
>>> row.share(0).text(), row.share(0).decimal(4)
('exp(1)/(1 + exp(1))', '0.7311')
"""

from __future__ import annotations

from fractions import Fraction

from ..errors import InputError
from .exponents import ExpPoly, sum_text
from .exact import fmpq_of
from .real import Real

__all__ = ["ExpRatio"]


# --------------------------------------------------------------------------- the value type
class ExpRatio(Real):
    """An exact share or output: ``sum_g A_g exp(g) / sum_g C_g exp(g)`` over one softmax row.

    Behaves like ``fractions.Fraction``: immutable, ``==``/``<`` compare values
    exactly (also against ``Fraction`` and ``int``), equal values hash alike,
    and conversions are explicit (:meth:`rational`, :meth:`decimal`,
    :meth:`text`, :meth:`closed_form`, :meth:`ball`, ``float()``).

    ``numerators`` maps each gap g to ``A_g``; the normaliser comes from the row.
    A share has one term with coefficient 1; an output adds the values.

    >>> from exactattn.numbers.softmax import SoftmaxRow
    >>> a = SoftmaxRow([Fraction(1), Fraction(0)], None).share(0)        # e/(1 + e)
    >>> b = SoftmaxRow([Fraction(2), Fraction(1)], None).share(0)        # e^2/(e + e^2)
    >>> a == b, hash(a) == hash(b), a > Fraction(1, 2), a.text()
    (True, True, True, 'exp(1)/(1 + exp(1))')
    """

    __slots__ = ("numerators", "row", "_hash")

    def __init__(self, numerators: dict, row):
        self.numerators = {g: a for g, a in numerators.items() if a != 0}
        self.row = row
        self._hash = None

    # -- exact structure -----------------------------------------------------
    def rational(self) -> Fraction | None:
        """The value as a ``Fraction`` when it is rational, else None.

        >>> from exactattn.numbers.softmax import SoftmaxRow
        >>> SoftmaxRow([Fraction(0), Fraction(0)], None).share(0).rational()
        Fraction(1, 2)
        """
        row = self.row
        if row.nan:
            return None
        if not row.counts:
            return Fraction(0)
        if self.numerators and len(self.numerators) < len(row.counts):
            return None  # some gap has A_g = 0 while another has A_g != 0
        q = None
        for g, c in row.counts.items():
            ratio = Fraction(self.numerators.get(g, 0)) / c
            if q is None:
                q = ratio
            elif ratio != q:
                return None
        return q

    def _polys(self) -> tuple[ExpPoly, ExpPoly]:
        row = self.row
        return row.poly(self.numerators), row.poly(row.counts)

    def _check_number(self) -> None:
        if self.row.nan:
            raise InputError("value must be a number to be compared (got nan: an empty row "
                             "under empty_row='nan')")

    def sign(self) -> int:
        """-1, 0 or 1, exactly (the normaliser is positive).

        Over rotary or soft-capped logits: 0 when every numerator coefficient is 0,
        else from enclosures up to a bound (:meth:`ExpPoly.sign <exactattn.numbers.exponents.ExpPoly.sign>`).
        """
        self._check_number()
        if not self.row.counts or not self.numerators:
            return 0
        return self._polys()[0].sign()

    def _compare(self, other) -> int:
        """sign(self - other), exactly."""
        self._check_number()
        if isinstance(other, (int, Fraction)) and not isinstance(other, bool):
            q = self.rational()
            if q is not None:
                return (q > other) - (q < other)
            num, den = self._polys()
            one = ExpPoly((), {(Fraction(0),): Fraction(other)})
            return num.times_minus(ExpPoly((), {(Fraction(0),): Fraction(1)}), den, one).sign()
        if not isinstance(other, ExpRatio):
            return NotImplemented
        other._check_number()
        q1, q2 = self.rational(), other.rational()
        if q1 is not None and q2 is not None:
            return (q1 > q2) - (q1 < q2)
        if not self.row.counts or not other.row.counts:   # an empty row's 0
            return self._compare(Fraction(0)) if not other.row.counts else \
                -other._compare(Fraction(0))
        if self.row.same_normaliser(other.row):
            if self.numerators == other.numerators:
                return 0
            one = ExpPoly((), {(Fraction(0),): Fraction(1)})     # one positive normaliser:
            return self._polys()[0].times_minus(one, other._polys()[0], one).sign()  # numerators
        n1, d1 = self._polys()
        n2, d2 = other._polys()
        return n1.times_minus(d2, n2, d1).sign()

    def _order(self, other) -> int:
        return self._compare(other)

    def _nan(self) -> bool:
        return self.row.nan

    # -- arithmetic over one normaliser ----------------------------------------
    def __add__(self, other):
        """``self + other`` exactly, for a rational other or an ExpRatio over the same normaliser.

        Raises:
            InputError: two values over different normalisers (their sum is
                not a ratio over one row).
        """
        row = self.row
        if isinstance(other, (int, Fraction)) and not isinstance(other, bool):
            if row.nan or not other:
                return self
            if not row.counts:                # an empty row's 0, plus q
                return ExpRatio({0: Fraction(other)}, type(row)([Fraction(0)], None))
            return ExpRatio({g: self.numerators.get(g, 0) + other * c
                             for g, c in row.counts.items()}, row)
        if not isinstance(other, ExpRatio):
            return NotImplemented
        if row.nan:
            return self
        if other.row.nan:
            return other
        q = other.rational()
        if q is not None:
            return self + q
        q = self.rational()
        if q is not None:
            return other + q
        if not row.same_normaliser(other.row):
            raise InputError(f"values must share one softmax normaliser to be added exactly "
                             f"(got {self.text()} and {other.text()})")
        num = dict(self.numerators)
        for g, a in other.numerators.items():
            num[g] = num.get(g, 0) + a
        return ExpRatio(num, row)

    __radd__ = __add__

    def __neg__(self) -> "ExpRatio":
        return ExpRatio({g: -a for g, a in self.numerators.items()}, self.row)

    def __sub__(self, other):
        return self + (-other)

    def __rsub__(self, other):
        return (-self) + other

    # -- views ---------------------------------------------------------------
    def closed_form(self):
        """The sympy closed form, written with the scaled scores (not the gaps)."""
        import sympy
        row = self.row
        if row.nan:
            return sympy.nan
        if not row.counts:
            return sympy.Integer(0)
        num = sympy.Add(*[sympy.Rational(a.numerator, a.denominator) * row.term(g)
                          for g, a in self.numerators.items()])
        den = sympy.Add(*[c * row.term(g) for g, c in row.counts.items()])
        return num / den

    def _text(self) -> str:
        """The closed form as a string, built without sympy: ``exp(1)/(1 + exp(1))``.

        Rational values print as themselves (``1/2``, :meth:`Real.text`); terms are
        listed by increasing exponent, the scores written scaled.
        """
        row = self.row
        num = row_sum_text(row, self.numerators)
        if len(self.numerators) > 1:
            num = f"({num})"
        return f"{num}/({row_sum_text(row, row.counts)})"

    def ball(self, prec: int):
        """An ``arb`` enclosure computed at ``prec`` bits (set by the caller's context)."""
        from flint import arb
        row = self.row
        if row.nan:
            return arb.nan()
        if not row.counts:
            return arb(0)
        balls = row.exp_balls(prec)
        den = row.normaliser(prec, balls)
        num = arb(0)
        for g, a in self.numerators.items():
            num += arb(fmpq_of(Fraction(a))) * balls[g]
        return num / den

    def __repr__(self) -> str:
        return f"ExpRatio({self.text()})"


def row_sum_text(row, coefficients: dict) -> str:
    """``sum_g c_g exp(g)`` over a softmax row, written by increasing exponent."""
    return sum_text([(row.order_key(g), row.term_text(g), Fraction(c))
                     for g, c in coefficients.items()])
