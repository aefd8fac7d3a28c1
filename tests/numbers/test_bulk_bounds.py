"""The integer enclosures of the bulk path's exponentials, judged by mpmath at 200 digits.

``gap_bounds`` encloses ``2^F exp(-u / (den sqrt(D)))`` for integer gaps u digit by digit
from the digit tables of ``block_tables`` (lower ends rounded down, upper ends up).  Every
enclosure here must hold the true value.
"""

import random
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from exactattn.numbers.bulk import ExpTables, block_tables, gap_bounds


@pytest.mark.parametrize("den, divisor_squared, F", [
    (1000 ** 2, Fraction(64), 62), (64 * 10 ** 4, Fraction(2), 62), (7 ** 9, None, 62),
    (1000 ** 2, Fraction(64), 4 * 8 + 40)])
def test_many_gaps_are_enclosed(den, divisor_squared, F):
    cached = block_tables(den, divisor_squared, F)
    tables = cached[0]
    assert tables.feasible and tables.levels >= 2 and cached[1] == 0
    rng = random.Random(den + F)
    n = (tables.levels << tables.bits) + 500
    cut = tables.cut
    picks = [0, 1, 2, cut - 1, cut, cut + 5, 1 << tables.bits, (1 << tables.bits) - 1] + \
        [rng.randrange(0, cut) for _ in range(600)] + [rng.randrange(0, 50) for _ in range(100)]
    gaps = np.array(picks + [rng.randrange(0, cut + 10) for _ in range(n - len(picks))],
                    dtype=np.int64)
    lo, hi = gap_bounds(cached, gaps)
    one = 1 << F
    mpmath.mp.dps = 200
    c = 1 / (mpmath.mpf(den) * (1 if divisor_squared is None else
                               mpmath.sqrt(mpmath.mpf(divisor_squared.numerator) /
                                           divisor_squared.denominator)))
    for k in range(len(picks)):
        u = int(gaps[k])
        true = mpmath.mpf(one) * mpmath.exp(-u * c)
        a, b = int(lo[k]), int(hi[k])
        assert 0 <= a <= true <= b <= one, (u, a, b)
        # a digit-table entry is at most 2 bits units off each side (one floor or ceiling
        # per doubling); the levels' product adds 2 more per level
        assert b - a <= tables.levels * (4 * tables.bits + 2), (u, a, b)
    assert int(lo[0]) == int(hi[0]) == one              # exp(0) = 1 exactly


def test_masked_gaps_enclose_zero():
    cached = block_tables(10 ** 6, Fraction(64), 62)
    tables = cached[0]
    gaps = np.full((tables.levels << tables.bits) + 10, -1, dtype=np.int64)
    gaps[0] = 5
    lo, hi = gap_bounds(cached, gaps)
    assert int(lo[1]) == int(hi[1]) == 0 and int(lo[0]) <= int(hi[0])


@pytest.mark.parametrize("den, divisor_squared, F", [
    (1000 ** 2, Fraction(64), 62), (7 ** 9, None, 4 * 8 + 40)])
def test_every_digit_table_entry_encloses_its_exponential(den, divisor_squared, F):
    tables = ExpTables(den, divisor_squared, F)
    one = 1 << F
    mpmath.mp.dps = 200
    c = 1 / (mpmath.mpf(den) * (1 if divisor_squared is None else
                               mpmath.sqrt(mpmath.mpf(divisor_squared.numerator) /
                                           divisor_squared.denominator)))
    for level in (0, 1):
        lo, hi = tables.digit_table(level)
        assert len(lo) == len(hi) == min(1 << tables.bits,
                                         (tables.cut >> (tables.bits * level)) + 1)
        assert lo.dtype == (np.uint64 if F == 62 else object)
        for a in range(0, len(lo), 7):
            true = mpmath.mpf(one) * mpmath.exp(-(a << (tables.bits * level)) * c)
            x, y = int(lo[a]), int(hi[a])
            assert 0 <= x <= true <= y <= one, (level, a, x, y)
            assert y - x <= 4 * tables.bits, (level, a, x, y)
