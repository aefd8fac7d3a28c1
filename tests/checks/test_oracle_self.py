"""The oracle (tests/oracle.py) against values checkable by hand or by plain mpmath.

Nothing here imports exactattn: the oracle must stand on its own.
"""

import itertools
from fractions import Fraction as F

import mpmath
import pytest

from oracle import Oracle, UNDECIDED, alibi_exponents


def one(q, k, v, **policy):
    """A case with one batch and one head: q, k, v are L x E, S x E, S x Ev lists."""
    def text(rows):
        return [[str(x) for x in row] for row in rows]
    case = {"query": [[text(q)]], "key": [[text(k)]], "value": [[text(v)]]}
    case.update(policy)
    return Oracle(case)


def row(o, name, i, places, n):
    return [o.decimal(name, (0, 0, i, j), places) for j in range(n)]


# ---------------------------------------------------------------- the worked example (chronicle)

X = [[0, 1, 0, F(1, 2)], [1, 0, 0, 0], [0, 0, 1, 1], [1, 0, 0, 0]]
W_Q = [[0, 0, 2, 0], [3, 0, 0, 0], [F(1, 2), 0, 0, 0], [0, F(1, 2), 0, 0]]
W_K = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, F(1, 2)], [0, 0, 0, 1]]
W_V = [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [F(1, 2), 0, 0, 1]]


def slots(W):
    """q = W x for every token (slots layout)."""
    return [[sum(W[r][c] * x[c] for c in range(4)) for r in range(4)] for x in X]


def chronicle(**policy):
    return one(slots(W_Q), slots(W_K), slots(W_V), scale={"divisor_squared": "4"}, **policy)


def test_the_worked_example_has_the_projections_of_the_spec():
    assert slots(W_Q)[1] == [0, 3, F(1, 2), 0] and slots(W_K)[0] == [0, 1, F(1, 4), F(1, 2)]


def test_the_worked_example_share_row_of_token_2_is_the_readme_row():
    assert row(chronicle(), "shares", 1, 4, 4) == ["0.5800", "0.1216", "0.1769", "0.1216"]


def test_the_worked_example_scores_and_logits_of_token_2():
    assert row(chronicle(), "scores", 1, 4, 4) == ["3.1250", "0.0000", "0.7500", "0.0000"]
    assert row(chronicle(), "logits", 1, 4, 4) == ["1.5625", "0.0000", "0.3750", "0.0000"]
    assert row(chronicle(causal=True), "logits", 1, 4, 4) == ["1.5625", "0.0000", "-inf", "-inf"]


def test_the_worked_example_backward_ds_row_is_the_docs_row():
    o = chronicle(d_out=[[[["0", "0", "0", "1"]] * 4]])
    assert row(o, "dS", 1, 4, 4) == ["-0.0513", "-0.0108", "0.0728", "-0.0108"]


# ---------------------------------------------------------------- modifiers

def test_a_sink_and_alibi_16_heads_give_the_issue_shares():
    # logits of query 0: 1/sqrt(3) (key 0), 0 + 2^(-1/2) (key 1, ALiBi slope of model head 0), sink 1/2
    o = one([[1], [0]], [[1], [0]], [[1], [0]], scale={"divisor_squared": "3"}, sink="1/2",
            alibi={"heads": 16, "form": "relative"})
    assert row(o, "shares", 0, 6, 2) == ["0.326358", "0.371576"]
    assert o.decimal("sink_share", (0, 0, 0), 6) == "0.302066"


def test_the_sink_and_alibi_shares_agree_with_plain_mpmath():
    mpmath.mp.prec = 200
    e = [mpmath.exp(1 / mpmath.sqrt(3)), mpmath.exp(2 ** mpmath.mpf(-0.5)), mpmath.exp(0.5)]
    o = one([[1], [0]], [[1], [0]], [[1], [0]], scale={"divisor_squared": "3"}, sink="1/2",
            alibi={"heads": 16, "form": "relative"})
    got = row(o, "shares", 0, 20, 2) + [o.decimal("sink_share", (0, 0, 0), 20)]
    assert all(abs(mpmath.mpf(g) - x / sum(e)) <= mpmath.mpf(10) ** -20 / 2 for g, x in zip(got, e))


def test_six_alibi_heads_have_the_press_slopes():
    assert [F(1, 2) ** e for e in alibi_exponents(6)] == [F(1, 4), F(1, 16), F(1, 64), F(1, 256),
                                                          F(1, 2), F(1, 8)]


def test_rope_mirrored_keys_give_the_issue_shares():
    # q = (1, 0) at position 1; keys (1,-1) at 0, (-1,0) at 1, (1,1) at 2; no scale:
    # scores cos 1 - sin 1, -1, cos 1 - sin 1 (the rotation depends on j - i only)
    o = one([[1, 0]], [[1, -1], [-1, 0], [1, 1]], [[1], [0], [0]], scale="none",
            query_offset=1, rope={"theta": "10000", "layout": "half"})
    assert row(o, "shares", 0, 6, 3) == ["0.400454", "0.199092", "0.400454"]


def test_softcap_is_cap_tanh_of_the_scaled_score():
    # one query 0 sees keys with scaled scores 2 and 0; cap 1: logits tanh(2), 0
    o = one([[1]], [[2], [0]], [[1], [0]], scale="none", softcap="1")
    mpmath.mp.prec = 100
    t = mpmath.exp(mpmath.tanh(2))
    assert o.decimal("shares", (0, 0, 0, 0), 6) == mpmath.nstr(t / (t + 1), 6)


def test_plain_two_keys_without_scale():
    o = one([[1, 0]], [[1, 0], [0, 1]], [[1], [0]], scale="none")
    assert o.decimal("shares", (0, 0, 0, 1), 4) == "0.2689"
    assert o.decimal("outputs", (0, 0, 0, 0), 4) == "0.7311"
    assert o.decimal("lse", (0, 0, 0), 4) == "1.3133"


def test_windows_and_causal_rows_hide_keys_exactly():
    o = one([[0]] * 3, [[0]] * 3, [[1], [2], [4]], scale="none", causal=True, window=[1, 0])
    assert row(o, "shares", 2, 4, 3) == ["0.0000", "0.5000", "0.5000"]
    assert o.decimal("outputs", (0, 0, 2, 0), 4) == "3.0000"


def test_empty_rows_under_each_rule():
    mask = {"kind": "bool_keep", "rows": [[[[False, False], [True, False]]]]}
    base = dict(scale="none", mask=mask)
    zero = one([[0], [0]], [[0], [0]], [[1], [3]], **base)
    assert row(zero, "shares", 0, 4, 2) == ["0.0000", "0.0000"]
    assert zero.decimal("outputs", (0, 0, 0, 0), 4) == "0.0000" and zero.decimal("lse", (0, 0, 0), 4) == "-inf"
    uniform = one([[0], [0]], [[0], [0]], [[1], [3]], empty_row="uniform", **base)
    assert uniform.decimal("outputs", (0, 0, 0, 0), 4) == "2.0000"
    nan = one([[0], [0]], [[0], [0]], [[1], [3]], empty_row="nan", **base)
    assert nan.decimal("shares", (0, 0, 0, 1), 4) == "nan" and nan.decimal("outputs", (0, 0, 1, 0), 4) == "1.0000"


def test_a_sink_takes_the_whole_share_of_a_row_with_no_key():
    mask = {"kind": "bool_drop", "rows": [[[[True, True]]]]}
    o = one([[0]], [[0], [0]], [[1], [3]], scale="none", sink="1/2", mask=mask)
    assert o.decimal("sink_share", (0, 0, 0), 4) == "1.0000" and o.decimal("outputs", (0, 0, 0, 0), 4) == "0.0000"
    assert o.decimal("lse", (0, 0, 0), 4) == "0.5000"


def test_additive_mask_offsets_and_hidden_entries():
    mask = {"kind": "additive", "rows": [[[["1", None, "0"]]]]}
    o = one([[0]], [[0], [0], [0]], [[1], [5], [0]], scale="none", mask=mask)
    assert row(o, "shares", 0, 4, 3) == ["0.7311", "0.0000", "0.2689"]


def test_gqa_interleave_and_tile_read_different_kv_heads():
    q = [[[["0"]]] * 4]                                   # 4 query heads, 1 query, E = 1
    k = [[[["0"]]] * 2]                                   # 2 kv heads, 1 key
    case = {"query": q, "key": k, "value": [[[["1"]], [["2"]]]]}      # kv head 0 holds 1, head 1 holds 2
    inter = Oracle(dict(case, gqa="interleave"))
    tile = Oracle(dict(case, gqa="tile"))
    assert [inter.decimal("outputs", (0, h, 0, 0), 1) for h in range(4)] == ["1.0", "1.0", "2.0", "2.0"]
    assert [tile.decimal("outputs", (0, h, 0, 0), 1) for h in range(4)] == ["1.0", "2.0", "1.0", "2.0"]


# ---------------------------------------------------------------- backward

def backward_case(**policy):
    return one([[0], [1]], [[0], [1]], [[1], [3]], scale="none", d_out=[[[["1"], ["1"]]]], **policy)


def test_the_small_backward_pass_of_the_docs():
    o = backward_case()
    assert o.decimal("dQ", (0, 0, 0, 0), 4) == "0.5000"           # exactly 1/2
    assert [o.decimal("dV", (0, 0, j, 0), 4) for j in range(2)] == ["0.7689", "1.2311"]
    assert [o.decimal("dK", (0, 0, j, 0), 4) for j in range(2)] == ["-0.3932", "0.3932"]
    assert [o.decimal("D", (0, 0, i), 4) for i in range(2)] == ["2.0000", "2.4621"]


def test_the_sink_gradient_of_the_docs():
    assert backward_case(sink="0").decimal("d_sink", (0, 0), 4) == "-0.8557"


def test_the_dropout_gradients_of_the_docs():
    o = one([[1], [2]], [[1], [0]], [[1], [3]], scale="none", d_out=[[[["2"], ["1"]]]],
            dropout={"p": "1/2", "keep": [[[[True, True], [False, True]]]]})
    assert row(o, "dP", 1, 4, 2) == ["0.0000", "6.0000"]
    assert [o.decimal("dV", (0, 0, j, 0), 4) for j in range(2)] == ["2.9242", "1.3142"]


def test_gqa_gradients_of_a_kv_head_add_over_its_query_heads():
    q, k, v, d = [["0"], ["1"]], [["0"], ["1"]], [["1"], ["3"]], [["1"], ["1"]]
    two = Oracle({"query": [[q, q]], "key": [[k]], "value": [[v]], "d_out": [[d, d]], "scale": "none"})
    assert [two.decimal("dV", (0, 0, j, 0), 4) for j in range(2)] == ["1.5379", "2.4621"]
    assert two.decimal("dK", (0, 0, 1, 0), 4) == "0.7864"


def _loss(q, k, v, d_out, d_lse, cap=None, theta=None):
    """sum dO . O + sum dlse lse of one head, in mpmath at the working precision: what the
    oracle's gradients differentiate (soft-cap, then RoPE of d = 2 at positions 0, 1, ...)."""
    import mpmath

    def turn(x, p):
        if theta is None:
            return x
        c, s = mpmath.cos(p), mpmath.sin(p)       # d = 2: one pair, frequency 1
        return [x[0] * c - x[1] * s, x[0] * s + x[1] * c]
    total = 0
    for i, qi in enumerate(q):
        logits = [sum(a * b for a, b in zip(turn(qi, i), turn(kj, j))) for j, kj in enumerate(k)]
        logits = [cap * mpmath.tanh(x / cap) if cap else x for x in logits]
        z = sum(mpmath.exp(x) for x in logits)
        out = [sum(mpmath.exp(x) / z * vj[c] for x, vj in zip(logits, v)) for c in range(len(v[0]))]
        total += sum(a * b for a, b in zip(d_out[i], out)) + d_lse[i] * mpmath.log(z)
    return total


@pytest.mark.parametrize("policy", [dict(softcap="2"), dict(rope={"theta": "10000"}),
                                    dict(softcap="3", rope={"theta": "10000",
                                                            "layout": "interleaved"})])
def test_softcap_rope_and_lse_gradients_are_derivatives_of_the_forward(policy):
    """The oracle's dQ and dK under a soft-cap, RoPE and an LSE output equal mpmath's numerical
    derivative of sum dO . O + sum dlse lse (no exactattn, no intervals: a third way)."""
    import mpmath
    q, k, v = [[1, 2], [-1, 1]], [[1, 0], [2, -1], [0, 1]], [[1], [2], [-1]]
    d_out, d_lse = [[1], [3]], [1, -2]
    o = one(q, k, v, scale="none", d_out=[[[[str(x) for x in r] for r in d_out]]],
            d_lse=[[[str(x) for x in d_lse]]], **policy)
    cap = mpmath.mpf(policy["softcap"]) if "softcap" in policy else None
    theta = policy.get("rope")
    assert theta is None or theta.get("layout", "half") in ("half", "interleaved")   # d = 2
    with mpmath.workdps(40):
        for name, rows in (("dQ", q), ("dK", k)):
            for i in range(len(rows)):
                for e in range(2):
                    def f(x, name=name, i=i, e=e):
                        qq, kk = [list(map(mpmath.mpf, r)) for r in q], \
                            [list(map(mpmath.mpf, r)) for r in k]
                        (qq if name == "dQ" else kk)[i][e] = x
                        return _loss(qq, kk, v, d_out, d_lse, cap, theta)
                    want = mpmath.nstr(mpmath.diff(f, rows[i][e]), 15, min_fixed=-1,
                                       max_fixed=1)
                    got = o.decimal(name, (0, 0, i, e), 10)
                    assert abs(float(got) - float(want)) < 1e-9, (name, i, e, got, want)


# ---------------------------------------------------------------- rounding and undecided values

def test_an_exact_tie_from_intervals_is_undecided():
    o = one([[0]], [[0]] * 8, [[1]] * 8, scale="none")       # eight equal scores: 1/8 each
    assert o.decimal("shares", (0, 0, 0, 3), 2) is UNDECIDED and o.undecided == 1
    assert o.decimal("shares", (0, 0, 0, 3), 3) == "0.125"


def test_a_value_that_rounds_to_zero_has_no_minus_sign():
    o = one([[1]], [[0], [-40]], [[0], [-1]], scale="none")     # output -exp(-40)/(1 + exp(-40))
    assert o.decimal("outputs", (0, 0, 0, 0), 4) == "0.0000"
    assert o.float("outputs", (0, 0, 0, 0), "float64") < 0


def test_floats_of_exact_values():
    # one visible key: share exactly 1, output exactly the value
    o = one([[0]], [[0]], [["2049/2048"]], scale="none")
    assert o.float("shares", (0, 0, 0, 0), "float16") == 1.0
    assert o.float("outputs", (0, 0, 0, 0), "float16") == 1.0       # a tie, to even
    assert o.float("outputs", (0, 0, 0, 0), "float32") == 1.00048828125
    big = one([[0]], [[0]], [["65520"]], scale="none")
    assert big.float("outputs", (0, 0, 0, 0), "float16") == float("inf")
    assert big.float("outputs", (0, 0, 0, 0), "bfloat16") == 65536.0
    assert big.float("outputs", (0, 0, 0, 0), "float32") == 65520.0


def test_floats_of_a_transcendental_share_differ_by_format():
    o = one([[1, 0]], [[1, 0], [0, 1]], [[1], [0]], scale="none")
    mpmath.mp.prec = 300
    exact = 1 / (1 + mpmath.e)
    with mpmath.workprec(11):
        half = float(+exact)
    with mpmath.workprec(24):
        single = float(+exact)
    assert o.float("shares", (0, 0, 0, 1), "float16") == half == 0.26904296875
    assert o.float("shares", (0, 0, 0, 1), "float32") == single != half
    assert o.float("shares", (0, 0, 0, 1), "float64") == float(exact)


def test_names_and_shapes():
    o = backward_case(sink="0")
    assert o.names() == ["scores", "logits", "shares", "sink_share", "outputs", "lse", "dP", "D",
                         "dS", "dQ", "dK", "dV", "d_sink"]
    assert o.shape("dK") == (1, 1, 2, 1) and o.shape("d_sink") == (1, 1)
    assert all(o.decimal(n, ix, 2) is not None
               for n in o.names() for ix in itertools.product(*map(range, o.shape(n))))


def test_a_malformed_case_is_a_value_error():
    with pytest.raises(ValueError):
        Oracle({"query": [[[["0.1.2"]]]], "key": [[[["0"]]]], "value": [[[["0"]]]]})
    with pytest.raises(ValueError):
        Oracle({"query": [[[["1"]]]], "key": [[[["0", "1"]]]], "value": [[[["0"]]]]})
