"""The log-sum-exp of a softmax row: what fused kernels return beside the output.

For a row with logits ``x_j`` over its visible keys (and a sink, if any),
``lse = log(sum_j exp(x_j))`` in natural-log units, or ``lse / log 2`` in
base 2.  A fully masked row has ``lse = -inf``.

Exactness: by the Lindemann-Weierstrass theorem ``sum_j c_j exp(x_j)`` equals
``exp(q)`` (or ``2^q``) for a rational q only when the row is a single key
(``lse`` is its logit) or, in base 2, ``c`` keys at logit 0 with c a power of
two.  Those values are exact; every other lse is transcendental, never on a
rounding boundary, and its digits are certified from enclosures (the side of
a nearby boundary decided exactly).  Over rotary or soft-capped logits the
digits come from enclosures, a comparison of differing forms up to a bound.
Two log-sum-exps compare as their normalisers do, so equal values reached by
different paths are ``==`` and hash alike.

>>> from fractions import Fraction as F
>>> from exactattn.numbers.softmax import SoftmaxRow
>>> lse = LogSumExp(SoftmaxRow([F(1), F(2), F(3)], None))
>>> lse.text(), lse.decimal(10), LogSumExp(lse.row, base=2).decimal(10)
('log(exp(1) + exp(2) + exp(3))', '3.4076059644', '4.9161362262')
>>> LogSumExp(SoftmaxRow([None, None], None)).decimal(4)
'-inf'
"""

from __future__ import annotations

from fractions import Fraction

from .digits import enclosure_sign
from ..errors import InputError
from .exponents import ExpPoly
from .real import Real
from ..options import check_choice
from .ratio import row_sum_text
from .reals import real_compare
from .softmax import SoftmaxRow
from .exact import fmpq_of


LSE_BASES = ("e", "2")


def check_base(value, name: str = "lse base") -> str:
    """A log-sum-exp base: ``"e"`` (natural log) or ``"2"`` (the whole number 2 reads as ``"2"``).

    >>> check_base(2)
    '2'
    >>> check_base("10", "--lse")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: --lse must be one of e, 2 (got '10')
    """
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    return check_choice(value, name, LSE_BASES)


class LogSumExp(Real):
    """``log(sum exp(logits))`` of one :class:`~exactattn.numbers.softmax.SoftmaxRow` (sink included).

    Args:
        row: the softmax row.
        base: ``"e"`` (natural log, the default) or ``"2"`` (``log2``).
    """

    def __init__(self, row: SoftmaxRow, base="e"):
        self.row, self.base = row, check_base(base)

    @property
    def neg_inf(self) -> bool:
        """True for a row that sees no key and has no sink: ``log 0``, under every empty-row
        answer (``uniform`` gives such a row shares, not a normaliser)."""
        return not self.row.counts or self.row.empty

    def exact(self):
        """The value when it is algebraic (a Fraction or Surd), else None (transcendental)."""
        row = self.row
        if self.neg_inf or row.nan or len(row.counts) != 1:
            return None
        (g, c), = row.counts.items()
        x = row.logit(g)
        if self.base == "e":
            return x if c == 1 else None
        if x == 0 and c & (c - 1) == 0:
            return Fraction(c.bit_length() - 1)
        return None

    def rational(self) -> Fraction | None:
        """The value as a ``Fraction`` when it is rational (one key, or 2^k keys at 0 in base 2), else None."""
        x = self.exact()
        return x if isinstance(x, Fraction) else None

    def _order(self, other) -> int:
        """sign(lse - other) for a rational or another LogSumExp (-inf is below every number).

        Two log-sum-exps in one base compare as their normalisers do (log is
        increasing), exactly: ``log(1 + e)`` reached through a key and through a sink
        are equal.
        """
        lse = isinstance(other, LogSumExp)
        if not lse and (not isinstance(other, (int, Fraction)) or isinstance(other, bool)):
            return NotImplemented
        if self.row.nan or lse and other.row.nan:
            raise InputError("lse must be a number to be compared (got nan: an empty row under "
                             "empty_row='nan')")
        if lse:
            if self.neg_inf or other.neg_inf:
                return (not self.neg_inf) - (not other.neg_inf)
            if self.base != other.base:
                q = other.rational()
                if q is not None:
                    return self._order(q)
                if self.rational() is not None:
                    return -other._order(self.rational())
                return enclosure_sign(lambda prec: self.ball(prec) - other.ball(prec),
                                      lambda: f"{self.text()} - {other.text()}")
            return (self.row.poly(self.row.counts) - other.row.poly(other.row.counts)).sign()
        if self.neg_inf:
            return -1
        x, q, row = self.exact(), Fraction(other), self.row
        if x is not None:
            return real_compare(x, q)
        if self.base == "e":        # the value is not q (see the module notes)
            return (row.poly(row.counts) - ExpPoly((), {(q,): Fraction(1)})).sign()
        from flint import arb
        return enclosure_sign(lambda prec: self.ball(prec) - arb(fmpq_of(q)),
                              lambda: f"{self.text()} - {q}", bounded=row.certified)

    def _nan(self) -> bool:
        return self.row.nan

    def _hash_value(self) -> int:
        # equal values (in either base) have equal correctly rounded decimals
        return hash(float("-inf")) if self.neg_inf else super()._hash_value()

    def ball(self, prec: int):
        from flint import arb
        row = self.row      # the row maximum plus the log of the sum of exp(gaps) <= count
        shift = row.shift_ball(prec)
        value = shift + row.normaliser(prec, row.exp_balls(prec)).log()
        return value / arb(2).log() if self.base == "2" else value

    def decimal(self, places: int) -> str:
        """Certified decimal at ``places`` places (:meth:`Real.decimal`); ``-inf`` for a fully
        masked row."""
        return "-inf" if self.neg_inf and not self.row.nan else super().decimal(places)

    def text(self) -> str:
        """The closed form: ``log(exp(1) + exp(2) + exp(3))`` (``log2(...)`` in base 2)."""
        if self.row.nan:
            return "nan"
        if self.neg_inf:
            return "-inf"
        inner = row_sum_text(self.row, self.row.counts)
        return f"{'log2' if self.base == '2' else 'log'}({inner})"

    def __repr__(self) -> str:
        return f"LogSumExp({self.text()})"
