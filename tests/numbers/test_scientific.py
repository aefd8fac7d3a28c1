"""Certified scientific notation near powers of ten.

A first guess of the decimal exponent one too high used to print ``1.0000e-03`` for
0.00099995 at 5 digits (the correct rounding is ``9.9995e-04``), in 144 of 20,000
random rationals; ``decimal`` is the independent judge here.
"""

from __future__ import annotations

import random
from decimal import ROUND_HALF_EVEN, Context, Decimal
from fractions import Fraction

import pytest

from exactattn.numbers.formats import certified_scientific
from exactattn.numbers.softmax import SoftmaxRow


def _value(q: Fraction):
    """q as an exact output: the mean of (2q, 0) under two equal scores."""
    return SoftmaxRow([Fraction(0), Fraction(0)], None).combine([2 * q, Fraction(0)])


def _want(q: Fraction, digits: int) -> str:
    ctx = Context(prec=digits, rounding=ROUND_HALF_EVEN)
    d = ctx.divide(Decimal(q.numerator), Decimal(q.denominator))
    mant, exp = f"{d:.{digits - 1}e}".split("e")
    return f"{mant}e{int(exp):+03d}"


@pytest.mark.parametrize("q, digits, text", [(Fraction(99995, 10 ** 8), 5, "9.9995e-04"),
                                             (Fraction(999999, 10 ** 6), 3, "1.00e+00"),
                                             (Fraction(-99995, 10 ** 8), 5, "-9.9995e-04")])
def test_values_just_below_a_power_of_ten(q, digits, text):
    assert certified_scientific(_value(q), digits) == text == _want(q, digits)


def test_random_rationals_near_powers_of_ten_match_decimal():
    rng = random.Random(11)
    for _ in range(2000):
        e = rng.randint(-12, 12)
        digits = rng.randint(1, 8)
        q = Fraction(10) ** e * (1 - Fraction(rng.randint(0, 10 ** 9), 10 ** (digits + 9)))
        q *= rng.choice((1, -1))
        assert certified_scientific(_value(q), digits) == _want(q, digits), (q, digits)


@pytest.mark.parametrize("q, digits", [(Fraction(1, 8), 2), (Fraction(3, 8), 2), (Fraction(5, 16), 3),
                                       (Fraction(-125, 1000), 2), (Fraction(25, 2), 2),
                                       (Fraction(999995, 10 ** 6), 5)])
def test_exact_ties_round_to_even(q, digits):
    """A value exactly on a midpoint (0.125 at 2 digits): the enclosures alone never decide
    it, the exact path rounds it to even (1.2e-01, not 1.3e-01)."""
    assert certified_scientific(_value(q), digits) == _want(q, digits)


def test_irrational_values_decided_by_enclosures_are_correctly_rounded():
    """Irrational shares against mpmath at 60 digits: e/(1+e) and 1/(1+e^(1/2))."""
    import mpmath
    mpmath.mp.dps = 60
    for raw, want in (([Fraction(1), Fraction(0)], 1 / (1 + mpmath.e ** -1)),
                      ([Fraction(0), Fraction(1, 2)], 1 / (1 + mpmath.e ** mpmath.mpf(0.5)))):
        share = SoftmaxRow(raw, None).share(0)
        for digits in (1, 5, 12, 30):
            got = certified_scientific(share, digits)
            ctx = Context(prec=digits, rounding=ROUND_HALF_EVEN)
            mant, exp = f"{ctx.plus(Decimal(mpmath.nstr(want, 55))):.{digits - 1}e}".split("e")
            assert got == f"{mant}e{int(exp):+03d}", (digits, got)
