"""The modifiers of the call model (sinks, ALiBi, soft-capping, windows, dropout, LSE, RoPE)
against the hand-worked cases in tests/data/cases and exact identities."""

import json
from fractions import Fraction as F
from pathlib import Path

import pytest

from exactattn.call.policy import Policy
from exactattn.errors import FloatInputError, InputError
from exactattn.reference.logits import rope_score, softmax_row
from exactattn.call.modifiers import dropout_factors
from exactattn.numbers.lse import LogSumExp
from exactattn.call.modifiers import Alibi, Rope, alibi_slopes
from exactattn.numbers.reals import Surd
from exactattn.numbers.softmax import SoftmaxRow
from alibi_paper import paper_slopes

CASES = Path(__file__).parents[1] / "data" / "cases"


def case(name):
    return json.loads((CASES / f"{name}.json").read_text())


def row_of(raw, policy, i=0, n_q=1, offsets=None):
    n_k = len(raw)
    vis = policy.visible_keys(i, n_q, n_k)
    raw = [r if j in vis else None for j, r in enumerate(raw)]
    return softmax_row(raw, None, policy, i, n_q, n_k, offsets=offsets)


def test_sink_case():
    c = case("attention-sink")
    row = row_of([F(1), F(0)], Policy(scale=None, sink="0"))
    assert [s.text() for s in row.shares()] == ["exp(1)/(2 + exp(1))", "1/(2 + exp(1))"]
    assert [s.decimal(4) for s in row.shares()] == c["expected"]["shares_decimal"]
    assert row.sink_share() == row.share(1)
    out = row.combine([F(3), F(1)])
    assert out.decimal(6) == c["expected"]["output_decimal"]
    assert out.text() == "(1 + 3*exp(1))/(2 + exp(1))"
    assert not row.sum_is_one()
    # the faulty variants give other answers
    assert SoftmaxRow([F(1), F(0)], None).combine([F(3), F(1)]).decimal(6) == "2.462117"


def test_sink_counted_once_over_key_blocks():
    """Shares of a split row, rescaled to one normaliser, add up to the one-pass shares."""
    full = SoftmaxRow([F(1), F(0), F(2), F(-1)], None, sink=F(1, 2))
    total = sum((full.share(j) for j in range(4)), F(0)) + full.sink_share()
    assert total == 1 and isinstance(total.rational(), F)


def test_sink_with_irrational_divisor_and_all_keys_hidden():
    row = SoftmaxRow([F(1), F(0)], F(2), sink=F(0))
    assert row.sink_share().text() == "1/(2 + exp(1/sqrt(2)))"
    empty = SoftmaxRow([None, None], None, empty_row="nan", sink=F(0))
    assert not empty.nan and empty.sink_share() == 1 and empty.share(0) == 0
    assert empty.combine([F(5), F(7)]).rational() == 0


def test_alibi_slopes_six_heads_and_outputs():
    c = case("alibi-six-heads")
    slopes = alibi_slopes(6)
    assert [str(s) for s in slopes] == c["expected"]["slopes"]
    assert all(type(s) is F for s in slopes)
    outs = []
    for h in range(6):
        p = Policy(scale=None, alibi=Alibi(heads=6), head=h, query_offset=2)
        row = row_of([F(0)] * 3, p)
        outs.append(row.combine([F(1), F(2), F(4)]).decimal(6))
    assert outs == c["expected"]["output_decimal"]
    faulty = 2 ** (-8 / 6)            # the power-of-two rule applied to 6 heads
    assert abs(float(slopes[0]) - faulty) > 0.1


@pytest.mark.parametrize("heads", [12, 16, 24, 32])
def test_alibi_slopes_are_exact_algebraic(heads):
    slopes = alibi_slopes(heads)

    reference = paper_slopes     # the authors' float rule
    assert len(slopes) == heads
    for exact, f in zip(slopes, reference(heads)):
        assert abs(float(exact) - f) <= 1e-13 * f
    assert any(isinstance(s, Surd) for s in slopes)
    assert Alibi(heads=12).slope(8) == Surd(0, ((F(2), F(1)),))


def test_alibi_irrational_slope_keeps_ties_exact():
    p = Policy(scale=None, alibi=Alibi(heads=16, form="symmetric"), head=0, query_offset=1)
    row = row_of([F(0)] * 3, p)          # keys 0 and 2 are both at distance 1
    assert row.share(0) == row.share(2) and row.share(0) != row.share(1)
    assert row.share(0).rational() is None
    assert row.share(0).text() == "exp(-1/sqrt(2))/(2*exp(-1/sqrt(2)) + 1)"


def test_alibi_absolute_equals_relative_under_causal():
    rel = row_of([F(1), F(0), F(2)], Policy(scale=None, causal=True, alibi=Alibi(8)), i=2, n_q=3)
    ab = row_of([F(1), F(0), F(2)], Policy(scale=None, causal=True, alibi=Alibi(8, "absolute")),
                i=2, n_q=3)
    assert all(a == b for a, b in zip(rel.shares(), ab.shares()))


def test_softcap_before_mask():
    c = case("softcap-before-mask")
    p = Policy(scale=None, softcap="1")
    row = softmax_row([F(0), F(2), None], None, p, 0, 1, 3)
    assert [s.decimal(6) for s in row.shares()[:2]] == c["expected"]["shares_decimal"][:2]
    assert row.share(2) == 0 and row.share(2).rational() == 0
    assert row.certified
    tie = softmax_row([F(3), F(3)], None, p, 0, 1, 2)
    assert tie.share(0) == tie.share(1) and tie.share(0).rational() == F(1, 2)


def test_sliding_window_case():
    c = case("sliding-window")
    p = Policy(scale=None, causal=True, window=(2, 0))
    outs = [row_of([F(0)] * 5, p, i=i, n_q=5).combine([F(k) for k in range(1, 6)]).rational()
            for i in range(5)]
    assert [str(o) for o in outs] == c["expected"]["outputs"]
    assert [list(Policy(window=(1, 1)).visible_keys(i, 4, 4)) for i in range(4)] == \
        [[0, 1], [0, 1, 2], [1, 2, 3], [2, 3]]


def test_window_with_bottom_right_alignment():
    p = Policy(causal=True, alignment="bottom_right", window=(1, 0))
    assert [list(p.visible_keys(i, 2, 5)) for i in range(2)] == [[2, 3], [3, 4]]


def test_dropout_case():
    c = case("dropout-kept")
    f = dropout_factors(F(1, 3), [True, False, True])
    row = SoftmaxRow([F(0)] * 3, None)
    weights = [row.share(j) * 1 if False else row.share(j).rational() * f[j] for j in range(3)]
    assert [str(w) for w in weights] == c["expected"]["weights_after_dropout"]
    out = row.combine([F(3) * f[0], F(6) * f[1], F(9) * f[2]])
    assert out.rational() == F(c["expected"]["output"])
    with pytest.raises(InputError, match="keep-mask"):
        dropout_factors(F(1, 3), None)


def test_logsumexp_case():
    c = case("logsumexp")
    row = SoftmaxRow([F(1), F(2), F(3)], None)
    assert LogSumExp(row).decimal(10) == c["expected"]["lse_decimal"]
    assert LogSumExp(row, base=2).decimal(10) == c["expected"]["lse_base2_decimal"]
    assert LogSumExp(SoftmaxRow([None], None)).decimal(3) == "-inf"
    assert LogSumExp(SoftmaxRow([F(0), F(0)], None), base=2).exact() == 1
    one = LogSumExp(SoftmaxRow([F(5, 7)], None))
    assert one.exact() == F(5, 7) and one.decimal(3) == "0.714"


def test_policy_refuses_floats_and_bad_windows():
    with pytest.raises(FloatInputError, match="softcap must be exact"):
        Policy(softcap=30.0)
    with pytest.raises(InputError, match=r"window must be \[left, right\]"):
        Policy(window=(-1, 0))
    with pytest.raises(InputError, match="head must be from 0 to 5"):
        Policy(alibi=Alibi(6), head=6)


def test_rope_scores_depend_on_relative_position_only():
    q, k = [F(1), F(2), F(0), F(1)], [F(3), F(0), F(1), F(1)]
    r = Rope()
    a, b = rope_score(q, k, r, 5, 3), rope_score(q, k, r, 9, 7)
    assert (isinstance(a, Surd) and a.transcendental) and a == b
    assert rope_score(q, k, r, 4, 4) == sum(x * y for x, y in zip(q, k))
    assert rope_score(q, k, Rope(layout="interleaved"), 2, 0).decimal(6) != a.decimal(6)


@pytest.mark.parametrize("policy", [Policy(causal=True, window=(15, 0)), Policy(window=(2, 3)),
                                    Policy(causal=True, query_offset=5, window=(3, None))])
def test_derived_cost_of_a_window_counts_only_visible_pairs(policy):
    from exactattn.cost import CallShape, count_call, derive_call
    n, d = 24, 4
    pairs = policy.pairs(n, n)
    shape = CallShape((1, 1, n, d), (1, 1, n, d), (1, 1, n, d), policy)
    assert derive_call(shape) == {"scores": pairs * d, "mix": pairs * d, "total": 2 * pairs * d}
    assert count_call(shape).macs["total"] == 2 * pairs * d


def test_rope_tie_between_keys_at_equal_distances_is_exact():
    """A query between two equal keys at distances -1 and +1: cos is even, the scores tie."""
    q, k = [F(1), F(0)], [F(2), F(0)]
    left, right = rope_score(q, k, Rope(), 3, 2), rope_score(q, k, Rope(), 3, 4)
    assert left == right
    row = softmax_row([left, right], None, Policy(scale=None), 0, 1, 2)
    assert row.share(0).rational() == F(1, 2)


def test_rope_mirrored_keys_with_sines_tie_and_certify():
    """q = (1, 0) at position 1, keys (1, -1) at 0 and (1, 1) at 2: both scores are exactly
    cos 1 - sin 1 (the sine terms fold their signs), so the row certifies and ties."""
    q = [F(1), F(0)]
    left, right = rope_score(q, [F(1), F(-1)], Rope(), 1, 0), rope_score(q, [F(1), F(1)], Rope(), 1, 2)
    assert left == right and hash(left) == hash(right) and left.text() == "cos(1) - sin(1)"
    middle = rope_score(q, [F(-1), F(0)], Rope(), 1, 1)
    assert middle == -1 and type(middle) is F
    row = softmax_row([left, middle, right], None, Policy(scale=None), 0, 1, 3)
    assert [row.share(j).decimal(6) for j in range(3)] == ["0.400454", "0.199092", "0.400454"]
    assert row.share(0) == row.share(2) and row.largest() == [0, 2]


def test_rope_reduced_angles_tie_across_frequency_pairs():
    """d = 8, base 10000: pair 1 turns by 10000^(-1/4) = 1/10 per position, so a key 10 positions
    on along pair 1 scores cos(1), as a key 1 position on along pair 0 does."""
    e = [[F(int(i == k)) for i in range(8)] for k in range(8)]
    q = [F(1), F(1)] + [F(0)] * 6
    a, b = rope_score(q, e[0], Rope(), 0, 1), rope_score(q, e[1], Rope(), 0, 10)
    assert a == b and a.text() == "cos(1)" and hash(a) == hash(b)
    row = softmax_row([a, b], None, Policy(scale=None), 0, 1, 11)
    assert row.share(0).rational() == F(1, 2)


def test_softcap_alibi_and_offsets_tie_exactly():
    """soft-cap 5 + ALiBi (8 heads, head 0, query at position 2): key 0 (bias -1) and key 1
    (bias -1/2, offset -1/2) both have the logit 5 tanh(1/5) - 1."""
    policy = Policy(scale=None, softcap=F(5), alibi=Alibi(8), query_offset=2)
    row = softmax_row([F(1), F(1), F(0)], None, policy, 0, 1, 3, offsets=[F(0), F(-1, 2), F(0)])
    s = row.shares()
    assert s[0] == s[1] and hash(s[0]) == hash(s[1]) and not s[0] < s[1]
    assert [x.decimal(6) for x in s] == ["0.331872", "0.331872", "0.336256"]
    assert row.largest() == [2] and row.certified
    # a row of only the tied keys is exactly uniform: rational shares, exact outputs
    tied = softmax_row([F(1), F(1)], None, policy, 0, 1, 2, offsets=[F(1, 2), F(0)])
    assert tied.share(0).rational() == F(1, 2)
    assert tied.combine([F(1), 1 + F(1, 2 ** 23)]).rational() == 1 + F(1, 2 ** 24)


def test_equal_log_sum_exps_compare_equal():
    """The same row twice, and log(1 + e) reached through a key and through a sink."""
    one = LogSumExp(SoftmaxRow([F(1), F(0)], None))
    assert one == LogSumExp(SoftmaxRow([F(1), F(0)], None))
    via_sink = LogSumExp(SoftmaxRow([F(1)], None, sink=F(0)))
    assert one == via_sink and hash(one) == hash(via_sink) and not one < via_sink
    bigger = LogSumExp(SoftmaxRow([F(2), F(0)], None))
    assert one < bigger and bigger > via_sink and one <= via_sink and bigger >= one
    assert LogSumExp(SoftmaxRow([None], None)) < one        # -inf below every number
    assert LogSumExp(one.row, base=2) == LogSumExp(via_sink.row, base=2)
    assert LogSumExp(one.row, base=2) > one                  # log2(x) > ln(x) for x > 1
    assert len({one, via_sink, bigger}) == 2


def test_equal_log_sum_exps_in_two_bases_hash_alike():
    """log2(1 + 1) = 1 = ln(e): a base-2 and a natural-log lse of equal value are == and hash alike;
    so are log2(4 e^0) and ln(e^2)."""
    two = LogSumExp(SoftmaxRow([F(0), F(0)], None), base=2)
    e = LogSumExp(SoftmaxRow([F(1)], None))
    assert two == e == 1 and hash(two) == hash(e) == hash(1)
    a = LogSumExp(SoftmaxRow([F(0), F(1)], None), base=2)
    b = LogSumExp(SoftmaxRow([F(0), F(1)], None), base=2)
    assert a == b and hash(a) == hash(b) and a > LogSumExp(a.row)


def test_the_largest_key_is_named_alike_when_the_sink_dominates():
    """A sink whose logit tops the row is not a key: the exact row and the certified
    (soft-capped) row both name the largest key."""
    exact = SoftmaxRow([F(1), F(0), F(1)], None, sink=F(5))
    capped = softmax_row([F(1), F(0), F(1)], None, Policy(scale=None, softcap=F(5), sink=F(5)),
                         0, 1, 3)
    assert exact.largest() == capped.largest() == [0, 2]
    assert SoftmaxRow([None, None], None, sink=F(0)).largest() == []
