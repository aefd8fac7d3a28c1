"""The seed program's eight named checks, on the chronicle example and under Hypothesis.

1. a projection is a weighted sum and nothing else;
2. every score is a query times a key divided by two (the chronicle divisor);
3. every attention row is shares of one;
4. two tokens with the same numbers get the same row;
5. the cost is three projections and two passes;
6. the softmax survives a score that no float can raise e to (800 and beyond);
7. a matrix of the wrong size is refused;
8. a token of the wrong width is refused.
"""

import math
import re
from fractions import Fraction as F

import hypothesis.strategies as st
import numpy as np
import pytest
import sympy
from hypothesis import assume, example, given

from exactattn import Head, ShapeError, attend
from exactattn import properties as P
from exactattn import strategies as eas
from exactattn.examples import chronicle
from exactattn.call import Call
from exactattn.properties import Implementation, PropertyFailure
from exactattn.properties import inputs as PI
from exactattn.testing import assert_typed_equal as typed_equal

EX = chronicle()
PAIR = (EX.head, EX.x)


def weighted_sum(weights_row, token):
    """One bias-free neuron: sum_m w[m] x[m] + 0."""
    return sum((w * x for w, x in zip(weights_row, token)), F(0)) + 0


# 1 ---------------------------------------------------------------------------------------
def test_1_a_projection_is_a_weighted_sum_and_nothing_else():
    trace = attend(EX.head, EX.x)
    for name, got in (("W_Q", trace.queries), ("W_K", trace.keys), ("W_V", trace.values)):
        neurons = EX.head.weights(name, "slots")        # one row of weights per output slot
        for i, token in enumerate(trace.x):
            for s, row in enumerate(neurons):
                typed_equal(got[i][s], weighted_sum(row, token))
    typed_equal(trace.queries[1], [F(0), F(3), F(1, 2), F(0)])
    typed_equal(trace.keys[0], [F(0), F(1), F(1, 4), F(1, 2)])


@given(eas.head_inputs(max_n=3), eas.rationals(), eas.rationals())
@example(PAIR, F(2), F(-1, 2))
def test_1_projections_are_linear_with_no_bias(pair, a, b):
    head, x = pair
    zero = [F(0)] * head.d_model
    combo = [a * u + b * v for u, v in zip(x[0], x[-1])]
    trace = attend(Head(head.W_Q, head.W_K, head.W_V, divisor=None), [x[0], x[-1], zero, combo])
    for got in (trace.queries, trace.keys, trace.values):
        assert got[2] == [0] * len(got[2])                        # nothing but the weights
        assert got[3] == [a * p + b * q for p, q in zip(got[0], got[1])]


# 2 ---------------------------------------------------------------------------------------
def test_2_every_score_is_a_query_times_a_key_divided_by_two():
    trace = attend(EX.head, EX.x)
    assert EX.head.divisor == 2
    for i in range(4):
        for j in range(4):
            dot = weighted_sum(trace.queries[i], trace.keys[j])
            typed_equal(trace.raw_scores[i][j], dot)
            typed_equal(trace.scaled_scores[i][j], dot / 2)
    typed_equal(trace.scaled_scores[1], [F(25, 16), F(0), F(3, 8), F(0)])


@given(eas.head_inputs(max_n=4, heads=eas.heads(causal=False, divisors=st.just(F(2)))))
@example(PAIR)
def test_2_with_divisor_two_every_scaled_score_is_half_the_dot_product(pair):
    head, x = pair
    trace = attend(head, x)
    for i in range(trace.n):
        for j in range(trace.n):
            typed_equal(trace.scaled_scores[i][j],
                        weighted_sum(trace.queries[i], trace.keys[j]) / 2)


# 3 ---------------------------------------------------------------------------------------
def test_3_every_attention_row_is_shares_of_one():
    trace = attend(EX.head, EX.x)
    for i in range(4):
        assert trace.row_sums_to_one(i) is True
        assert sympy.cancel(sympy.together(sum(trace.shares[i]))) == 1
    printed = [trace.share(1, j).decimal(4) for j in range(4)]
    assert printed == ["0.5800", "0.1216", "0.1769", "0.1216"]
    assert sum(F(p) for p in printed) == F("1.0001")           # the printed digits: rounding
    P.check_rows_sum_to_one(P.attend_as_function, Call.of_head(EX.head, EX.x))


@given(eas.head_inputs())
@example(PAIR)
def test_3_rows_sum_to_one_for_any_head(pair):
    head, x = pair
    trace = attend(head, x)
    assert all(trace.row_sums_to_one(i) for i in range(trace.n))


# 4 ---------------------------------------------------------------------------------------
def test_4_two_tokens_with_the_same_numbers_get_the_same_row():
    trace = attend(EX.head, EX.x)
    assert EX.x[1] == EX.x[3]
    assert trace.shares[1] == trace.shares[3] and trace.outputs[1] == trace.outputs[3]
    assert trace.shares[1] != trace.shares[0]
    assert P.check_identical_tokens(EX.head, EX.x) == 1


# 5 ---------------------------------------------------------------------------------------
def test_5_the_cost_is_three_projections_and_two_passes():
    trace = attend(EX.head, EX.x)
    n, D, d_k = 4, 4, 4
    assert trace.macs == {"projections": 3 * n * D * d_k, "scores": n * n * d_k,
                          "mix": n * n * d_k}
    assert trace.macs == {"projections": 192, "scores": 64, "mix": 64}
    assert P.check_cost(EX.head, EX.x)["total"] == 3 * n * D * d_k + 2 * n * n * d_k == 320


# 6 ---------------------------------------------------------------------------------------
def numpy_attention(queries, keys, values, *, mask=None, scale=None):
    """float64, the row maximum subtracted before exp."""
    scale = 1 / np.sqrt(queries.shape[-1]) if scale is None else scale
    scores = queries @ keys.T * scale
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    w = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return w / w.sum(axis=-1, keepdims=True) @ values


def naive_attention(queries, keys, values, *, mask=None, scale=None):
    """float64, exp of the raw scores: exp(800) is inf and inf/inf is nan."""
    scale = 1 / np.sqrt(queries.shape[-1]) if scale is None else scale
    with np.errstate(over="ignore", invalid="ignore"):
        w = np.exp(queries @ keys.T * scale)
        return w / w.sum(axis=-1, keepdims=True) @ values


def test_6_the_softmax_survives_a_score_no_float_can_raise_e_to():
    with pytest.raises(OverflowError):
        math.exp(800)
    head = Head([[400]], [[1]], [[1]], divisor=None)            # scores 400 x_i x_j
    x = [[1], [2]]
    trace = attend(head, x)
    typed_equal(trace.raw_scores[1], [F(800), F(1600)])
    assert trace.share(1, 1).decimal(4) == "1.0000"
    assert trace.share(1, 0).closed_form() == sympy.exp(800) / (sympy.exp(800) + sympy.exp(1600))
    assert trace.share(1, 0).decimal(50) == "0." + "0" * 50       # e^-800 / (1 + e^-800)
    assert trace.row_sums_to_one(1)
    inp = Call.of_head(head, x)
    P.check_share_support(P.attend_as_function, inp)              # yet exactly positive
    with np.errstate(over="ignore"):  # the overflow is the point: float64 cannot hold e^800
        assert np.exp(-800.0) == 0.0 and np.isinf(np.exp(800.0))
    # the float paths: max-subtracted float64 survives and agrees; the naive one turns to nan
    P.check_all(numpy_attention, inp)
    with pytest.raises(PropertyFailure, match=r"outputs\[0\]\[0\] = nan"):
        P.check_matches_reference(naive_attention, inp)


@given(st.lists(eas.rationals(min_value=800, max_value=2000), min_size=1, max_size=4))
@example([F(800), F(801)])
def test_6_scores_of_800_and_beyond_in_float_paths(scores):
    # one query of 1 against keys holding the scores: scaled scores = the scores
    inp = PI.one_head([[1]], [[s] for s in scores], [[k] for k in range(len(scores))],
                           policy=P.Policy(scale=1))
    P.check_matches_reference(numpy_attention, inp)
    P.check_rows_sum_to_one(Implementation(numpy_attention), inp)
    P.check_rows_sum_to_one(P.reference, inp)


# 7 ---------------------------------------------------------------------------------------
def test_7_a_matrix_of_the_wrong_size_is_refused():
    W = [[1, 0, 0, 0]] * 4
    with pytest.raises(ShapeError, match="^" + re.escape(
            "W_K must be 4 x 4 in the slots layout, to match W_Q (got 4 x 3)")):
        Head(W, [[1, 0, 0]] * 4, W)
    with pytest.raises(ShapeError, match="^" + re.escape(
            "W_V must be 4 x ? in the rows layout") .replace(r"\?", ".*")):
        Head([[1]] * 4, [[1]] * 4, [[1]] * 3, layout="rows")


@given(eas.heads(), st.integers(1, 3))
def test_7_any_wrongly_sized_key_matrix_is_refused(head, extra):
    W_K = head.weights("W_K", head.layout)
    bad = [row + [0] * extra for row in W_K]
    with pytest.raises(ShapeError, match=r"^W_K must be \d+ x \d+ in the (slots|rows) layout, "
                                         r"to match W_Q \(got \d+ x \d+\)"):
        Head(head.weights("W_Q", head.layout), bad, head.weights("W_V", head.layout),
             layout=head.layout)


# 8 ---------------------------------------------------------------------------------------
def test_8_a_token_of_the_wrong_width_is_refused():
    with pytest.raises(ShapeError, match="^" + re.escape(
            "token 1 must have d_model = 4 numbers (got 3)")):
        attend(EX.head, [[1, 0, 0]])
    with pytest.raises(ShapeError, match="^" + re.escape(
            "token 2 must have d_model = 4 numbers (got 3)")):
        attend(EX.head, [[0, 1, 0, "1/2"], [1, 0, 0]])


@given(eas.head_inputs(), st.integers(-1, 3).filter(bool))
def test_8_any_token_row_of_the_wrong_width_is_refused(pair, extra):
    head, x = pair
    width = head.d_model + extra
    assume(width >= 1)
    bad = [(row + [F(0)] * extra)[:width] for row in x]
    with pytest.raises(ShapeError, match="^" + re.escape(
            f"token 1 must have d_model = {head.d_model} numbers (got {width})")):
        attend(head, bad)
    ragged = x + [(x[0] + [F(0)] * extra)[:width]]
    with pytest.raises(ShapeError, match="^" + re.escape(
            f"token {len(x) + 1} must have d_model = {head.d_model} numbers (got {width})")):
        attend(head, ragged)
