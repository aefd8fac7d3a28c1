"""One value protocol for exact and certified reals: ``==``, ``<``, ``hash`` from one comparison.

Shares, outputs, gradients, layer values, surds, log-sum-exps and symbolic
values are all :class:`Real`: each says how it compares with another value
(``_order``: the sign of ``self - other``, or ``NotImplemented`` for a value
it cannot compare exactly; two kinds that cannot compare either way refuse ``==``
with an :class:`~exactattn.errors.InputError` rather than say False), whether it is NaN, and its rational value when it
has one; ``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=`` and ``hash`` follow, in
the way :mod:`fractions` builds its comparisons on one ``_richcmp``.

The hash contract holds across every kind: a rational value hashes as its
``Fraction`` (so ``share == Fraction(1, 2)`` and ``hash(share) ==
hash(Fraction(1, 2))`` agree); an irrational one as its correctly rounded
30-place decimal (equal values, equal decimals); a NaN by identity (NaN
equals nothing, itself included).

>>> from fractions import Fraction
>>> from exactattn.numbers.softmax import SoftmaxRow
>>> half = SoftmaxRow([Fraction(0), Fraction(0)], None).share(0)
>>> half == Fraction(1, 2), hash(half) == hash(Fraction(1, 2)), half < 1, half >= Fraction(1, 2)
(True, True, True, True)
"""

from __future__ import annotations

from operator import ge, gt, le, lt

from ..errors import InputError
from .digits import certify, fraction_text, round_fraction

__all__ = ["Real"]


def _ordered(op):
    """The comparison ``op(self, other)`` from ``_order`` (NotImplemented passed on)."""
    def compare(self, other):
        c = self._order(other)
        return c if c is NotImplemented else op(c, 0)
    return compare


class Real:
    """The comparison and hash of an exact value, from ``_order``, ``_nan`` and ``rational``.

    Subclasses define ``_order(other)`` (-1, 0, 1 or ``NotImplemented``),
    ``rational()`` and ``ball(prec)``; they may refine ``_nan()`` (False),
    ``_equals(other)`` (``_order(other) == 0``: a faster test of equality),
    ``_minus_sign(q)`` (``sign(self - q)`` for a rational q: ``_order``) and
    ``_hash_value()``.  A ``_hash`` slot, when the subclass has one, caches the hash.
    The conversions follow: :meth:`decimal`, ``float()``, :meth:`as_fraction`,
    :meth:`exact` (with the subclass's ``closed_form()``) and
    :meth:`text` (with its ``_text()`` for an irrational value).
    """

    __slots__ = ()

    def _minus_sign(self, q) -> int:
        return self._order(q)

    def text(self, *args, **kwargs) -> str:
        """The closed form: ``nan``, a rational as itself (``1/2``), else the subclass's
        ``_text`` (which takes the arguments, such as a printed style)."""
        if self._nan():
            return "nan"
        q = self.rational()
        return fraction_text(q) if q is not None else self._text(*args, **kwargs)

    def decimal(self, places: int) -> str:
        """Correctly rounded decimal at ``places`` places (``nan`` for NaN); always terminates:
        rationals round exactly (ties to even), any other value from enclosures or, on a
        rounding boundary's doorstep, by the exact sign of its distance to it."""
        if self._nan():
            return "nan"
        q = self.rational()
        return round_fraction(q, places) if q is not None else \
            certify(self.ball, places, compare=self._minus_sign)

    def __float__(self) -> float:
        """The nearest binary64 float (correctly rounded, however small); nan for NaN."""
        if self._nan():
            return float("nan")
        from .formats import round_value
        return round_value(self, "float64")[0]

    def as_fraction(self):
        """The value as a ``Fraction``.

        Raises:
            InputError: the value is irrational (transcendental) or NaN.
        """
        q = self.rational()
        if q is None:
            raise InputError(f"value must be rational to be a Fraction (got {self.text()}); "
                             "use .decimal(places) or .ball(prec)")
        return q

    def exact(self):
        """The exact value: a ``Fraction`` when rational, else a sympy expression."""
        q = self.rational()
        return q if q is not None else self.closed_form()

    def _nan(self) -> bool:
        return False

    def _equals(self, other):
        c = self._order(other)
        return c if c is NotImplemented else c == 0

    def _hash_value(self) -> int:
        q = self.rational()
        if q is not None:
            return hash(q)
        return hash(("real", self.decimal(30)))

    def __eq__(self, other):
        if self._nan() or (isinstance(other, Real) and other._nan()):
            return False
        c = self._equals(other)
        if c is NotImplemented and isinstance(other, Real):
            c = other._equals(self)
            if c is NotImplemented:   # never Python's identity fallback: that would say False
                raise InputError(f"values must be of kinds that compare exactly (got "
                                 f"{type(self).__name__} and {type(other).__name__}); "
                                 "compare their decimals")
        return c

    __lt__, __le__, __gt__, __ge__ = (_ordered(op) for op in (lt, le, gt, ge))

    def __hash__(self) -> int:
        if self._nan():
            return id(self)
        cached = getattr(self, "_hash", None)
        if cached is not None:
            return cached
        h = self._hash_value()
        try:
            self._hash = h
        except AttributeError:
            pass
        return h
