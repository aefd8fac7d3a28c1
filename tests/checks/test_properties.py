"""The property suite: every property of a head under Hypothesis, exact against exactattn.

Each ``@given`` test runs 200 examples under the ``ci`` profile (tests/conftest.py)
and is pinned to the chronicle example with ``@example``.  Function-level
properties run on two exact functions: :func:`reference` (the softmax module,
every mask kind, cross-attention) and :func:`attend_as_function` (the head
engine itself; self-attention, no mask or causal).  Float code is checked
through the same functions with its tolerance; the wrong attentions of the
shared cases are caught and shrunk to tiny reproducers.
"""

import math
import re
from fractions import Fraction as F
from pathlib import Path

import hypothesis.strategies as st
import numpy as np
import pytest
import sympy
from hypothesis import example, find, given, settings

from exactattn.properties import inputs as PI
from exactattn import Head
from exactattn import properties as P
from exactattn import strategies as eas
from exactattn.call.policy import MASK_KINDS, Mask, Policy
from exactattn.errors import InputError, ShapeError
from exactattn.examples import chronicle
from exactattn.reference.online import all_splits, online_softmax
from exactattn.properties import Implementation, PropertyFailure, attend_as_function, reference
from exactattn.numbers.softmax import SoftmaxRow
from exactattn.verify import Reference, verify
from exactattn.call import Call
from exactattn.verify.adapter import FloatCall, FunctionImpl, ImplRaised, make_call
from exactattn.verify.compare import Tolerance, hard, judge, tolerance_for, within
from exactattn.numbers.formats import float_format
from exactattn.testing import assert_typed_equal as typed_equal

CHRONICLE = chronicle()
CHRONICLE_INPUT = Call.of_head(CHRONICLE.head, CHRONICLE.x)
CHRONICLE_CAUSAL = PI.replace(CHRONICLE_INPUT, policy=CHRONICLE_INPUT.policy.replace(causal=True))
CHRONICLE_PAIR = (CHRONICLE.head, CHRONICLE.x)

# reference on anything; the head engine on self-attention without a mask, causal or not
ANY = eas.attention_inputs()
SELF = eas.attention_inputs(self_attention=True, mask_kinds=(None,))
CASES = st.one_of(ANY.map(lambda i: (reference, i)), SELF.map(lambda i: (attend_as_function, i)))
NO_MASK_CASES = st.one_of(eas.attention_inputs(causal=False).map(lambda i: (reference, i)),
                          eas.attention_inputs(self_attention=True, mask_kinds=(None,), causal=False)
                          .map(lambda i: (attend_as_function, i)))


def PIN(test):
    """Pin the chronicle example, on the reference."""
    return example((reference, CHRONICLE_INPUT))(test)


def PIN_HEAD(test):
    """Pin the causal chronicle example, on the head engine."""
    return example((attend_as_function, CHRONICLE_CAUSAL))(test)


# ---------------------------------------------------------------- float attention for the tests
def numpy_attention(queries, keys, values, *, mask=None, scale=None):
    """Scaled dot-product attention in numpy float64, row maximum subtracted."""
    scale = 1 / np.sqrt(queries.shape[-1]) if scale is None else scale
    scores = queries @ keys.T * scale
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    return weights / weights.sum(axis=-1, keepdims=True) @ values


def no_normalisation(queries, keys, values, *, mask=None, scale=None):
    """Wrong: exp of the scores used as shares without dividing by their sum."""
    scale = 1 / np.sqrt(queries.shape[-1]) if scale is None else scale
    scores = queries @ keys.T * scale
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    return np.exp(scores) @ values


def wrong_axis(queries, keys, values, *, mask=None, scale=None):
    """Wrong: the softmax taken over the queries (axis 0) instead of the keys."""
    scale = 1 / np.sqrt(queries.shape[-1]) if scale is None else scale
    scores = queries @ keys.T * scale
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=0, keepdims=True))
    return weights / weights.sum(axis=0, keepdims=True) @ values


NUMPY = Implementation(numpy_attention, mask_as="additive")


# ---------------------------------------------------------------- the properties, exact
@given(CASES)
@PIN
@PIN_HEAD
def test_rows_of_shares_sum_to_exactly_one(case):
    fn, inp = case
    P.check_rows_sum_to_one(fn, inp)


@given(CASES)
@PIN
@PIN_HEAD
def test_shares_positive_where_visible_and_exactly_zero_where_masked(case):
    fn, inp = case
    P.check_share_support(fn, inp)


@given(CASES, st.data())
@example((reference, CHRONICLE_INPUT), None)
@example((attend_as_function, CHRONICLE_CAUSAL), None)
def test_adding_a_constant_to_a_score_row_changes_nothing(case, data):
    fn, inp = case
    shifts = None if data is None else \
        data.draw(st.lists(eas.rationals(min_value=-50, max_value=50), min_size=PI.sizes(inp)[0],
                           max_size=PI.sizes(inp)[0]), label="shifts")
    P.check_shift_invariance(fn, inp, shifts)


@given(NO_MASK_CASES, st.data())
@example((reference, CHRONICLE_INPUT), None)
def test_permuting_keys_and_values_together_leaves_outputs_unchanged(case, data):
    fn, inp = case
    perm = None if data is None else data.draw(st.permutations(range(PI.sizes(inp)[1])), label="perm")
    P.check_key_permutation(fn, inp, perm)


@given(NO_MASK_CASES, st.data())
@example((attend_as_function, CHRONICLE_INPUT), None)
def test_permuting_queries_permutes_outputs(case, data):
    fn, inp = case
    perm = None if data is None else data.draw(st.permutations(range(PI.sizes(inp)[0])), label="perm")
    P.check_query_permutation(fn, inp, perm)


@given(CASES, st.data())
@example((reference, CHRONICLE_INPUT), None)
def test_identical_queries_get_identical_rows(case, data):
    fn, inp = case
    if data is not None and inp.block_mask(0, 0) is None and not inp.policy.causal:   # a duplicate to check
        a = data.draw(st.integers(0, PI.sizes(inp)[0] - 1), label="copied query")
        queries, keys, values = PI.matrices(inp)
        queries = queries + [queries[a]]
        if fn is attend_as_function:               # self-attention: the token is copied whole
            keys, values = keys + [keys[a]], values + [values[a]]
        inp = PI.replace(inp, queries=queries, keys=keys, values=values)
        assert P.check_identical_queries(fn, inp) >= 1
    else:
        P.check_identical_queries(fn, inp)


@given(eas.head_inputs(max_n=4, heads=eas.heads(causal=False, max_d_model=3, max_d_k=3,
                                                  max_d_v=3)), st.data())
@example(CHRONICLE_PAIR, None)
def test_two_tokens_with_the_same_numbers_get_the_same_row(pair, data):
    head, x = pair
    if data is not None:
        x = x + [x[data.draw(st.integers(0, len(x) - 1), label="copied token")]]
    assert P.check_identical_tokens(head, x) >= 1


@given(CASES, st.data())
@example((reference, CHRONICLE_INPUT), None)
def test_a_key_bias_cancels(case, data):
    fn, inp = case
    bias = None if data is None else data.draw(
        st.lists(eas.rationals(), min_size=PI.sizes(inp)[2], max_size=PI.sizes(inp)[2]), label="key bias")
    P.check_key_bias_cancels(fn, inp, bias)


@given(CASES, st.data())
@example((reference, CHRONICLE_INPUT), None)
def test_a_value_bias_shifts_every_output_by_itself(case, data):
    fn, inp = case
    bias = None if data is None else data.draw(
        st.lists(eas.rationals(), min_size=PI.sizes(inp)[3], max_size=PI.sizes(inp)[3]), label="value bias")
    P.check_value_bias_shifts(fn, inp, bias)


@given(eas.head_inputs(max_n=4, heads=eas.heads(max_d_model=3, max_d_k=3, max_d_v=3)), st.data())
@example(CHRONICLE_PAIR, None)
def test_the_biases_the_proofs_cancel_cancel_in_the_head(pair, data):
    head, x = pair
    if data is None:
        key_bias, value_bias = [1, "1/2", -2, 3], [0, 1, 0, "-1/3"]
    else:
        key_bias = data.draw(st.lists(eas.rationals(), min_size=head.d_k, max_size=head.d_k))
        value_bias = data.draw(st.lists(eas.rationals(), min_size=head.d_v, max_size=head.d_v))
    P.check_bias_cancels(head, x, key_bias=key_bias, value_bias=value_bias)


@given(CASES)
@PIN
@PIN_HEAD
def test_each_output_lies_between_the_smallest_and_largest_visible_value(case):
    fn, inp = case
    P.check_outputs_within_values(fn, inp)


@given(st.one_of(
    eas.attention_inputs(mask_kinds=(None,), causal=True, alignments=("top_left",))
    .map(lambda i: (reference, i)),
    eas.attention_inputs(self_attention=True, mask_kinds=(None,), causal=True)
    .map(lambda i: (attend_as_function, i))))
@PIN_HEAD
def test_with_a_causal_mask_the_first_output_is_its_own_value(case):
    fn, inp = case
    P.check_causal_first_output(fn, inp)


@given(st.one_of(eas.attention_inputs(mask_kinds=MASK_KINDS),
                 eas.attention_inputs(mask_kinds=(None,), causal=True)))
@example(CHRONICLE_CAUSAL)
def test_keys_and_values_at_masked_positions_do_not_reach_the_outputs(inp):
    P.check_masked_entries_ignored(reference, inp)


@given(eas.attention_inputs(self_attention=True, max_n=3, max_d_k=2, max_d_v=2,
                            mask_kinds=(None,), causal=True))
@example(CHRONICLE_CAUSAL)
def test_masked_keys_and_values_appear_in_no_output_symbolically(inp):
    n = PI.sizes(inp)[0]
    assert P.check_masked_entries_absent(inp) == n * (n - 1) // 2


SCORE_ROWS = st.lists(st.one_of(eas.rationals(min_value=-6, max_value=6), st.none()),
                      min_size=1, max_size=6)


@given(SCORE_ROWS, eas.divisors(allow_default=False), st.data())
@example([F(25, 8), F(0), F(3, 4), F(0)], F(2), None)      # chronicle row 2, divisor 2
@example([None, None, F(0), F(0)], None, None)              # the blockwise case
def test_online_softmax_equals_one_pass_for_every_split(raw, divisor, data):
    d2 = None if divisor is None else (F(divisor) ** 2 if isinstance(divisor, F) else
                                       F(divisor[5:-1]))
    values = None if data is None else data.draw(
        st.lists(st.lists(eas.rationals(), min_size=2, max_size=2), min_size=len(raw),
                 max_size=len(raw)), label="values")
    for policy in ("zero", "uniform", "nan"):
        assert P.check_online_softmax(raw, d2, values, empty_row=policy) == 2 ** (len(raw) - 1)


@given(eas.head_inputs(max_n=5))
@example(CHRONICLE_PAIR)
def test_the_counted_cost_equals_the_derived_formula(pair):
    head, x = pair
    n, D, d_k, d_v = len(x), head.d_model, head.d_k, head.d_v
    counted = P.check_cost(head, x)
    pairs = n * (n + 1) // 2 if head.causal else n * n
    assert counted == {"projections": n * D * (2 * d_k + d_v), "scores": pairs * d_k,
                       "mix": pairs * d_v, "total": n * D * (2 * d_k + d_v) + pairs * (d_k + d_v)}


@given(ANY)
@example(CHRONICLE_INPUT)
@example(CHRONICLE_CAUSAL)
def test_a_correct_numpy_attention_passes_every_check(inp):
    ran = P.check_all(NUMPY, inp)
    assert "matches reference" in ran and len(ran) >= 9


@given(SELF)
@example(CHRONICLE_CAUSAL)
def test_the_head_engine_equals_the_reference_exactly(inp):
    P.check_matches_reference(attend_as_function, inp)


# ---------------------------------------------------------------- shrink quality
SHRINK = settings(database=None, max_examples=1000, derandomize=True)


def _fails(fn, inp) -> bool:
    try:
        P.check_all(fn, inp)
    except PropertyFailure:
        return True
    return False


@pytest.mark.filterwarnings("ignore:invalid value encountered")
@pytest.mark.parametrize("wrong, reported", [
    (no_normalisation, "property failed: "),
    (wrong_axis, "property failed: every row of shares sums to exactly 1"),
])
def test_wrong_attention_fails_and_shrinks_to_a_tiny_input(wrong, reported):
    inp = find(eas.attention_inputs(), lambda i: _fails(wrong, i), settings=SHRINK)
    assert PI.sizes(inp)[0] <= 2 and PI.sizes(inp)[1] <= 2
    assert PI.sizes(inp)[2] <= 2 and PI.sizes(inp)[3] <= 2
    assert inp.block_mask(0, 0) is None and inp.policy == Policy()
    entries = [e for m in PI.matrices(inp) for r in m for e in r]
    assert set(entries) <= {0, 1, -1}, inp          # shrunk to zero (or unit) weights
    with pytest.raises(PropertyFailure, match="^" + re.escape(reported)):
        P.check_all(wrong, inp)


def test_the_falsifying_report_is_readable():
    with pytest.raises(PropertyFailure) as info:
        P.check_rows_sum_to_one(wrong_axis, PI.one_head([[2]], [[1], [0]], [[1], [3]],
                                                           policy=Policy(scale=1)))
    assert str(info.value) == "\n".join([
        "property failed: every row of shares sums to exactly 1",
        "  function: wrong_axis (float; rtol=1e-12, atol=1e-12 from float64; "
        "|got - exact| <= atol + rtol*M)",
        "  input: Call([[2]], [[1], [0]], [[1], [3]], policy=Policy(scale='1'))",
        "  row 0: shares [1.0, 1.0] sum to 2.0, want 1"])


# ---------------------------------------------------------------- the handed cases (tests/data/cases)
def test_softmax_axis_case():
    # scores (2, 0), V (1, 3): shares 0.880797, 0.119203, output 1.238406
    inp = PI.one_head([[2]], [[1], [0]], [[1], [3]], policy=Policy(scale=1))
    out = reference(*PI.matrices(inp), scale=1)
    assert out[0][0].decimal(6) == "1.238406"
    shares = reference(PI.matrices(inp)[0], PI.matrices(inp)[1], [[1, 0], [0, 1]], scale=1)[0]
    assert [s.decimal(6) for s in shares] == ["0.880797", "0.119203"]
    assert wrong_axis(np.array([[2.0]]), np.array([[1.0], [0.0]]), np.array([[1.0], [3.0]]),
                      scale=1.0).tolist() == [[4.0]]                     # the faulty variant
    with pytest.raises(PropertyFailure, match="lies outside"):
        P.check_outputs_within_values(wrong_axis, inp)


def test_bool_mask_added_case():
    # a boolean keep mask added as 1/0 masks nothing: 0.731059, 0.268941 instead of 1, 0
    inp = PI.one_head([[0]], [[0], [0]], [[1, 0], [0, 1]], Mask("bool_keep", [[True, False]]),
                         Policy(scale=1))
    shares = reference(*PI.matrices(inp), mask=inp.block_mask(0, 0), scale=1)[0]
    assert [s.exact() for s in shares] == [F(1), F(0)]

    def mask_added(queries, keys, values, *, mask=None, scale=None):
        return numpy_attention(queries, keys, values, mask=mask.astype(float), scale=scale)
    with pytest.raises(PropertyFailure, match=r"shares\[0\]\[1\] = 0\.2689414213699951 for a "
                                              r"masked key, want exactly 0"):
        P.check_share_support(mask_added, inp)
    P.check_share_support(numpy_attention, inp)


def test_causal_alignment_case():
    # 2 queries, 5 keys, all scores equal, V = 1..5
    values = [[k] for k in range(1, 6)]
    for alignment, want in (("top_left", [F(1), F(3, 2)]), ("bottom_right", [F(5, 2), F(3)])):
        out = reference([[0], [0]], [[0]] * 5, values, causal=True, alignment=alignment)
        for got, w in zip((row[0].exact() for row in out), want):
            typed_equal(got, w)


def test_masked_rows_case():
    keep = Mask("bool_keep", [[True, False], [False, False]])
    outs = {policy: [row[0].exact() for row in
                     reference([[0], [0]], [[0], [0]], [[1], [3]], mask=keep, empty_row=policy)]
            for policy in ("zero", "uniform")}
    assert outs == {"zero": [F(1), F(0)], "uniform": [F(1), F(2)]}
    nan_row = reference([[0], [0]], [[0], [0]], [[1], [3]], mask=keep, empty_row="nan")[1][0]
    assert nan_row.decimal(3) == "nan"
    additive = Mask("additive", [["0.7", "0"], ["0", "0"]])
    out = reference([[0], [0]], [[0], [0]], [[1], [3]], mask=additive, scale=1)
    assert out[0][0].decimal(6) == "1.663624" and out[1][0].exact() == F(2)
    inp = PI.one_head([[0], [0]], [[0], [0]], [[1], [3]], keep, Policy(scale=1))
    P.check_rows_sum_to_one(Implementation(reference, exact=True), inp)   # zero policy
    with pytest.raises(PropertyFailure, match=r"row 1 sees no key: shares \[0, 0\], want 1/2 each"):
        P.check_rows_sum_to_one(Implementation(reference, exact=True, empty_row="uniform"), inp)


def test_an_additive_mask_keeps_its_offsets_under_an_irrational_scale():
    # scores 1, 0 divided by sqrt(2), offsets 1/2 and 0: e^(1/sqrt(2) + 1/2) / (e^(...) + 1)
    inp = PI.one_head([[1]], [[1], [0]], [[1], [0]], Mask("additive", [["1/2", 0]]),
                         Policy(divisor_squared=F(2)))
    out = reference(*PI.matrices(inp), mask=inp.block_mask(0, 0), scale="1/sqrt(2)")[0][0]
    assert out.decimal(30) == "0.769786627016937707580178105514"
    assert P.check_all(reference, inp) == P.check_all(NUMPY, inp)


def test_the_causal_rule_and_an_explicit_mask_combine():
    keep = Mask("bool_keep", [[True, True, True], [False, True, True]])
    inp = PI.one_head([[0], [0]], [[0]] * 3, [[1], [2], [4]], keep,
                         Policy(causal=True, alignment="bottom_right"))
    # bottom_right: query 0 sees keys 0 and 1, query 1 every key; the mask hides key 0 from query 1
    assert [PI.visible(inp)[i] for i in range(2)] == [[0, 1], [1, 2]]
    assert [[bool(PI.keep(inp)[i, j]) for j in range(3)] for i in range(2)] == \
        [[True, True, False], [False, True, True]]
    assert PI.effective_mask(inp) == Mask("bool_keep", [[True, True, False], [False, True, True]])
    out = reference(*PI.matrices(inp), mask=keep, causal=True,
                    alignment="bottom_right")
    for got, want in zip((row[0].exact() for row in out), [F(3, 2), F(3)]):
        typed_equal(got, want)
    additive = PI.replace(inp, mask=Mask("additive", [["1/2", 0, 0], [0, "-inf", 0]]),
                           policy=Policy(causal=True))
    assert PI.effective_mask(additive) == Mask("additive", [["1/2", None, None], [0, None, None]])
    assert P.check_all(NUMPY, additive)[-1] == "causal first output"


def test_overflow_case():
    # scores (100, 99): e/(e+1) and 1/(e+1); a naive float32 softmax gives nan
    out = reference([[1]], [[100], [99]], [[1, 0], [0, 1]], scale=1)[0]
    assert sympy.simplify(out[0].closed_form() - sympy.E / (1 + sympy.E)) == 0
    assert [s.decimal(10) for s in out] == ["0.7310585786", "0.2689414214"]

    def naive_float32(queries, keys, values, *, mask=None, scale=None):
        with np.errstate(over="ignore", invalid="ignore"):
            w = np.exp((queries @ keys.T * scale).astype(np.float32))
            return (w / w.sum(axis=-1, keepdims=True)) @ values.astype(np.float32)
    inp = PI.one_head([[1]], [[100], [99]], [[1], [0]], policy=Policy(scale=1))
    with pytest.raises(PropertyFailure, match=r"outputs\[0\]\[0\] = nan"):
        P.check_matches_reference(Implementation(naive_float32, dtype="float32"), inp)
    P.check_matches_reference(Implementation(numpy_attention, dtype="float32"), inp)


def test_blockwise_case():
    # scores (-inf, -inf, 0, 0), V (9, 9, 1, 3), blocks of 2
    res = online_softmax([None, None, F(0), F(0)], None, [[9], [9], [1], [3]], blocks=2)
    assert [s.exact() for s in res.shares()] == [F(0), F(0), F(1, 2), F(1, 2)]
    typed_equal(res.outputs[0].exact(), F(2))
    assert res.equals_one_pass()


# ---------------------------------------------------------------- online softmax, more exactly
def test_online_softmax_counts_its_rescales():
    res = online_softmax([F(0), F(1), F(3), F(2)], F(2), blocks=1)
    assert res.rescales == 2 and res.row.max_raw == F(3)
    assert res.row.counts == SoftmaxRow([F(0), F(1), F(3), F(2)], F(2)).counts


def test_online_softmax_detects_a_wrong_running_state():
    # a kernel that forgets to rescale the normaliser when the maximum grows
    res = online_softmax([F(0), F(2)], None, blocks=1)
    res.row.counts = {F(0): 2}                       # what skipping the rescale leaves
    assert not res.equals_one_pass()


def test_every_split_is_tried():
    assert sorted(map(tuple, all_splits(4))) == sorted(
        [(4,), (1, 3), (2, 2), (3, 1), (1, 1, 2), (1, 2, 1), (2, 1, 1), (1, 1, 1, 1)])


ONLINE_BAD = [
    (dict(blocks=0), InputError, "blocks must be a positive block size (got 0)"),
    (dict(blocks=[1, 1]), InputError, "blocks must add up to the row length 3 (got [1, 1], adding to 2)"),
    (dict(blocks=[1, "2"]), InputError, "blocks must hold positive integers (got [1, '2'])"),
    (dict(empty_row="inf"), InputError, "empty_row must be one of zero, uniform, nan (got 'inf')"),
    (dict(values=[[1]]), ShapeError, "values must have one row per key, 3 (got 1)"),
]


@pytest.mark.parametrize("kwargs, error, message", ONLINE_BAD)
def test_online_softmax_refuses_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match="^" + re.escape(message)):
        online_softmax([F(0), F(1), None], None, **kwargs)


def test_online_softmax_refuses_float_scores():
    with pytest.raises(InputError, match=re.escape("raw[1] must be a Fraction or None for a masked key (got 0.5)")):
        online_softmax([F(0), 0.5], None)


# ---------------------------------------------------------------- biases, derived
def test_a_query_bias_does_not_cancel():
    # b_q . k_j varies with j, so the shares move (the proofs' claim covers key biases only)
    plain = CHRONICLE_INPUT
    b_q = [F(1), F(0), F(0), F(0)]
    assert [sum(b * k for b, k in zip(b_q, key)) for key in PI.matrices(plain)[1]] == [0, 1, 0, 1]
    moved = PI.replace(plain, queries=[[a + b for a, b in zip(q, b_q)] for q in PI.matrices(plain)[0]])
    base = reference(PI.matrices(plain)[0], PI.matrices(plain)[1], [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]])
    other = reference(PI.matrices(moved)[0], PI.matrices(moved)[1], [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]])
    assert base[1][0].decimal(4) == "0.5800"      # the chronicle share
    assert other[1][0].decimal(4) == "0.5010"     # scaled scores 25/16, 1/2, 3/8, 1/2
    assert other[1][0].closed_form() == sympy.exp(F(25, 16)) / (
        sympy.exp(F(25, 16)) + 2 * sympy.exp(sympy.Rational(1, 2)) + sympy.exp(sympy.Rational(3, 8)))


# ---------------------------------------------------------------- the interface and its checks
def test_exact_comparisons_decide_transcendental_signs():
    # reversed scores give a different exact output; the comparison must see it exactly
    def reversed_scores(queries, keys, values, *, mask=None, scale=None):
        return reference([[-e for e in q] for q in queries], keys, values, mask=mask, scale=scale)
    inp = PI.one_head([[1]], [[1], [0]], [[1], [0]], policy=Policy(scale=1))
    with pytest.raises(PropertyFailure, match=re.escape(
            "outputs[0][0] = 0.26894142137 (exactly exp(-1)/(exp(-1) + 1)), "
            "exact 0.73105857863 (exactly exp(1)/(1 + exp(1)))")):
        P.check_matches_reference(Implementation(reversed_scores, exact=True), inp)


def test_float_tolerance_comes_from_the_dtype_and_can_be_set():
    inp = PI.one_head([[1]], [[1], [0]], [[1], [0]], policy=Policy(scale=1))

    def off_by(eps):
        def fn(queries, keys, values, *, mask=None, scale=None):
            return numpy_attention(queries, keys, values, scale=scale) + eps
        return fn
    P.check_matches_reference(off_by(1e-13), inp)
    with pytest.raises(PropertyFailure, match=r"rtol=1e-12, atol=1e-12 from float64"):
        P.check_matches_reference(off_by(1e-9), inp)
    P.check_matches_reference(Implementation(off_by(1e-9), rtol=1e-8, atol=1e-8), inp)
    P.check_matches_reference(Implementation(off_by(1e-6), dtype="float32"), inp)


def test_wrong_output_shape_is_reported():
    def flat(queries, keys, values, *, mask=None, scale=None):
        return numpy_attention(queries, keys, values, scale=scale).ravel()
    with pytest.raises(PropertyFailure, match=re.escape("outputs must be 1 x 2 (got shape (2,))")):
        P.check_matches_reference(flat, PI.one_head([[1]], [[1]], [[1, 2]]))


def test_all_is_exactly_the_public_names():
    assert P.__all__ == sorted(P.__all__)
    assert set(P.__all__) == {
        "Implementation", "PropertyFailure", "attend_as_function", "check_all",
        "check_bias_cancels", "check_causal_first_output", "check_cost", "check_identical_queries",
        "check_identical_tokens", "check_key_bias_cancels", "check_key_permutation",
        "check_masked_entries_absent", "check_masked_entries_ignored", "check_matches_reference",
        "check_online_softmax", "check_outputs_within_values", "check_query_permutation",
        "check_rows_sum_to_one", "check_share_support", "check_shift_invariance",
        "check_value_bias_shifts", "reference", "check_masked_nonfinite_ignored"}
    for name in ("MASK_FORMS", "MASK_KINDS", "TOLERANCES", "Mask", "Policy", "OPT_IN",
                 "PROPERTIES", "check_rows_sum_below_one", "holds"):   # importable, not listed
        assert hasattr(P, name)
    assert issubclass(PropertyFailure, AssertionError)


BAD = [
    (lambda: Implementation(3), "fn must be callable (got 3)"),
    (lambda: Implementation(reference, exact="yes"), "exact must be True or False (got 'yes')"),
    (lambda: Implementation(reference, mask_as="int"),
     "mask_as must be one of bool_keep, bool_drop, additive, mask (got 'int')"),
    (lambda: Implementation(reference, rtol=-1), "rtol must be a non-negative finite number (got -1)"),
    (lambda: Implementation(reference, empty_row="inf"),
     "empty_row must be one of zero, uniform, nan (got 'inf')"),
    (lambda: Mask("causal_top_left", [[True]]),
     "kind must be one of bool_keep, bool_drop, additive (got 'causal_top_left')"),
    (lambda: Policy(causal=True, alignment="top-left"),
     "alignment must be one of top_left, bottom_right (got 'top-left')"),
    (lambda: Mask("bool_drop", [[True], [True, False]]), "mask must have rows of equal length (got lengths [1, 2])"),
    (lambda: Mask("additive", [["x"]]), "mask[0][0] must be a number such as 3, '1/2' or '-0.75' (got 'x')"),
    (lambda: Mask("additive", [["1/2"]]).as_form("bool_keep"),
     "mask_as must be 'additive' for an additive mask with finite offsets (got 'bool_keep')"),
    # the input is a Call: its checks and its words (call/inputs.py)
    (lambda: Call([[1]], [[1]], [[1]], [[True, True]]),
     "mask must be L x S = 1 x 1 or broadcast to 1 x 1 x 1 x 1 (got 1 x 2)"),
    (lambda: Call([[1]], [[1]], [[1]], [["yes"]]),
     "mask[0][0] must be True or False in a bool_keep mask (got 'yes')"),
    (lambda: Call([[1]], [[1]], [[1]], policy=Policy(scale=0)),
     "scale must be 'default', a positive number, 1/sqrt(q) for a positive rational q (such as "
     "1/sqrt(48)), or 'none' (got '0')"),
    (lambda: Call([[1]], [[1], [2]], [[1]]),
     "value must have the key's batch, heads and length 1 x 1 x 2 (got 1 x 1 x 1)"),
    (lambda: P.check_causal_first_output(reference, CHRONICLE_INPUT),
     "inp must be causal with query 0 seeing key 0 alone for this check (top_left, or "
     "bottom_right with as many keys as queries) (got causal=off, query 0 sees keys [0, 1, 2, 3])"),
    (lambda: P.check_causal_first_output(reference, PI.replace(CHRONICLE_CAUSAL,
        keys=PI.matrices(CHRONICLE_CAUSAL)[1] * 2, values=PI.matrices(CHRONICLE_CAUSAL)[2] * 2,
        policy=Policy(causal=True, alignment="bottom_right"))),
     "inp must be causal with query 0 seeing key 0 alone for this check (top_left, or "
     "bottom_right with as many keys as queries) (got causal=on, query 0 sees keys [0, 1, 2, 3, 4])"),
    (lambda: P.check_key_permutation(reference, CHRONICLE_INPUT, [0, 1, 1, 2]),
     "permutation must be a permutation of 0..3 (got [0, 1, 1, 2])"),
    (lambda: P.check_shift_invariance(reference, CHRONICLE_INPUT, [1]),
     "shifts must have one entry per query, 4 (got 1)"),
    (lambda: attend_as_function([[1]], [[1], [1]], [[1], [1]]),
     "keys must number as many as queries for exactattn.attend, 1 (got 2)"),
    (lambda: attend_as_function([[1], [1]], [[1], [1]], [[1], [1]],
                                mask=Mask("bool_keep", [[False, True], [True, True]])),
     "mask must be None or the causal mask for exactattn.attend (got Mask('bool_keep', "
     "[[False, True], [True, True]])); use reference for any other mask"),
    (lambda: P.check_masked_entries_absent(Call([[1]], [[1]], [[1]], [[True]])),
     "mask must be None for exactattn.attend, which knows the causal rule only "
     "(got Mask('bool_keep', [[True]]))"),
    (lambda: reference([[1]], [[1]], [[1]], scale=0.5), "scale is a binary float (0.5)"),
    (lambda: reference([[sympy.Symbol("x")]], [[1]], [[1]]),
     "query must be a rational number for this engine (got x)"),
    (lambda: reference([[1]], [[1]], [[1]], causal="yes"), "causal must be true or false (got 'yes')"),
    (lambda: P.check_identical_tokens(Head([[1]], [[1]], [[1]], causal=True), [[1]]),
     "head must not be causal for this check (got causal=True)"),
]


@pytest.mark.parametrize("call, message", BAD, ids=[m[:40] for _, m in BAD])
def test_bad_arguments_are_refused(call, message):
    with pytest.raises(InputError, match="^" + re.escape(message)):
        call()


def test_a_policy_that_is_not_a_policy_is_refused():
    with pytest.raises(InputError, match=r"^policy must be a Policy or None \(got 'causal'\)"):
        Call([[1]], [[1]], [[1]], policy="causal")


def test_exact_implementations_must_return_exact_entries():
    def floats(queries, keys, values, *, mask=None, scale=None):
        return [[0.5]]
    with pytest.raises(InputError, match=re.escape("outputs[0][0] must be a Fraction or an ExpRatio "
                                                   "from an exact function (got 0.5)")):
        P.check_matches_reference(Implementation(floats, exact=True), PI.one_head([[1]], [[1]], [[1]]))


def test_exact_sums_need_one_normaliser():
    def per_column(queries, keys, values, *, mask=None, scale=None):
        columns = [reference(queries, keys, [[v[c]] for v in values], mask=mask, scale=scale)
                   for c in range(len(values[0]))]
        return [[col[i][0] for col in columns] for i in range(len(queries))]
    inp = PI.one_head([[1]], [[1], [0]], [[1], [0]], policy=Policy(scale=1))
    P.check_rows_sum_to_one(Implementation(per_column, exact=True), inp)   # equal rows, built apart

    def two_rows(queries, keys, values, *, mask=None, scale=None):
        other = reference([[2]], keys, values, scale=scale)            # scores 2, 0: another row
        return [[per_column(queries, keys, values, scale=scale)[0][0], other[0][1]]]
    with pytest.raises(InputError, match="^" + re.escape(
            "values must share one softmax normaliser to be added exactly (got "
            "exp(1)/(1 + exp(1)) and 1/(1 + exp(2)))")):
        P.check_rows_sum_to_one(Implementation(two_rows, exact=True), inp)


def test_irrational_scale_reaches_the_float_function_as_a_float():
    seen = []

    def spy(queries, keys, values, *, mask=None, scale=None):
        seen.append(scale)
        return numpy_attention(queries, keys, values, mask=mask, scale=scale)
    P.check_matches_reference(spy, PI.one_head([[1]], [[1]], [[1]], policy=Policy(divisor_squared=F(2))))
    P.check_matches_reference(spy, PI.one_head([[1, 1]], [[1, 1]], [[1]]))
    assert seen == [math.sqrt(0.5), None]


def test_masks_arrive_in_the_form_asked_for():
    seen = {}
    causal = Policy(causal=True)
    for form in ("bool_keep", "bool_drop", "additive"):
        def spy(queries, keys, values, *, mask=None, scale=None, form=form):
            seen[form] = mask.tolist()
            return np.zeros((2, 1))
        Implementation(spy, mask_as=form)(PI.one_head([[0], [0]], [[0], [0]], [[1], [3]],
                                                         policy=causal))
    assert seen == {"bool_keep": [[True, False], [True, True]],
                    "bool_drop": [[False, True], [False, False]],
                    "additive": [[0.0, -math.inf], [0.0, 0.0]]}


# ---------------------------------------------------------------- one checker stack
def raises_for_two_keys(queries, keys, values, *, mask=None, scale=None):
    if keys.shape[0] >= 2:
        raise ValueError("two\nkeys")
    return numpy_attention(queries, keys, values, mask=mask, scale=scale)


def test_a_function_that_raises_fails_the_property_with_the_exception_named():
    inp = PI.one_head([[1]], [[1], [0]], [[1], [3]])
    with pytest.raises(PropertyFailure) as info:
        P.check_rows_sum_to_one(raises_for_two_keys, inp)
    assert str(info.value) == "\n".join([
        "property failed: every row of shares sums to exactly 1",
        "  function: raises_for_two_keys (float; tolerance from the returned dtype; "
        "|got - exact| <= atol + rtol*M)",
        "  input: Call([[1]], [[1], [0]], [[1], [3]], policy=Policy())",
        "  raises_for_two_keys raised ValueError: two keys"])
    cause = info.value.__cause__
    assert type(cause) is ImplRaised and type(cause.__cause__) is ValueError
    P.check_all(raises_for_two_keys, PI.one_head([[1]], [[1]], [[1]]))   # one key: no raise


def test_a_raising_function_shrinks_like_any_failure():
    inp = find(eas.attention_inputs(), lambda i: _fails(raises_for_two_keys, i), settings=SHRINK)
    assert PI.sizes(inp) == (1, 2, 1, 1)


def test_an_exact_function_that_raises_fails_the_property():
    # the head engine knows the causal rule only as itself, not permuted into a mask
    with pytest.raises(PropertyFailure, match=re.escape(
            "  attend_as_function raised InputError: mask must be None or the causal mask")):
        P.check_key_permutation(attend_as_function, CHRONICLE_CAUSAL)


def test_the_properties_adapter_is_verifys_adapter():
    impl = Implementation(numpy_attention, mask_as="bool_drop", dtype="float32")
    assert type(impl.function) is FunctionImpl
    assert (impl.function.convention, impl.function.mask_as) == ("mask", "bool_drop")
    # the same function checked by verify, in ULPs, under a causal bottom_right policy
    p = Call([[0], [1]], [[0], [1], [2]], [[1], [2], [4]])
    policy = Policy(causal=True, alignment="bottom_right")
    for form in ("bool_keep", "additive"):
        rep = verify(FunctionImpl(numpy_attention, convention="mask", mask_as=form), p.with_policy(policy),
                     "float64")
        assert rep.passed, rep.summary()
    # and SDPA's convention reaches the same function through its own names
    def sdpa_names(query, key, value, *, attn_mask=None, is_causal=False, scale=None):
        assert not is_causal
        return numpy_attention(query, key, value, mask=attn_mask, scale=scale)
    assert verify(FunctionImpl(sdpa_names), p.with_policy(Policy()), "float64").passed


def test_the_one_reference_gives_the_properties_their_exact_values():
    inp = PI.one_head([[1]], [[1], [0]], [[1], [0]], Mask("additive", [["1/2", 0]]),
                         Policy(divisor_squared=F(2)))
    ref = Reference(inp)
    assert reference(*PI.matrices(inp), mask=inp.block_mask(0, 0),
                     scale="1/sqrt(2)") == ref.outputs()
    assert ref.offsets(0, 0, 0) == [F(1, 2), F(0)]


CAUSAL_CALL = FloatCall(np.zeros((2, 1)), np.zeros((3, 1)), np.zeros((3, 1)), "float64",
                   Policy(causal=True, alignment="bottom_right"),
                   attn_mask=np.array([[0.0, -math.inf, 0.0], [0.0, 0.0, 0.0]]))


@pytest.mark.parametrize("form, fold, want", [
    (None, False, [[0.0, -math.inf, 0.0], [0.0, 0.0, 0.0]]),
    (None, True, [[0.0, -math.inf, -math.inf], [0.0, 0.0, 0.0]]),
    ("bool_keep", True, [[True, False, False], [True, True, True]]),
    ("bool_drop", True, [[False, True, True], [False, False, False]]),
    ("bool_drop", False, [[False, True, False], [False, False, False]]),
])
def test_masks_reach_the_function_in_any_form_with_the_causal_rule_folded(form, fold, want):
    got = CAUSAL_CALL.mask_in(form, fold=fold)
    assert got.tolist() == want and got.dtype == (bool if form else np.float64)


def test_an_additive_mask_with_offsets_cannot_arrive_as_booleans():
    call = FloatCall(np.zeros((1, 1)), np.zeros((2, 1)), np.zeros((2, 1)), "float64",
                attn_mask=np.array([[0.5, 0.0]]))
    with pytest.raises(InputError, match=re.escape("mask_as must be 'additive' for an additive "
                                                   "mask with finite offsets (got 'bool_keep')")):
        call.mask_in("bool_keep")


def test_the_adapter_says_which_argument_a_function_lacks():
    call = make_call((Call([[1]], [[1]], [[1]])).with_policy(Policy(scale=1)), "float64")
    with pytest.raises(InputError, match=re.escape(
            "no_scale must take scale= for this call (got a function without it)")):
        FunctionImpl(lambda queries, keys, values, *, mask=None: values, convention="mask",
                     name="no_scale").answer(call)
    with pytest.raises(InputError, match=re.escape("convention must be one of sdpa, mask (got 'jax')")):
        FunctionImpl(numpy_attention, convention="jax")
    with pytest.raises(InputError, match=re.escape("convert must be None with arrays='torch'")):
        FunctionImpl(numpy_attention, arrays="torch", convert=np.asarray)


def test_the_returned_dtype_is_kept_and_sets_the_tolerance():
    call = make_call((Call([[1]], [[1]], [[1]])).with_policy(Policy()), "float64")
    answer = FunctionImpl(lambda query, key, value: value.astype(np.float16)).answer(call)
    assert (answer.values.dtype, answer.dtype) == (np.float64, "float16")
    typed_equal(tolerance_for("float64", "float32"), Tolerance(1e-5, 1e-6, "float32"))
    typed_equal(tolerance_for("bfloat16", "float64"), Tolerance(2e-2, 1e-2, "bfloat16"))
    typed_equal(tolerance_for("int64", "float64", rtol=0, atol=0.5),
                Tolerance(0.0, 0.5, "int64", True))
    assert tolerance_for("float32", rtol=1e-3).describe() == "rtol=0.001, atol=1e-06 from float32"


def test_hard_failures_are_one_rule_in_both_modes():
    tol = tolerance_for("float64")
    fmt = float_format("float32")
    for got in (math.nan, math.inf, -math.inf):
        assert hard(got, 0.5) is True and within(got, F(1, 2), 1, tol) is False
        assert judge(got, 0.5, None, 0.5, fmt, lambda: F(1, 2), 10 ** 6).status == "hard"
    assert hard(0.5, math.nan) is True and judge(0.5, math.nan, None, 0, fmt, None, 4).status == "hard"
    assert hard(math.inf, math.inf) is False and within(math.nan, math.nan, 1, tol) is True


# ---------------------------------------------------------------- docs/properties.md runs
DOC = Path(__file__).resolve().parents[2] / "docs" / "properties.md"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_the_documented_numpy_example_runs_and_prints_what_it_says(capsys):
    numpy_block, failure_block, _torch_block = _blocks("python")
    namespace: dict = {"__name__": "docs_properties_example"}
    exec(compile(numpy_block, str(DOC), "exec"), namespace)
    tests = [name for name in namespace if name.startswith("test_")]
    assert tests == ["test_my_attention", "test_my_additive_attention_in_float32",
                     "test_rows_sum_to_one"]
    for name in tests:
        namespace[name]()                      # each runs its @given examples
    exec(compile(failure_block, str(DOC), "exec"), namespace)
    assert capsys.readouterr().out == _blocks("text")[0]


def test_the_documented_torch_example_runs_when_torch_is_installed():
    pytest.importorskip("torch")
    namespace: dict = {"__name__": "docs_properties_torch"}
    exec(compile(_blocks("python")[2], str(DOC), "exec"), namespace)
    for name in ("test_sdpa_float64", "test_sdpa_float32"):
        # the example is what is checked here, not SDPA: 50 examples each keep it quick
        settings(max_examples=50)(namespace[name])()
