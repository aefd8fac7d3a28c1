"""Exact shares: the row-wise softmax of scaled scores, as closed forms.

For a row of raw scores ``r_j`` (rational; ``None`` where the key is masked)
and a divisor ``sqrt(D)`` (``D`` rational, so sqrt(d_k) stays exact), the
share of key j is::

    shares[j] = exp(r_j / sqrt(D)) / sum_k exp(r_k / sqrt(D))

Every share and every output ``sum_j shares[j] * values[j]`` has the form
``sum_g A_g exp(g / sqrt(D)) / sum_g C_g exp(g / sqrt(D))`` where ``g`` runs
over the distinct gaps ``r_j - max_k r_k`` (all <= 0, the largest is 0), ``C_g``
counts the keys at gap g and ``A_g`` adds their values.  :class:`ExpRatio`
holds exactly that.  By the Lindemann-Weierstrass theorem the powers
``exp(g / sqrt(D))`` for distinct algebraic g are linearly independent over the
algebraic numbers, so such a ratio is rational exactly when ``A_g = q C_g`` for
one rational q and every g; :meth:`ExpRatio.rational` tests that, and every
other value is transcendental, which is why certified rounding
(:mod:`exactattn.digits`) always terminates.

Exactness: the closed forms are exact; decimals are certified (correctly
rounded).  Subtracting the row maximum is done on the rationals, before any
exponential, so no enclosure overflows (``exp(800)`` is never formed).

Reference: Vaswani et al. 2017, "Attention is all you need", sec. 3.2.1.

>>> row = SoftmaxRow([Fraction(25, 8), Fraction(0), Fraction(3, 4), Fraction(0)], Fraction(4))
>>> row.share(0).closed_form()
exp(25/16)/(exp(3/8) + 2 + exp(25/16))
>>> [row.share(j).decimal(4) for j in range(4)]
['0.5800', '0.1216', '0.1769', '0.1216']
>>> row.sum_is_one()
True
"""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from .errors import InputError

__all__ = ["EMPTY_ROW_POLICIES", "ExpRatio", "SoftmaxRow"]

EMPTY_ROW_POLICIES = ("zero", "uniform", "nan")


class SoftmaxRow:
    """The exact softmax of one row of raw scores divided by ``sqrt(D)``.

    Args:
        raw: the row's raw scores (``Fraction``); ``None`` marks a masked key.
        divisor_squared: ``D`` as a ``Fraction`` (the divisor is ``sqrt(D)``),
            or None for no scaling.
        empty_row: what a row with every key masked gives: ``"zero"`` (shares
            and output 0, as PyTorch and FlashAttention do today), ``"uniform"``
            (1/n each, what a finite fill value gives) or ``"nan"``.

    Counters (reported, not MACs): ``exps`` exponentials, ``adds`` additions
    in the normaliser, ``divs`` divisions, one per visible share.
    """

    def __init__(self, raw: Sequence[Fraction | None], divisor_squared: Fraction | None,
                 empty_row: str = "zero"):
        if empty_row not in EMPTY_ROW_POLICIES:
            raise InputError(
                f"empty_row must be one of {', '.join(EMPTY_ROW_POLICIES)} (got {empty_row!r})")
        self.raw = list(raw)
        self.divisor_squared = divisor_squared
        self.empty_row = empty_row
        visible = [r for r in self.raw if r is not None]
        self.empty = not visible
        if self.empty and empty_row == "uniform":
            self.raw = [Fraction(0)] * len(self.raw)
            visible = self.raw
        self.max_raw = max(visible) if visible else None
        self.gaps = [None if r is None or self.empty and empty_row != "uniform"
                     else r - self.max_raw for r in self.raw]
        counts: dict[Fraction, int] = {}
        for g in self.gaps:
            if g is not None:
                counts[g] = counts.get(g, 0) + 1
        self.counts = counts
        self.exps = len(counts)
        self.adds = max(len(visible) - 1, 0)
        self.divs = len(visible)

    def __len__(self) -> int:
        return len(self.raw)

    @property
    def nan(self) -> bool:
        return self.empty and self.empty_row == "nan"

    def combine(self, weights: Sequence[Fraction]) -> "ExpRatio":
        """``sum_j shares[j] * weights[j]`` as an exact ratio (masked keys skipped)."""
        num: dict[Fraction, Fraction] = {}
        for g, w in zip(self.gaps, weights):
            if g is not None:
                num[g] = num.get(g, 0) + w
        return ExpRatio(num, self)

    def share(self, j: int) -> "ExpRatio":
        """The exact share of key ``j``."""
        g = self.gaps[j]
        return ExpRatio({} if g is None else {g: Fraction(1)}, self)

    def shares(self) -> list["ExpRatio"]:
        return [self.share(j) for j in range(len(self.raw))]

    def sum_is_one(self) -> bool:
        """True: the numerators of the shares add up to the normaliser term by term.

        Each visible key contributes ``exp(g_j)`` once to the numerators and
        once to the normaliser, so the two sums are the same multiset of terms;
        the check compares them exactly (it is a proof, not a float sum).
        An empty row under the ``zero`` policy sums to 0 and returns False.
        """
        total: dict[Fraction, int] = {}
        for g in self.gaps:
            if g is not None:
                total[g] = total.get(g, 0) + 1
        return bool(total) and total == self.counts

    # numeric evaluation ------------------------------------------------
    def _exp_balls(self, prec: int) -> dict:
        cache = getattr(self, "_ball_cache", None)
        if cache is not None and cache[0] == prec:
            return cache[1]
        from flint import arb, fmpq
        scale = None if self.divisor_squared is None else \
            arb(fmpq(self.divisor_squared.numerator, self.divisor_squared.denominator)).sqrt()
        balls = {}
        for g in self.counts:
            a = arb(fmpq(g.numerator, g.denominator))
            if scale is not None:
                a = a / scale
            balls[g] = a.exp()
        self._ball_cache = (prec, balls)
        return balls

    def _normaliser(self, prec: int, balls: dict):
        """``sum_g C_g exp(g / sqrt(D))`` as a ball, summed once per row and precision."""
        cache = getattr(self, "_den_cache", None)
        if cache is not None and cache[0] == prec and cache[1] is balls:
            return cache[2]
        from flint import arb
        den = arb(0)
        for g, c in self.counts.items():
            den += c * balls[g]
        self._den_cache = (prec, balls, den)
        return den

    def _exp_sym(self, g: Fraction):
        import sympy
        r = sympy.Rational(g.numerator, g.denominator) + \
            sympy.Rational(self.max_raw.numerator, self.max_raw.denominator)
        if self.divisor_squared is not None:
            d = self.divisor_squared
            r = r / sympy.sqrt(sympy.Rational(d.numerator, d.denominator))
        return sympy.exp(r)


class ExpRatio:
    """``sum_g A_g exp(g/sqrt(D)) / sum_g C_g exp(g/sqrt(D))`` for one softmax row.

    ``numerators`` maps each gap g to ``A_g``; the normaliser comes from the row.
    A share has one term with coefficient 1; an output adds the values.
    """

    __slots__ = ("numerators", "row")

    def __init__(self, numerators: dict, row: SoftmaxRow):
        self.numerators = {g: a for g, a in numerators.items() if a != 0}
        self.row = row

    def rational(self) -> Fraction | None:
        """The value as a ``Fraction`` when it is rational, else None.

        >>> SoftmaxRow([Fraction(0), Fraction(0)], None).share(0).rational()
        Fraction(1, 2)
        """
        row = self.row
        if row.nan:
            return None
        if row.empty and not row.counts:  # 'uniform' empty rows average every key
            return Fraction(0)
        if len(self.numerators) < len(row.counts) and self.numerators:
            return None  # some gap has A_g = 0 while another has A_g != 0
        q = None
        for g, c in row.counts.items():
            ratio = Fraction(self.numerators.get(g, 0)) / c
            if q is None:
                q = ratio
            elif ratio != q:
                return None
        return q

    def exact(self):
        """The exact value: a ``Fraction`` when rational, else a sympy expression."""
        q = self.rational()
        return q if q is not None else self.closed_form()

    def closed_form(self):
        """The sympy closed form, written with the scaled scores (not the gaps)."""
        import sympy
        row = self.row
        if row.nan:
            return sympy.nan
        if row.empty and not row.counts:  # 'uniform' empty rows average every key
            return sympy.Integer(0)
        num = sympy.Add(*[sympy.Rational(a.numerator, a.denominator) * row._exp_sym(g)
                          for g, a in self.numerators.items()])
        den = sympy.Add(*[c * row._exp_sym(g) for g, c in row.counts.items()])
        return num / den

    def ball(self, prec: int):
        """An ``arb`` enclosure at ``prec`` bits (set by the caller's context)."""
        from flint import arb, fmpq
        row = self.row
        if row.nan:
            return arb.nan()
        if row.empty and not row.counts:  # 'uniform' empty rows average every key
            return arb(0)
        balls = row._exp_balls(prec)
        den = row._normaliser(prec, balls)
        num = arb(0)
        for g, a in self.numerators.items():
            num += arb(fmpq(a.numerator, a.denominator)) * balls[g]
        return num / den

    def decimal(self, places: int) -> str:
        """Correctly rounded decimal at ``places`` places ("nan" for a NaN row)."""
        from .digits import certify, round_fraction
        if self.row.nan:
            return "nan"
        q = self.rational()
        if q is not None:
            return round_fraction(q, places)
        return certify(self.ball, places)

    def __repr__(self) -> str:
        return f"ExpRatio({self.closed_form()})"
