"""Exact algebraic and certified (cosine, sine, tanh) reals in one canonical form: exactness against sympy."""

from fractions import Fraction as F

import pytest
import sympy
from hypothesis import given, settings, strategies as st

from exactattn.errors import InputError
from exactattn.numbers.reals import Pow2, Surd, align, real_compare, softcap, two_power

small = st.fractions(min_value=-4, max_value=4, max_denominator=6)
atoms = st.sampled_from([F(2), F(8), F(1, 2), F(3), F(12), F(6), Pow2(F(1, 4)), Pow2(F(3, 4)),
                         Pow2(F(1, 8))])
surds = st.builds(lambda p, ts: Surd(p, tuple(ts)), small,
                  st.lists(st.tuples(atoms, small), max_size=3))


def sym(x):
    return x.sympy() if isinstance(x, Surd) else sympy.Rational(x.numerator, x.denominator)


@settings(max_examples=60, deadline=None)
@given(surds, surds)
def test_order_and_equality_match_sympy(a, b):
    d = sympy.nsimplify(sym(a) - sym(b))
    exact_zero = sympy.simplify(d) == 0
    assert (a == b) == exact_zero
    if not exact_zero:
        assert (a < b) == bool(sympy.N(d, 60) < 0)


@settings(max_examples=40, deadline=None)
@given(surds)
def test_decimal_is_correctly_rounded(a):
    got = F(a.decimal(8))
    true = sympy.N(sym(a), 50)
    assert abs(got - F(str(true))) <= F(1, 2 * 10 ** 8)


def test_dependent_atoms_merge():
    s = Surd(0, ((F(2), 1), (F(8), 2)))            # 1/sqrt(2) + 2/sqrt(8) = 2/sqrt(2)
    assert len(s.terms) == 1 and s == Surd(0, ((F(1, 2), 1),))
    assert Surd(0, ((F(2), 1), (F(2), -1))).rational() == 0
    basis, keys = align([two_power(F(-1, 4)), two_power(F(-3, 4)), two_power(F(-5, 4))])
    assert basis == (Pow2(F(3, 4)), Pow2(F(1, 4)))
    assert keys == [(0, F(1, 2), 0), (0, 0, F(1, 2)), (0, F(1, 4), 0)]


def test_two_power_forms():
    assert two_power(F(3)) == 8 and type(two_power(F(3))) is F
    assert two_power(F(1, 2)) + two_power(F(1, 2)) == two_power(F(3, 2))
    assert two_power(F(1, 2)) != two_power(F(1, 4)) and two_power(F(-1, 8)) < 1
    assert float(two_power(F(-1, 4))) == pytest.approx(2 ** -0.25, rel=1e-15)
    with pytest.raises(InputError, match="power-of-two denominator"):
        two_power(F(1, 3))


def test_certified_structure_and_enclosures():
    a, b = softcap(F(2), F(1)), softcap(F(2), F(1))
    assert a == b and hash(a) == hash(b)
    assert real_compare(a, softcap(F(3), F(1))) == -1
    assert real_compare(a, F(1)) == -1 and real_compare(F(0), a) == -1
    c = a + F(1)
    assert isinstance(c, Surd) and c.transcendental and c.decimal(6) == "1.964028" and c.text() == "tanh(2) + 1"


def test_saturated_soft_caps_are_ordered_by_their_arguments():
    """tanh(200000) - tanh(100000) is about e^-200000, far below any enclosure: tanh is
    increasing, so two capped logits with one cap are ordered by their arguments."""
    a, b = softcap(F(100), F(1, 1000)), softcap(F(200), F(1, 1000))
    assert a < b and b > a and a != b and real_compare(b, a) == 1
    assert softcap(F(-200), F(1, 1000)) < softcap(F(-100), F(1, 1000))


def test_a_square_divisor_atom_is_rational():
    """1/sqrt(4) written as an atom is 1/2: it compares, signs and hashes as the rational."""
    x = Surd(0, ((F(4), 1),))
    assert x == F(1, 2) and hash(x) == hash(F(1, 2)) and Surd(-F(1, 2), ((F(4), 1),)).sign() == 0
    assert Surd(1, ((F(9), 3), (F(2), 1))) == Surd(2, ((F(2), 1),))


def test_a_rotary_score_over_a_square_divisor_is_its_rational_multiple():
    """cos(1)/sqrt(4) built as a product atom is (1/2) cos(1): one form, one hash."""
    from exactattn.numbers.reals import Prod, Trig
    a = Surd(0, ((Prod(F(4), Trig("cos", F(1))), 1),))
    b = Surd(0, ((Trig("cos", F(1)), F(1, 2)),))
    assert a == b and hash(a) == hash(b)
