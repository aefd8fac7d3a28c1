"""The fast engine agrees exactly with the pencil engine, and its bulk decimals are certified."""

import random
from fractions import Fraction as F

import mpmath
import pytest
import sympy

from exactattn import Head, attend
from exactattn.numbers.digits import round_fraction
from exactattn.errors import InputError
from exactattn.examples import chronicle
from exactattn.numbers.bulk import decimals, exact_matmul
from exactattn.numbers.exact import common_denominator
from exactattn.engines.trace import Trace
from exactattn.testing import assert_typed_equal as typed_rows_equal


def assert_same(head, x, places=(4, 12)):
    """Every exact matrix and every certified decimal of fast == pencil."""
    pencil = attend(head, x, engine="pencil")
    fast = attend(head, x, engine="fast")
    assert type(fast) is type(pencil) is Trace      # one trace type for every engine
    assert pencil.share_decimals(places[0]) == fast.share_decimals(places[0])
    typed_rows_equal(fast.queries, pencil.queries)
    typed_rows_equal(fast.keys, pencil.keys)
    typed_rows_equal(fast.values, pencil.values)
    typed_rows_equal(fast.raw_scores, pencil.raw_scores)
    n, d_v = pencil.n, head.d_v
    for p in places:
        want_s = [[pencil.share(i, j).decimal(p) for j in range(n)] for i in range(n)]
        want_o = [[pencil.output(i, c).decimal(p) for c in range(d_v)] for i in range(n)]
        assert fast.share_decimals(p) == want_s
        assert fast.output_decimals(p) == want_o
        assert [[fast.share(i, j).decimal(p) for j in range(n)] for i in range(n)] == want_s
    return pencil, fast


def test_chronicle_matches_pencil():
    ex = chronicle()
    pencil, fast = assert_same(ex.head, ex.x)
    assert fast.share_decimals(4)[1] == ["0.5800", "0.1216", "0.1769", "0.1216"]
    assert fast.raw_scores[1] == [F(25, 8), F(0), F(3, 4), F(0)]
    assert fast.scaled_scores[1] == [F(25, 16), F(0), F(3, 8), F(0)]
    assert fast.shares[1] == pencil.shares[1]
    assert fast.outputs == pencil.outputs
    assert fast.share(1, 0).closed_form() == pencil.share(1, 0).closed_form()
    assert all(fast.row_sums_to_one(i) is True for i in range(4))


def test_fast_counts_nothing():
    ex = chronicle()
    fast = attend(ex.head, ex.x, engine="fast")
    assert fast.macs is None and fast.softmax_ops is None
    assert fast.engine == "fast"
    assert fast.rows[1].max_raw == F(25, 8)


def _integer_scores(trace):
    """The raw scores as (numpy integers, common denominator), hidden pairs as 0."""
    from exactattn.numbers.bulk import int_array
    rows = [[F(0) if s is None else s for s in r] for r in trace.raw_scores]
    ints, den = common_denominator(rows)
    return int_array([v for r in ints for v in r], (len(ints), len(ints[0]))), den


def _feasible(trace) -> bool:
    import numpy as np
    num, den = _integer_scores(trace)
    n, head = trace.n, trace.head
    return decimals(num, den, head.divisor_squared, np.ones((n, n), dtype=bool),
                    np.zeros((n, 1), dtype=np.int64), 1, 4) is not None


def _random_head(rng, d_model, d_k, d_v, layout, divisor, causal):
    def m(r, c):
        return [[F(rng.randint(-6, 6), rng.choice([1, 2, 3, 4, 8])) for _ in range(c)]
                for _ in range(r)]
    if layout == "slots":
        W = (m(d_k, d_model), m(d_k, d_model), m(d_v, d_model))
    else:
        W = (m(d_model, d_k), m(d_model, d_k), m(d_model, d_v))
    kw = {} if divisor == "default" else {"divisor": divisor}
    return Head(*W, layout=layout, causal=causal, **kw)


@pytest.mark.parametrize("layout", ["slots", "rows"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("divisor,d_k", [("sqrt(2)", 2), ("default", 2), ("default", 3),
                                          ("3/2", 3), (None, 2)])
def test_random_heads_match_pencil(layout, causal, divisor, d_k):
    rng = random.Random(f"{layout}{causal}{divisor}{d_k}")
    head = _random_head(rng, 3, d_k, 2, layout, divisor, causal)
    n = 7
    x = [[F(rng.randint(-3, 3), rng.choice([1, 2, 5])) for _ in range(3)] for _ in range(n)]
    x[2] = [F(0)] * 3            # a zero query: every visible score equal, shares 1/k
    x[5] = list(x[1])            # a repeated token: identical rows
    pencil, fast = assert_same(head, x)
    k = 3 if causal else n
    assert fast.shares[2] == [F(1, k)] * k + [F(0)] * (n - k)
    assert all(type(s) is F for s in fast.shares[2])


def test_layouts_give_identical_fast_traces():
    ex = chronicle()
    h = ex.head
    rows = Head(h.weights("W_Q", "rows"), h.weights("W_K", "rows"), h.weights("W_V", "rows"),
                layout="rows")
    a, b = attend(h, ex.x, engine="fast"), attend(rows, ex.x, engine="fast")
    typed_rows_equal(a.raw_scores, b.raw_scores)
    assert a.share_decimals(12) == b.share_decimals(12)
    assert a.output_decimals(12) == b.output_decimals(12)


def test_uniform_rows_are_exactly_one_over_k_including_ties():
    # 40 causal tokens of zeros: row i sees i + 1 equal scores, shares exactly 1/(i+1);
    # 1/32 = 0.03125 is a tie at 4 places and rounds half to even (0.0312)
    head = Head([[1]], [[1]], [[1]], causal=True)
    x = [[0]] * 40
    fast = attend(head, x, engine="fast")
    decs = fast.share_decimals(4)
    for i in range(40):
        want = round_fraction(F(1, i + 1), 4)
        assert decs[i][:i + 1] == [want] * (i + 1)
        assert decs[i][i + 1:] == ["0.0000"] * (39 - i)
        assert fast.share(i, 0).rational() == F(1, i + 1)
    # only the exact tie leaves the bulk path (1/16 = 0.0625 is exact and decided in bulk)
    assert fast.fallbacks == 32        # row 31's 32 shares; outputs are 0, decided in bulk
    assert decs[31][0] == "0.0312"
    assert decs[15][0] == "0.0625"


def test_rational_outputs_round_exactly():
    # values 1/8 and 3/8 with equal scores: output (1/8 + 3/8)/2 = 1/4 exactly; at one
    # place that is the tie 0.25 -> 0.2 (half to even), never an endless loop
    head = Head([[0]], [[0]], [[1]], divisor=None)
    fast = attend(head, [[F(1, 8)], [F(3, 8)]], engine="fast")
    assert fast.output(0, 0).rational() == F(1, 4)
    assert fast.output_decimals(1) == [["0.2"], ["0.2"]]
    assert fast.output_decimals(2) == [["0.25"], ["0.25"]]


def _mp_round(value, places):
    """Round an mpmath value (far from a boundary at 100 digits) to ``places`` decimals."""
    k = int(mpmath.floor(value * 10 ** places + mpmath.mpf(1) / 2))
    return round_fraction(F(k, 10 ** places), places)


def test_a_gap_needing_more_than_53_bits_rounds_correctly():
    # share = 1 / (1 + exp(-r)) with r within 2^-90 of logit(0.50005): the share lies
    # within ~1e-27 of the boundary 0.50005, far closer than a double can see
    with mpmath.workdps(100):
        _gap_check()


def _gap_check():
    target = mpmath.log(mpmath.mpf("0.50005") / mpmath.mpf("0.49995"))
    r = F(int(mpmath.floor(target * 2 ** 90)) + 1, 2 ** 90)   # just above: rounds up
    head = Head([[1]], [[1]], [[1]], divisor=None)
    fast = attend(head, [[F(1)], [1 - r]], engine="fast")      # row 0: scores 1, 1 - r
    share = 1 / (1 + mpmath.exp(-mpmath.mpf(r.numerator) / r.denominator))
    assert abs(share - mpmath.mpf("0.50005")) < mpmath.mpf("1e-26")
    assert share > mpmath.mpf("0.50005")
    want = [_mp_round(share, 4), _mp_round(1 - share, 4)]
    assert want == ["0.5001", "0.4999"]
    assert fast.share_decimals(4)[0] == want
    assert float(share) == 0.50005          # a double cannot tell it from the tie
    pencil = attend(head, [[F(1)], [1 - r]], engine="pencil")
    assert pencil.share(0, 0).decimal(4) == "0.5001"


def test_huge_scores_do_not_overflow():
    head = Head([[1, 0], [0, 1]], [[1, 0], [0, 1]], [[1, 0], [0, 1]])
    x = [[F(30), F(0)], [F(29), F(1)], [F(0), F(41, 2)], [F(-30), F(3)]]
    pencil, fast = assert_same(head, x)
    with mpmath.workdps(60):
        _huge_check(fast)


def _huge_check(fast):
    row = [mpmath.mpf(int(s.numerator)) / int(s.denominator) / mpmath.sqrt(2)
           for s in fast.raw_scores[0]]
    assert max(fast.raw_scores[0]) == 900
    ex = [mpmath.exp(v) for v in row]
    total = mpmath.fsum(ex)
    want = [mpmath.nstr(e / total, 15, min_fixed=-1, max_fixed=1) for e in ex]
    got = fast.share_decimals(12)[0]
    for g, w in zip(got, want):
        assert abs(mpmath.mpf(g) - mpmath.mpf(w)) <= mpmath.mpf("5e-13")


def test_huge_denominators_count_gaps_in_steps():
    # score denominator 2^120: past the integer tables' reach unit by unit, the bulk path
    # counts gaps in steps of 2^shift (as float inputs need) and agrees with the exact rows
    head = Head([[F(1, 2 ** 20), 1], [1, F(3, 2 ** 20)]], [[1, 0], [F(1, 3), 1]],
                [[1, 2], [3, 4]])
    x = [[F(1, 2 ** 40), F(2)], [F(1), F(-1, 2 ** 40)], [F(5, 2 ** 40), F(1, 3)]]
    trace = attend(head, x, engine="fast")
    assert _integer_scores(trace)[1].bit_length() > 100    # one table entry per unit: too many
    assert _feasible(trace)
    assert_same(head, x)


def test_large_numerators_use_exact_integer_products():
    # numerators past 2^53 in the score product: fmpz_mat, not float64
    rng = random.Random(7)
    d = 3
    W = [[[F(rng.randint(-2 ** 15, 2 ** 15), 2 ** 13) for _ in range(d)] for _ in range(d)]
         for _ in range(3)]
    head = Head(*W, divisor="sqrt(2)")
    x = [[F(rng.randint(-2 ** 17, 2 ** 17), 2 ** 14) for _ in range(d)] for _ in range(6)]
    fast = attend(head, x, engine="fast")
    qn, _ = common_denominator(fast.queries)
    kn, _ = common_denominator(fast.keys)
    assert max(abs(v) for r in qn for v in r) * max(abs(v) for r in kn for v in r) * d >= 2 ** 53
    assert _feasible(fast)      # the bulk path runs
    assert_same(head, x)


def test_exact_matmul_is_exact_past_float_range():
    import numpy as np
    a = np.array([[2 ** 40 + 1, 3]], dtype=np.int64)
    b = np.array([[2 ** 20 + 1], [5]], dtype=np.int64)
    got = exact_matmul(a, b)
    assert int(got[0, 0]) == (2 ** 40 + 1) * (2 ** 20 + 1) + 15


def test_bulk_path_decides_almost_everything():
    rng = random.Random(11)
    head = _random_head(rng, 8, 8, 4, "rows", "default", True)
    n = 150
    x = [[F(rng.randint(-8, 8), 4) for _ in range(8)] for _ in range(n)]
    fast = attend(head, x, engine="fast")
    decs, outs = fast.share_decimals(4), fast.output_decimals(4)
    # dyadic values put a few outputs of rows dominated by one key within e^-20 of a
    # boundary (e.g. -1.71875 + tiny); those go to the exact path, nothing else does
    assert fast.fallbacks <= 0.01 * (n * n + n * 4)
    for i in (0, 1, 77, 149):
        assert decs[i] == [fast.share(i, j).decimal(4) for j in range(n)]
        assert outs[i] == [fast.output(i, c).decimal(4) for c in range(4)]
    assert sum(d != "0.0000" for r in decs for d in r) > n


def test_auto_uses_fast_past_64_tokens():
    rng = random.Random(3)
    head = _random_head(rng, 2, 2, 1, "slots", "default", False)
    x = [[F(rng.randint(-4, 4), 4) for _ in range(2)] for _ in range(65)]
    fast = attend(head, x)
    assert fast.engine == "fast"
    pencil = attend(head, x, engine="pencil")
    assert fast.share_decimals(4) == [[pencil.share(i, j).decimal(4) for j in range(65)]
                                      for i in range(65)]
    assert fast.output_decimals(6) == [[pencil.output(i, 0).decimal(6)] for i in range(65)]


def test_symbolic_closed_form_of_a_fast_share():
    ex = chronicle()
    fast = attend(ex.head, ex.x, engine="fast")
    e, R = sympy.exp, sympy.Rational
    assert fast.shares[1][0] == e(R(25, 16)) / (2 + e(R(3, 8)) + e(R(25, 16)))


@pytest.mark.parametrize("places", [-1, 51, 2.0, True])
def test_bad_places(places):
    fast = attend(chronicle().head, chronicle().x, engine="fast")
    with pytest.raises(InputError, match="digits must be a whole number from 0 to 50"):
        fast.share_decimals(places)
    with pytest.raises(InputError, match="digits must be a whole number from 0 to 50"):
        fast.output_decimals(places)
