"""Exact shares: the row-wise softmax of scaled scores, as values like ``Fraction``.

For a row of raw scores ``r_j`` (rational; ``None`` where the key is hidden),
a divisor ``sqrt(D)`` (``D`` rational, so sqrt(d_k) stays exact) and optional
additive offsets ``m_j`` (an additive mask, a bias), the share of key j is::

    shares[j] = exp(r_j / sqrt(D) + m_j) / sum_k exp(r_k / sqrt(D) + m_k)

Every share and every output ``sum_j shares[j] * values[j]`` has the form
``sum_e A_e exp(e) / sum_e C_e exp(e)`` where ``e`` runs over the distinct
exponents of the row, ``C_e`` counts the keys at exponent e and ``A_e`` adds
their values.  :class:`ExpRatio` holds exactly that, relative to the row's
largest exponent (the gaps, all <= 0).  By the Lindemann-Weierstrass theorem
the powers ``exp(e)`` for distinct algebraic e are linearly independent over
the algebraic numbers, so:

* such a ratio is rational exactly when ``A_e = q C_e`` for one rational q
  (:meth:`ExpRatio.rational`);
* two ratios are equal exactly when ``num1 den2 - num2 den1`` collects to the
  zero exponential polynomial, and otherwise its sign is decided by ball
  arithmetic at a precision that always suffices (:meth:`ExpRatio.sign`);
* every certified rounding terminates: a value on a rounding boundary is
  rational, and one beside it is decided by the exact sign of its distance to
  the boundary (:meth:`ExpRatio.decimal`).

Exponents are exact (rationals, or ``a / sqrt(D) + b``; see
:mod:`exactattn.exponents`).

Exactness: the values are exact; decimals are certified (correctly rounded).
The row maximum is subtracted on the rationals, before any exponential, so no
enclosure overflows (``exp(800)`` is never formed).

Reference: Vaswani et al. 2017, "Attention is all you need", sec. 3.2.1.

>>> row = SoftmaxRow([Fraction(25, 8), Fraction(0), Fraction(3, 4), Fraction(0)], Fraction(4))
>>> row.share(0).text()
'exp(25/16)/(2 + exp(3/8) + exp(25/16))'
>>> [row.share(j).decimal(4) for j in range(4)]
['0.5800', '0.1216', '0.1769', '0.1216']
>>> row.share(1) == row.share(3), row.share(1) < row.share(2), row.sum_is_one()
(True, True, True)
"""

from __future__ import annotations

from fractions import Fraction
from functools import total_ordering
from typing import Sequence

from .call import EMPTY_ROWS
from .options import check_choice
from .digits import certify, fraction_text, round_fraction
from .errors import InputError
from .exact import rational_sqrt
from .exponents import Exponent, ExpPoly, exponent_text, fmpq_of, inv_sqrt_ball, sum_text

__all__ = ["ExpRatio", "SoftmaxRow"]


# --------------------------------------------------------------------------- rows
class SoftmaxRow:
    """The exact softmax of one row of raw scores divided by ``sqrt(D)``, plus offsets.

    Args:
        raw: the row's raw scores (``Fraction``); ``None`` marks a hidden key.
        divisor_squared: ``D`` as a ``Fraction`` (the divisor is ``sqrt(D)``),
            or None for no scaling.
        empty_row: what a row with every key hidden gives: ``"zero"`` (shares
            and output 0), ``"uniform"`` (1/n each) or ``"nan"``.
        offsets: optional rationals added to the scaled scores (an additive
            mask or bias), one per key.

    ``gaps[j]`` is key j's exponent minus the row's largest, None if hidden:
    a ``Fraction`` g (exponent ``g / sqrt(D)``, or ``g`` with no divisor) or,
    with offsets and an irrational divisor, a pair ``(g, m)`` (exponent
    ``g / sqrt(D) + m``).  ``counts`` maps each gap to its number of keys.

    Counters (reported, not MACs): ``exps`` exponentials, ``adds`` additions
    in the normaliser, ``divs`` divisions, one per visible share.
    """

    def __init__(self, raw: Sequence[Fraction | None], divisor_squared: Fraction | None,
                 empty_row: str = "zero", offsets: Sequence[Fraction] | None = None):
        check_choice(empty_row, "empty_row", EMPTY_ROWS)
        raw = list(raw)
        self.empty_row = empty_row
        self.empty = all(r is None for r in raw)
        if self.empty and empty_row == "uniform":
            raw, offsets = [Fraction(0)] * len(raw), None
        root = None if divisor_squared is None else rational_sqrt(divisor_squared)
        paired = False
        if offsets is not None and any(m for r, m in zip(raw, offsets) if r is not None):
            if divisor_squared is None:
                raw = [None if r is None else r + m for r, m in zip(raw, offsets)]
            elif root is not None:       # r/root + m = (r + m root)/root
                raw = [None if r is None else r + m * root for r, m in zip(raw, offsets)]
            else:
                paired = True
                raw = [None if r is None else (r, Fraction(m)) for r, m in zip(raw, offsets)]
        self.raw = raw
        self.divisor_squared = divisor_squared
        self._root = root
        self.paired = paired
        visible = [r for r in raw if r is not None]
        self.max_raw = (max(visible, key=self._order_key) if paired else max(visible)) \
            if visible else None
        if paired:
            self.gaps = [None if r is None else (r[0] - self.max_raw[0], r[1] - self.max_raw[1])
                         for r in raw]
        else:
            self.gaps = [None if r is None else r - self.max_raw for r in raw]
        counts: dict = {}
        for g in self.gaps:
            if g is not None:
                counts[g] = counts.get(g, 0) + 1
        self.counts = counts
        self.exps = len(counts)
        self.adds = max(len(visible) - 1, 0)
        self.divs = len(visible)

    def same_normaliser(self, other: "SoftmaxRow") -> bool:
        """True when both rows have the same normaliser term by term (so values over them add)."""
        return self is other or (self.counts == other.counts and self.max_raw == other.max_raw
                                 and self.divisor_squared == other.divisor_squared
                                 and self.paired == other.paired)

    def _order_key(self, pair):
        """A sort key for exponents g/sqrt(D) + m that orders them exactly."""
        return Exponent(pair[0], pair[1], self.divisor_squared)

    def __len__(self) -> int:
        return len(self.raw)

    @property
    def nan(self) -> bool:
        return self.empty and self.empty_row == "nan"

    def combine(self, values: Sequence[Fraction]) -> "ExpRatio":
        """``sum_j shares[j] * values[j]`` as an exact ratio (hidden keys skipped)."""
        num: dict = {}
        for g, w in zip(self.gaps, values):
            if g is not None:
                num[g] = num.get(g, 0) + w
        return ExpRatio(num, self)

    def share(self, j: int) -> "ExpRatio":
        """The exact share of key ``j``."""
        g = self.gaps[j]
        return ExpRatio({} if g is None else {g: Fraction(1)}, self)

    def shares(self) -> list["ExpRatio"]:
        return [self.share(j) for j in range(len(self.raw))]

    def largest(self) -> list[int]:
        """The keys with the largest share (the row's maximum exponent), in order."""
        top = (0, 0) if self.paired else 0
        return [j for j, g in enumerate(self.gaps) if g is not None and g == top]

    def sum_is_one(self) -> bool:
        """True: the numerators of the shares add up to the normaliser term by term.

        Each visible key contributes ``exp(g_j)`` once to the numerators and
        once to the normaliser, so the two sums are the same multiset of terms;
        the check compares them exactly (it is a proof, not a float sum).
        An empty row under the ``zero`` policy sums to 0 and returns False.
        """
        total: dict = {}
        for g in self.gaps:
            if g is not None:
                total[g] = total.get(g, 0) + 1
        return bool(total) and total == self.counts

    # -- exact exponents -----------------------------------------------------
    def exponent(self, g) -> tuple[tuple, tuple]:
        """The absolute exponent of gap ``g`` as ``(basis, (p, a))``: ``p + a/sqrt(basis[0])``."""
        if self.paired:
            return (self.divisor_squared,), (g[1] + self.max_raw[1], g[0] + self.max_raw[0])
        s = g + self.max_raw
        if self.divisor_squared is None:
            return (), (s,)
        if self._root is not None:
            return (), (s / self._root,)
        return (self.divisor_squared,), (Fraction(0), s)

    def _poly(self, coefficients: dict) -> ExpPoly:
        terms, basis = {}, ()
        for g, c in coefficients.items():
            basis, key = self.exponent(g)
            terms[key] = terms.get(key, 0) + c
        return ExpPoly(basis, terms)

    # -- numeric evaluation --------------------------------------------------
    def exp_balls(self, prec: int) -> dict:
        """``{gap: ball of exp(gap exponent)}`` at ``prec`` bits (cached per precision)."""
        cache = getattr(self, "_ball_cache", None)
        if cache is not None and cache[0] == prec:
            return cache[1]
        from flint import arb
        inv = None if self.divisor_squared is None else inv_sqrt_ball(self.divisor_squared)
        # a term below exp(-K) (K = prec + 64 > (prec + 64) ln 2) is enclosed by [0, 2^-K]
        # without computing exp to the precision its exponent would need: a gap of
        # 10^8000 costs no more than a gap of 1
        K = prec + 64
        bound = K * K * (1 if self.divisor_squared is None else self.divisor_squared)
        negligible = arb(0, arb(2) ** -K)
        balls = {}
        for g in self.counts:
            if self.paired:
                balls[g] = (arb(fmpq_of(g[0])) * inv + arb(fmpq_of(g[1]))).exp()
            elif g < -K and g * g > bound:
                balls[g] = negligible
            else:
                a = arb(fmpq_of(g))
                balls[g] = (a if inv is None else a * inv).exp()
        self._ball_cache = (prec, balls)
        return balls

    def normaliser(self, prec: int, balls: dict):
        """``sum_g C_g exp(g)`` as a ball, summed once per row and precision."""
        cache = getattr(self, "_den_cache", None)
        if cache is not None and cache[0] == prec and cache[1] is balls:
            return cache[2]
        from flint import arb
        den = arb(0)
        for g, c in self.counts.items():
            den += c * balls[g]
        self._den_cache = (prec, balls, den)
        return den

    def term(self, g):
        """The sympy closed form of ``exp`` at gap g's absolute exponent (scaled score)."""
        import sympy
        basis, e = self.exponent(g)
        x = sympy.Rational(e[0].numerator, e[0].denominator)
        if basis:
            D = basis[0]
            a = e[1]
            x += sympy.Rational(a.numerator, a.denominator) / sympy.sqrt(
                sympy.Rational(D.numerator, D.denominator))
        return sympy.exp(x)

    def term_text(self, g) -> str:
        """``exp(...)`` of gap g's absolute exponent, written with the scaled score."""
        return exponent_text(*self.exponent(g))


# --------------------------------------------------------------------------- the value type
@total_ordering
class ExpRatio:
    """An exact share or output: ``sum_g A_g exp(g) / sum_g C_g exp(g)`` over one softmax row.

    Behaves like ``fractions.Fraction``: immutable, ``==``/``<`` compare values
    exactly (also against ``Fraction`` and ``int``), equal values hash alike,
    and conversions are explicit (:meth:`rational`, :meth:`decimal`,
    :meth:`text`, :meth:`closed_form`, :meth:`ball`, ``float()``).

    ``numerators`` maps each gap g to ``A_g``; the normaliser comes from the row.
    A share has one term with coefficient 1; an output adds the values.

    >>> a = SoftmaxRow([Fraction(1), Fraction(0)], None).share(0)        # e/(1 + e)
    >>> b = SoftmaxRow([Fraction(2), Fraction(1)], None).share(0)        # e^2/(e + e^2)
    >>> a == b, hash(a) == hash(b), a > Fraction(1, 2), a.text()
    (True, True, True, 'exp(1)/(1 + exp(1))')
    """

    __slots__ = ("numerators", "row", "_hash")

    def __init__(self, numerators: dict, row: SoftmaxRow):
        self.numerators = {g: a for g, a in numerators.items() if a != 0}
        self.row = row
        self._hash = None

    # -- exact structure -----------------------------------------------------
    def rational(self) -> Fraction | None:
        """The value as a ``Fraction`` when it is rational, else None.

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

    def is_rational(self) -> bool:
        return self.rational() is not None

    def as_fraction(self) -> Fraction:
        """The value as a ``Fraction``.

        Raises:
            InputError: the value is irrational (transcendental) or NaN.
        """
        q = self.rational()
        if q is None:
            raise InputError(f"value must be rational to be a Fraction (got {self.text()}); "
                             "use .decimal(places) or .ball(prec)")
        return q

    def _polys(self) -> tuple[ExpPoly, ExpPoly]:
        row = self.row
        return row._poly(self.numerators), row._poly(row.counts)

    def _check_number(self) -> None:
        if self.row.nan:
            raise InputError("value must be a number to be compared (got nan: an empty row "
                             "under empty_row='nan')")

    def sign(self) -> int:
        """-1, 0 or 1, exactly (the normaliser is positive)."""
        self._check_number()
        if not self.row.counts:
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
        n1, d1 = self._polys()
        n2, d2 = other._polys()
        return n1.times_minus(d2, n2, d1).sign()

    def __eq__(self, other) -> bool:
        if self.row.nan or (isinstance(other, ExpRatio) and other.row.nan):
            return False
        c = self._compare(other)
        return NotImplemented if c is NotImplemented else c == 0

    def __lt__(self, other) -> bool:
        c = self._compare(other)
        return NotImplemented if c is NotImplemented else c < 0

    def __hash__(self) -> int:
        if self._hash is None:
            q = self.rational()
            if q is not None:
                self._hash = hash(q)
            elif self.row.nan:
                self._hash = id(self)
            else:   # equal values have equal correctly rounded decimals
                self._hash = hash(("ExpRatio", self.decimal(30)))
        return self._hash

    def __float__(self) -> float:
        """The nearest binary64 float (via a certified 20-digit decimal); nan for a NaN row."""
        if self.row.nan:
            return float("nan")
        q = self.rational()
        return float(q) if q is not None else float(self.decimal(20))

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
                return ExpRatio({0: Fraction(other)}, SoftmaxRow([Fraction(0)], None))
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
        if not row.counts:
            return sympy.Integer(0)
        num = sympy.Add(*[sympy.Rational(a.numerator, a.denominator) * row.term(g)
                          for g, a in self.numerators.items()])
        den = sympy.Add(*[c * row.term(g) for g, c in row.counts.items()])
        return num / den

    def text(self) -> str:
        """The closed form as a string, built without sympy: ``exp(1)/(1 + exp(1))``.

        Rational values print as themselves (``1/2``); terms are listed by
        increasing exponent, the scores written scaled.
        """
        row = self.row
        if row.nan:
            return "nan"
        q = self.rational()
        if q is not None:
            return fraction_text(q)
        num = _sum_text(row, self.numerators)
        if len(self.numerators) > 1:
            num = f"({num})"
        return f"{num}/({_sum_text(row, row.counts)})"

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

    def decimal(self, places: int) -> str:
        """Correctly rounded decimal at ``places`` places ("nan" for a NaN row).

        Always terminates: rationals round exactly (ties to even); any other
        value is decided from enclosures, or, when it lies extremely close to
        a rounding boundary, by the exact sign of its distance to it.
        """
        if self.row.nan:
            return "nan"
        q = self.rational()
        if q is not None:
            return round_fraction(q, places)
        return certify(self.ball, places, compare=self._compare)

    def __repr__(self) -> str:
        return f"ExpRatio({self.text()})"


def _sum_text(row: SoftmaxRow, coefficients: dict) -> str:
    terms = []
    for g, c in coefficients.items():
        basis, e = row.exponent(g)
        key = Exponent(e[-1], e[0], basis[0]) if basis else e[0]
        terms.append((key, row.term_text(g), Fraction(c)))
    return sum_text(terms)
