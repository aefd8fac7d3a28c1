"""The chronicle checkpoints, exact and typed, and the engines' agreement."""

from fractions import Fraction as F

import pytest
import sympy

from exactattn import Head, attend
from exactattn.examples import chronicle
from exactattn.numbers.reals import Surd
from exactattn.testing import assert_typed_equal as typed_equal


@pytest.fixture(scope="module")
def trace():
    ex = chronicle()
    return attend(ex.head, ex.x)


def test_query_of_token_2(trace):
    for got, want in zip(trace.queries[1], [F(0), F(3), F(1, 2), F(0)]):
        typed_equal(got, want)


def test_key_of_token_1(trace):
    for got, want in zip(trace.keys[0], [F(0), F(1), F(1, 4), F(1, 2)]):
        typed_equal(got, want)


def test_raw_and_scaled_row_2(trace):
    for got, want in zip(trace.raw_scores[1], [F(25, 8), F(0), F(3, 4), F(0)]):
        typed_equal(got, want)
    for got, want in zip(trace.scaled_scores[1], [F(25, 16), F(0), F(3, 8), F(0)]):
        typed_equal(got, want)
    assert trace.head.divisor == 2


def test_shares_row_2_certified(trace):
    assert [trace.share(1, j).decimal(4) for j in range(4)] == \
        ["0.5800", "0.1216", "0.1769", "0.1216"]


def test_share_closed_form(trace):
    e = sympy.exp
    R = sympy.Rational
    want = e(R(25, 16)) / (2 + e(R(3, 8)) + e(R(25, 16)))
    assert sympy.simplify(trace.shares[1][0] - want) == 0
    assert trace.shares[1][0] == want


def test_every_row_sums_to_exactly_one(trace):
    for i in range(4):
        assert trace.row_sums_to_one(i) is True
        total = sympy.cancel(sympy.together(sum(trace.shares[i])))
        assert total == 1


def test_rows_2_and_4_identical(trace):
    assert trace.raw_scores[1] == trace.raw_scores[3]
    assert trace.shares[1] == trace.shares[3]
    assert trace.outputs[1] == trace.outputs[3]


def test_macs(trace):
    assert trace.macs == {"projections": 192, "scores": 64, "mix": 64}
    assert sum(trace.macs.values()) == 320


def test_one_projection_costs_16_multiplications():
    h = Head([[1, 2, 3, 4]] * 4, [[1, 0, 0, 0]] * 4, [[1, 0, 0, 0]] * 4)
    t = attend(h, [[1, 1, 1, 1]])
    assert t.macs["projections"] == 3 * 16


def test_layouts_agree():
    ex = chronicle()
    h = ex.head
    rows_head = Head(h.weights("W_Q", "rows"), h.weights("W_K", "rows"),
                     h.weights("W_V", "rows"), layout="rows")
    a, b = attend(h, ex.x), attend(rows_head, ex.x)
    assert a.queries == b.queries and a.keys == b.keys and a.values == b.values
    assert a.raw_scores == b.raw_scores
    assert a.shares == b.shares and a.outputs == b.outputs


def test_symbolic_engine_agrees_with_pencil(trace):
    ex = chronicle()
    s = attend(ex.head, ex.x, engine="symbolic")
    for i in range(4):
        for j in range(4):
            assert sympy.Rational(trace.raw_scores[i][j]) == s.raw_scores[i][j]
            assert sympy.simplify(s.shares[i][j] - sympy.sympify(trace.shares[i][j])) == 0
    assert s.macs == trace.macs


def test_symbolic_entries_give_polynomial_scores():
    a, b = sympy.symbols("a b")
    h = Head([[a, 0], [0, 1]], [[1, 0], [0, b]], [[1, 0], [0, 1]], divisor=None,
             symbolic=True)
    t = attend(h, [[1, 2], [3, 4]])
    assert t.engine == "symbolic"
    assert t.raw_scores[0][1] == sympy.expand(3 * a + 8 * b)
    assert t.row_sums_to_one(0)


def test_irrational_divisor_stays_exact():
    h = Head([[1, 0]], [[1, 0]], [[1, 0]], divisor="sqrt(2)")
    t = attend(h, [[1, 0], [0, 1]])
    s = t.scaled_scores[0][0]
    assert type(s) is Surd and s == Surd(0, ((F(2), 1),)) and s.sympy() == 1 / sympy.sqrt(2)
    assert t.scaled_scores[0][1] == 0 and type(t.scaled_scores[0][1]) is Surd
    assert type(h.divisor) is Surd and h.divisor == 2 * Surd(0, ((F(2), 1),))
    assert t.share(0, 0).decimal(6) == "0.669762"  # e^(1/sqrt2)/(e^(1/sqrt2)+1)


def test_uniform_row_is_exactly_rational():
    h = Head([[0]], [[0]], [[1]])
    t = attend(h, [[1], [2], [4]])
    typed_equal(t.shares[0][0], F(1, 3))
    typed_equal(t.outputs[0][0], F(7, 3))


def test_causal_first_output_is_its_own_value():
    ex = chronicle()
    h = ex.head
    causal = Head(h.W_Q, h.W_K, h.W_V, causal=True)
    t = attend(causal, ex.x)
    assert t.raw_scores[0][1:] == [None, None, None]
    assert t.outputs[0] == t.values[0]
    assert t.macs["scores"] == 10 * 4  # n(n+1)/2 pairs of d_k MACs
    assert t.macs["mix"] == 10 * 4
    assert all(t.row_sums_to_one(i) for i in range(4))


def test_huge_scores_do_not_overflow():
    h = Head([[1]], [[1]], [[1]], divisor=None)
    t = attend(h, [[30], [29]])  # raw scores 900 and 870
    assert t.share(0, 0).decimal(4) == "1.0000"
    assert t.share(0, 1).decimal(30) == "0.000000000000093576229688392990"


def test_tiny_shares_are_decided_without_huge_fractions():
    from flint import arb

    from exactattn.numbers.digits import certify
    assert certify(lambda prec: arb(-10 ** 9).exp(), 4) == "0.0000"
    assert certify(lambda prec: 1 - arb(-10 ** 9).exp(), 4) == "1.0000"
    # exact ties go to the even digit, for negative values too
    from flint import fmpq
    assert [certify(lambda prec, q=q: arb(fmpq(*q)), 2) for q in [(1, 8), (3, 8), (-1, 8), (-3, 8)]] \
        == ["0.12", "0.38", "-0.12", "-0.38"]
