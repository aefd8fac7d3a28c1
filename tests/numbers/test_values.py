"""One value protocol: every exact value kind compares, orders and hashes by value
(exactattn.numbers.real.Real), and rational values hash as their Fraction."""

from fractions import Fraction as F

import pytest
import sympy

from exactattn.call import Call, Policy
from exactattn.engines.layer import LayerValue
from exactattn.numbers.lse import LogSumExp
from exactattn.numbers.real import Real
from exactattn.numbers.reals import Surd
from exactattn.numbers.softmax import ExpRatio, SoftmaxRow
from exactattn.engines.trace import SymbolicValue
from exactattn.verify import Reference


def _values():
    row = SoftmaxRow([F(0), F(0)], None)
    ref = Reference(Call([["1"], ["0"]], [["1"], ["0"]], [["1"], ["0"]],
                         policy=Policy(scale="none")))
    grads = ref.gradients([["0"], ["1"]])        # dV of key 1 = P[1][1] = 1/2
    return {
        "share": (row.share(0), F(1, 2)),
        "output": (ref.output(0, 0, 1, 0), F(1, 2)),
        "gradient": (grads.value("dV", 0, 0, 1, 0), F(1, 2)),
        "layer": (LayerValue((row.share(0),), F(0)), F(1, 2)),
        "surd": (Surd(F(1, 2)), F(1, 2)),
        "symbolic": (SymbolicValue(sympy.Rational(1, 2)), F(1, 2)),
    }


@pytest.mark.parametrize("kind", ["share", "output", "gradient", "layer", "surd", "symbolic"])
def test_a_rational_value_is_its_fraction(kind):
    value, q = _values()[kind]
    assert isinstance(value, Real)
    assert value == q and not value != q and hash(value) == hash(q)
    if kind != "symbolic":            # symbolic entries have equality, no order
        assert value < 1 and value > 0 and value <= q and value >= q


def test_equal_irrational_values_reached_two_ways_are_equal_and_hash_alike():
    a = SoftmaxRow([F(1), F(0)], None).share(0)          # e/(1 + e)
    b = SoftmaxRow([F(2), F(1)], None).share(0)          # e^2/(e + e^2)
    assert isinstance(a, ExpRatio) and a == b and hash(a) == hash(b)
    la, lb = LayerValue((a,), F(1)), LayerValue((b,), F(1))
    assert la == lb and hash(la) == hash(lb) and la > 1 and la < 2
    one = sympy.sin(1) ** 2 + sympy.cos(1) ** 2
    assert SymbolicValue(one) == SymbolicValue(sympy.Integer(1))
    assert hash(SymbolicValue(one)) == hash(SymbolicValue(sympy.Integer(1))) == hash(1)


def test_nan_equals_nothing_not_even_itself():
    row = SoftmaxRow([None, None], None, empty_row="nan")
    share = row.share(0)
    assert share != share and share != F(0)
    assert LogSumExp(row) != LogSumExp(row)


def test_float_is_the_correctly_rounded_binary64_however_small():
    """``float(value)`` is the nearest binary64 float of the exact value, not of a
    20-place decimal (which made a share of 8.8e-27 read 0.0)."""
    ref = Reference(Call([["1"]], [["0"], ["-60"]], [["1"], ["0"]], policy=Policy(scale="none")))
    share = ref.share(0, 0, 0, 1)                      # exp(-60)/(exp(-60) + 1)
    assert float(share) == 8.75651076269652e-27 and type(float(share)) is float
    assert float(ref.output(0, 0, 0, 0)) == 1.0        # 1/(1 + exp(-60)) rounds to 1
    dq = ref.gradients([["1"]]).value("dQ", 0, 0, 0, 0)   # 60*exp(-60)/(exp(-60) + 1)^2
    assert float(dq) == 5.253906457617913e-25
    assert float(Surd(0, ((F(2), F(1, 10**30)),))) == 7.071067811865475e-31    # 1/(10^30 sqrt(2))
