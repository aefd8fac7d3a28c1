"""The number domain: exact conversions, and every kind of bad entry refused."""

import decimal
from fractions import Fraction as F

import pytest
import sympy

from exactattn import FloatInputError, InputError, ShapeError
from exactattn.call.policy import parse_divisor
from exactattn.numbers.exact import to_exact, to_matrix


class NoFloat:
    """A number whose __float__ raises: proves no path goes through float."""

    def __float__(self):
        raise AssertionError("went through float")


@pytest.mark.parametrize("value, want", [
    (3, F(3)), ("1/2", F(1, 2)), ("-0.75", F(-3, 4)), (" 3 ", F(3)), ("1e-3", F(1, 1000)),
    (F(2, 6), F(1, 3)), (decimal.Decimal("0.1"), F(1, 10)), (sympy.Rational(5, 7), F(5, 7)),
    ("0.1", F(1, 10)), ("+.5", F(1, 2)),
])
def test_exact_values_and_types(value, want):
    got = to_exact(value)
    assert type(got) is F and got == want


def test_float_policies():
    assert to_exact(0.1, floats="decimal") == F(1, 10)
    assert to_exact(0.1, floats="exact") == F(3602879701896397, 36028797018963968)
    with pytest.raises(FloatInputError, match=r"x\[1\]\[0\] is a binary float \(0.1\)"):
        to_matrix([[1], [0.1]], name="x")


@pytest.mark.parametrize("value, pattern", [
    (float("nan"), "must be finite"), (float("inf"), "must be finite"),
    ("nan", "must be finite"), ("inf", "must be finite"), (True, "not a bool"),
    ("abc", "must be a number"), ("1/0", "divide by zero"), (None, "must be a number"),
    (NoFloat(), "must be a number"), (sympy.Float(0.5), "binary Float"),
    (sympy.Symbol("a"), "symbolic=True"), ([1], "must be a number"),
])
def test_bad_entries(value, pattern):
    with pytest.raises(InputError, match=pattern):
        to_exact(value, floats="exact" if isinstance(value, float) else None)


@pytest.mark.parametrize("rows, pattern", [
    ([], "at least one row"), ([[1, 2], [3]], r"equal length \(got lengths \[2, 1\]\)"),
    ([[]], "at least one column"), ("12", "list of rows"), ([5], "list of numbers"),
])
def test_bad_matrices(rows, pattern):
    with pytest.raises(ShapeError, match=pattern):
        to_matrix(rows, name="W_Q")


@pytest.mark.parametrize("value, want", [
    ("2", F(4)), (2, F(4)), ("sqrt(2)", F(2)), ("sqrt(1/2)", F(1, 2)), ("none", None),
    (None, None), (sympy.sqrt(3), F(3)), ("1/2", F(1, 4)),
])
def test_divisors(value, want):
    assert parse_divisor(value) == want


@pytest.mark.parametrize("value", ["0", "-2", "abc", "sqrt(-1)", "sqrt(x)", 0, -1, "sqrt(0)"])
def test_bad_divisors(value):
    with pytest.raises(InputError, match="divisor must be a positive number"):
        parse_divisor(value)


def test_float_divisor_needs_a_policy():
    with pytest.raises(FloatInputError):
        parse_divisor(1.5)
    assert parse_divisor(1.5, floats="decimal") == F(9, 4)


@pytest.mark.parametrize("text", ["1e999999999", "1e-999999999", "9" * 5000, "1/" + "7" * 4500])
def test_astronomical_texts_are_refused_at_once(text):
    with pytest.raises(InputError, match="at most 4000 digits"):
        to_exact(text, name="x[0][0]")


def test_sympy_divisors_are_not_rounded_behind_your_back():
    with pytest.raises(InputError, match="square root of one"):
        parse_divisor(sympy.sqrt(2) + sympy.Rational(1, 10 ** 30))
    with pytest.raises(FloatInputError, match="binary Float"):
        parse_divisor(sympy.Float("0.3333333333333333"))
    with pytest.raises(InputError, match="positive"):
        parse_divisor(-sympy.sqrt(2))
    assert parse_divisor(2 * sympy.sqrt(3)) == F(12)


def test_numpy_floats_follow_the_policy_in_their_own_precision():
    np = pytest.importorskip("numpy")
    assert to_exact(np.float64(0.1), floats="decimal") == F(1, 10)
    assert to_exact(np.float32(0.1), floats="decimal") == F(1, 10)
    assert to_exact(np.float32(0.1), floats="exact") == F(13421773, 134217728)
    with pytest.raises(FloatInputError):
        to_exact(np.float32(0.5))


# ---------------------------------------------------------------- API inputs read as meant
@pytest.mark.parametrize("rows,match", [
    ([{10: "a", 20: "b"}], r"x\[0\] must be a list of numbers .*a dict or a set has no order"),
    ([{3, 1}], r"x\[0\] must be a list of numbers .*a dict or a set has no order"),
    ({0: [1]}, r"x must be a list of rows .*a dict or a set has no order"),
    ([[1j]], r"x\[0\]\[0\] must be a real number \(got 1j\)"),
])
def test_rows_that_have_no_order_or_are_not_real_are_refused(rows, match):
    with pytest.raises(ShapeError if "list" in match else InputError, match=match):
        to_matrix(rows, name="x")


def test_sympy_imaginary_unit_is_refused():
    with pytest.raises(InputError, match=r"must be a real number \(got I\)"):
        to_exact(sympy.I, symbolic=True)


def test_float32_reads_the_same_in_an_array_and_as_a_scalar():
    import numpy as np
    a = np.array([[0.1, 0]], dtype=np.float32)
    assert to_matrix(a, name="x", floats="decimal")[0][0] == F(1, 10)
    assert to_exact(np.float32(0.1), floats="decimal") == F(1, 10)
    assert to_matrix(a, name="x", floats="exact")[0][0] == F(float(np.float32(0.1)))


def test_astronomical_decimal_is_refused_at_once():
    import decimal
    with pytest.raises(InputError, match="decimal exponent within"):
        to_exact(decimal.Decimal("1e999999999"))
