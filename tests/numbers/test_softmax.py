"""ExpRatio is a value like Fraction; SoftmaxRow with offsets; certified rounding always ends."""

from fractions import Fraction as F

import pytest

from exactattn import Head, attend
from exactattn.errors import InputError
from exactattn.examples import chronicle
from exactattn.numbers.softmax import ExpRatio, SoftmaxRow


def row(*raw, D=None, offsets=None, empty_row="zero"):
    return SoftmaxRow([None if r is None else F(r) for r in raw], None if D is None else F(D),
                      empty_row, None if offsets is None else [F(m) for m in offsets])


def test_the_same_share_twice_is_equal_and_hashes_alike():
    trace = attend(chronicle().head, chronicle().x)
    a, b = trace.share(0, 1), trace.share(0, 1)
    assert a is not b
    assert a == b and hash(a) == hash(b)
    assert len({a, b}) == 1


def test_two_closed_forms_of_one_value_are_equal():
    a = row(1, 0).share(0)                 # e / (1 + e)
    b = row(2, 1).share(0)                 # e^2 / (e + e^2)
    c = row(2, 0, D=4).share(0)            # scores / 2: the same exponents
    assert a == b == c
    assert hash(a) == hash(b) == hash(c)
    assert a.text() == "exp(1)/(1 + exp(1))"
    assert b.text() == "exp(2)/(exp(1) + exp(2))"


def test_commensurable_square_roots_compare_exactly():
    a = row(2, 0, D=8).share(0)            # exp(2/sqrt(8)) = exp(1/sqrt(2))
    b = row(1, 0, D=2).share(0)
    c = row(1, 0, D=3).share(0)
    assert a == b and hash(a) == hash(b)
    assert c != b and c < b                # 1/sqrt(3) < 1/sqrt(2)


def test_ordering_is_exact_and_total():
    r = row(F(25, 8), 0, F(3, 4), 0, D=4)
    s = [r.share(j) for j in range(4)]
    assert s[1] == s[3]
    assert s[1] < s[2] < s[0]
    assert sorted(s, reverse=True)[0] is s[0]
    assert max(s) is s[0]
    assert s[0] > F(1, 2) and s[1] < F(1, 8) and F(1, 8) < s[2]
    assert s[0] >= s[0] and s[1] <= s[3]


def test_comparison_with_rationals_and_ints():
    half = row(0, 0).share(0)
    assert half == F(1, 2) and half == row(5, 5).share(1)
    assert hash(half) == hash(F(1, 2))
    assert row(3).share(0) == 1 and row(3).share(0) == F(1)
    assert row(1, 0).share(0) != F(1, 2)
    assert row(None, 1).share(0) == 0


def test_sign_and_rationality():
    r = row(1, 0)
    out = r.combine([F(-3), F(1)])         # (-3 e + 1) / (e + 1) < 0
    assert out.sign() == -1
    assert r.combine([F(0), F(0)]).sign() == 0
    assert r.share(1).sign() == 1
    assert out.rational() is None
    assert row(2, 2).combine([F(1, 8), F(3, 8)]).as_fraction() == F(1, 4)
    with pytest.raises(InputError, match="value must be rational to be a Fraction"):
        out.as_fraction()


def test_nan_rows_are_not_numbers():
    n = row(None, None, empty_row="nan").share(0)
    assert n != n and n.decimal(4) == "nan" and n.text() == "nan"
    with pytest.raises(InputError, match="value must be a number to be compared"):
        n < F(1)


def test_offsets_with_a_rational_divisor_fold_into_the_scores():
    a = row(1, 0, D=4, offsets=[F(1, 2), 0])     # 1/2 + 1/2 = 1 vs 0
    assert not a.general
    assert a.share(0) == row(1, 0).share(0)


def test_offsets_with_an_irrational_divisor_stay_exact():
    a = row(1, 0, D=2, offsets=["1/2", 0])       # exp(1/sqrt(2) + 1/2)
    assert a.general       # the logits r/sqrt(2) + m are exact values
    assert a.share(0).text() == "exp(1/sqrt(2) + 1/2)/(1 + exp(1/sqrt(2) + 1/2))"
    assert a.share(0).decimal(6) == "0.769787"
    assert a.largest() == [0]
    b = row(2, 0, D=8, offsets=["1/2", 0])
    assert a.share(0) == b.share(0) and hash(a.share(0)) == hash(b.share(0))
    # the maximum is decided exactly: 1/sqrt(2) - 1/2 < 1/4
    c = row(1, 0, D=2, offsets=["-1/2", "1/4"])
    assert c.largest() == [1]
    assert c.share(1) > F(1, 2)


@pytest.mark.parametrize("raw,values,places,want", [
    # one key dominates by a gap of 90,000: the value is a known rational minus a positive
    # multiple of e^-90000, so it lies just below the boundary 0.00015 and rounds down
    ((90000, 0), ("3/20000", 0), 4, "0.0001"),
    ((90000, 90000, 0), (1, 0, 0), 0, "0"),                 # just under 1/2
    ((90000,) * 8 + (0,), (1,) + (0,) * 8, 2, "0.12"),       # just under 1/8
    ((0, -90000), (1, 0), 10, "1.0000000000"),               # just under 1: rounds to 1
])
def test_values_next_to_a_boundary_round_without_running_out_of_precision(
        raw, values, places, want):
    r = row(*raw)
    assert r.combine([F(v) for v in values]).decimal(places) == want


def test_exact_ties_round_half_to_even():
    assert row(0, 0, 0, 0, 0, 0, 0, 0).share(0).decimal(2) == "0.12"   # 1/8 exactly


def test_float_of_a_share():
    assert float(row(0, 0).share(0)) == 0.5
    assert abs(float(row(1, 0).share(0)) - 0.7310585786300049) < 1e-15


def test_repr_and_text_have_no_sympy():
    r = row(F(25, 8), 0, F(3, 4), 0, D=4)
    assert repr(r.share(0)) == "ExpRatio(exp(25/16)/(2 + exp(3/8) + exp(25/16)))"
    assert r.combine([F(1), F(2), F(0), F(-1)]).text() == \
        "(1 + exp(25/16))/(2 + exp(3/8) + exp(25/16))"
    assert isinstance(r.share(0), ExpRatio)


def test_symbolic_engine_answers_decimal():
    head = Head([[1, 0]], [[0, 1]], [[1, 1]])
    trace = attend(head, [[1, 0], [0, 1]], engine="symbolic")
    assert trace.share(0, 1).decimal(4) == "0.7311"
    assert trace.output(0, 0).decimal(4) == "1.0000"
    import sympy
    s = sympy.Symbol("s")
    sym = attend(Head([[s]], [[1]], [[1]], symbolic=True), [[1], [2]])
    with pytest.raises(InputError, match="value must be a number to print decimals"):
        sym.share(0, 0).decimal(4)


def test_closed_forms_past_the_int_to_str_limit():
    # scores of 1e-2200 squared: exponents with 4,400-digit denominators
    tiny = F(1, 10 ** 4400)
    text = row(tiny, 0).share(0).text()
    assert text.startswith("exp(1/1" + "0" * 100) and text.count("0" * 4400) == 2
    assert row(0, 0).combine([tiny, tiny]).text() == "1/1" + "0" * 4400


def test_svg_of_a_head_with_4400_digit_scores(tmp_path):
    import xml.etree.ElementTree as ET
    from exactattn.cli import main
    spec = tmp_path / "f.toml"
    spec.write_text('"tokens" = [{"x" = ["1e-2200", "0"]}, {"x" = ["0", "0"]}]\n'
                    '"W_Q" = [["1", "0"], ["0", "0"]]\n"W_K" = [["1", "0"], ["0", "0"]]\n'
                    '"W_V" = [["0", "0"], ["0", "0"]]\n')
    out = tmp_path / "s.svg"
    assert main(["scores", "--spec", str(spec), "--format", "svg", "-o", str(out)]) == 0
    ET.parse(out)


def test_a_rows_gaps_are_fractions_that_hash_and_print_as_fractions():
    from fractions import Fraction
    import pickle
    from exactattn.numbers.softmax import SoftmaxRow
    row = SoftmaxRow([Fraction(1, 3), Fraction(-2, 7), None], None)
    g = row.gaps[1]
    assert g == Fraction(-13, 21) and isinstance(g, Fraction) and row.gaps[2] is None
    assert hash(g) == hash(Fraction(-13, 21)) == hash(g)          # cached, the same value
    assert repr(g) == "Fraction(-13, 21)" and pickle.loads(pickle.dumps(g)) == g
    assert {Fraction(-13, 21): 1}[g] == 1
    out = row.combine([Fraction(1), Fraction(1)])                  # the two shares add to 1
    assert out.rational() == 1 and type(out.rational()) is Fraction
