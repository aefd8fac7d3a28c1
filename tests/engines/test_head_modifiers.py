"""Heads, layers and traces under the modifiers of the call model, against the handed cases.

Each case of tests/data/cases is posed as a head: n tokens x = I (one-hot), W_K = I, so
query i's raw score against key j is W_Q[j][i] (the case's scores) and value j is column j
of W_V.  Engines pencil, fast and auto must agree; the fast engine refuses what it cannot
run exactly; the symbolic engine refuses every modifier.
"""

import json
from fractions import Fraction as F
from pathlib import Path

import pytest

from exactattn.call.policy import Policy
from exactattn.errors import InputError, ShapeError
from exactattn.engines.head import Head, attend
from exactattn.engines.layer import Layer, attend_layer
from exactattn.numbers.lse import LogSumExp
from exactattn.call.modifiers import Alibi, Rope
from exactattn.numbers.ratio import ExpRatio
from exactattn.numbers.reals import Surd
from exactattn.numbers.softmax import SoftmaxRow

CASES = Path(__file__).parents[1] / "data" / "cases"


def case(name):
    return json.loads((CASES / f"{name}.json").read_text())


def posed(scores, values, **policy):
    """A head whose raw scores are ``scores`` (rows of n; missing rows are 0) over n tokens."""
    n = len(scores[0])
    rows = [list(map(F, r)) for r in scores] + [[F(0)] * n] * (n - len(scores))
    W_Q = [[rows[i][j] for i in range(n)] for j in range(n)]        # W_Q[j][i] = S[i][j]
    eye = [[int(r == c) for c in range(n)] for r in range(n)]
    W_V = [[F(v[c]) if isinstance(v, list) else F(v) for v in values]
           for c in range(len(values[0]) if isinstance(values[0], list) else 1)]
    head = Head(W_Q, eye, W_V, divisor=None)
    return head.with_policy(head.policy.replace(**policy)), eye


def test_posing_gives_the_case_scores():
    head, x = posed([["1", "0", "2"]], ["3", "1", "5"])
    t = attend(head, x)
    assert t.raw_scores[0] == [F(1), F(0), F(2)] and t.values == [[F(3)], [F(1)], [F(5)]]


def engines(head, x, **kw):
    out = {e: attend(head, x, engine=e, **kw) for e in ("pencil", "fast", "auto")}
    for places in (4, 6):
        assert out["pencil"].share_decimals(places) == out["fast"].share_decimals(places) == \
            out["auto"].share_decimals(places)
        assert out["pencil"].output_decimals(places) == out["fast"].output_decimals(places)
    return out["pencil"]


def test_attention_sink_case():
    c = case("attention-sink")
    head, x = posed(c["input"]["scores"], c["input"]["V"], sink=F(0))
    t = engines(head, x)
    assert [t.share(0, j).text() for j in range(2)] == ["exp(1)/(2 + exp(1))", "1/(2 + exp(1))"]
    assert t.share_decimals(4)[0] == c["expected"]["shares_decimal"]
    assert t.sink_share(0).text() == "1/(2 + exp(1))" and t.sink_share(0) == t.share(0, 1)
    out = t.output(0, 0)
    assert isinstance(out, ExpRatio) and out.text() == "(1 + 3*exp(1))/(2 + exp(1))"
    assert t.output_decimals(6)[0] == [c["expected"]["output_decimal"]]
    assert t.dropped_sum(0) + t.sink_share(0) == 1 and not t.row_sums_to_one(0)
    assert t.macs == {"projections": 20, "scores": 8, "mix": 4}
    # the faulty variant (sink ignored) is another number
    plain = attend(posed(c["input"]["scores"], c["input"]["V"])[0], x)
    assert plain.output(0, 0).decimal(6) == "2.462117" != t.output(0, 0).decimal(6)


def test_sink_with_every_key_hidden_takes_the_whole_row():
    head, x = posed([["1", "0"]], ["3", "1"], sink=F(0), causal=True, query_offset=-1)
    t = attend(head.with_policy(head.policy.replace(empty_row="nan")), x)
    assert t.sink_share(0) == 1 and t.share(0, 0) == 0 and t.output(0, 0).rational() == 0
    assert t.lse(0).decimal(4) == "0.0000" and t.lse(0).exact() == 0


def test_alibi_six_heads_case_as_heads_and_as_a_layer():
    c = case("alibi-six-heads")
    want = c["expected"]["output_decimal"]
    got = []
    for h in range(6):
        head, x = posed([["0", "0", "0"]], c["input"]["V"], alibi=Alibi(6), head=h,
                        query_offset=2)
        t = engines(head, x)
        got.append(t.output_decimals(6)[0][0])
        assert t.alibi_bias(0, 0) == -2 * F(c["expected"]["slopes"][h])
        assert type(t.alibi_bias(0, 0)) is F
    assert got == want
    eye = [[int(r == c) for c in range(3)] for r in range(3)]
    layer = Layer([[[0] * 3] * 3] * 6, [eye] * 6, [[[1, 2, 4]]] * 6, [[0] * 6] * 3,
                  policy=Policy(scale=None, alibi=Alibi(6), query_offset=2))
    run = attend_layer(layer, eye)
    assert [run.head_outputs[a][0][0].decimal(6) for a in range(6)] == want
    assert [h.policy.head for h in layer.heads] == list(range(6))


def test_alibi_twelve_heads_slope_is_exact_algebraic():
    head, x = posed([["0", "0", "0"]], ["1", "2", "4"], alibi=Alibi(12), head=8, query_offset=2)
    t = engines(head, x)
    bias = t.alibi_bias(0, 1)
    assert isinstance(bias, Surd) and bias.text() == "-1/sqrt(2)"
    assert t.logit_row(0) == [-2 * Surd(0, ((F(2), F(1)),)), bias, 0]
    assert t.share(0, 2).rational() is None and t.share(0, 0) < t.share(0, 1)


def test_layer_sinks_per_head_and_alibi_head_count_checked():
    eye = [[1, 0], [0, 1]]
    layer = Layer([eye, eye], [eye, eye], [[[3, 1]], [[3, 1]]], [[0, 0], [0, 0]],
                  policy=Policy(scale=None), sinks=["0", "-1"])
    run = attend_layer(layer, eye)
    assert run.head_rows[0][0].sink_share() != run.head_rows[1][0].sink_share()
    assert [h.policy.sink for h in layer.heads] == [F(0), F(-1)]
    with pytest.raises(ShapeError, match="sinks must hold one sink logit per query head, 2"):
        Layer([eye, eye], [eye], [eye], [[0] * 4] * 2, sinks=["0"])
    with pytest.raises(InputError, match="head must be from 0 to 0 for ALiBi with 1 heads"):
        Layer([eye, eye], [eye], [eye], [[0] * 4] * 2, policy=Policy(alibi=Alibi(1)))


def test_softcap_before_mask_case():
    c = case("softcap-before-mask")
    # the bool mask [T, T, F] as a window: query 0 sees keys 0 .. 0 + 1
    head, x = posed(c["input"]["scores"], ["1", "2", "3"], softcap=F(1), window=(None, 1))
    t = engines(head, x)
    assert t.share_decimals(6)[0] == c["expected"]["shares_decimal"][:2] + ["0.000000"]
    assert t.share(0, 2) == 0 and t.share(0, 2).rational() == F(0)
    capped = t.logit_row(0, "capped")
    assert (isinstance(capped[1], Surd) and capped[1].transcendental) and capped[1].text() == "tanh(2)" and capped[2] is None
    assert t.row(0).certified and t.lse(0).decimal(6) == "1.287092"
    # equal raw scores: exactly equal shares (tanh is injective), rational 1/2
    tie = attend(posed([["3", "3"]], ["1", "2"], softcap=F(1))[0], [[1, 0], [0, 1]])
    assert tie.share(0, 0) == tie.share(0, 1) and tie.share(0, 0).rational() == F(1, 2)


def test_sliding_window_case_every_engine_exact():
    c = case("sliding-window")
    head, x = posed([["0"] * 5] * 5, ["1", "2", "3", "4", "5"], causal=True, window=(2, 0))
    t = engines(head, x)
    outs = [t.output(i, 0).rational() for i in range(5)]
    assert [str(o) for o in outs] == c["expected"]["outputs"] and all(type(o) is F for o in outs)
    faulty = attend(head.with_policy(head.policy.replace(window=(3, 0))), x)
    assert [str(faulty.output(i, 0).rational()) for i in range(5)] == \
        c["faulty"]["window of w keys before the query plus itself"]


def test_dropout_case_weights_and_outputs():
    c = case("dropout-kept")
    keep = [[True, False, True], [True, True, True], [True, True, True]]
    head, x = posed([["0", "0", "0"]], c["input"]["V"], dropout=F(1, 3))
    for engine in ("auto", "pencil"):
        t = attend(head, x, dropout_keep=keep, engine=engine)
        assert t.engine == "pencil"
        weights = [t.dropped_share(0, j).rational() for j in range(3)]
        assert [str(w) for w in weights] == c["expected"]["weights_after_dropout"]
        assert t.output(0, 0).rational() == F(c["expected"]["output"])
        assert t.share(0, 1).rational() == F(1, 3)        # the share before dropout
        assert t.dropped_sum(0).rational() == 1 and t.dropped_sum(1).rational() == F(3, 2)
        assert t.dropped_decimals(2)[0] == ["0.50", "0.00", "0.50"]
        assert t.macs["mix"] == 8
    with pytest.raises(InputError, match=r"^engine must be 'pencil' or 'auto' for dropout"):
        attend(head, x, dropout_keep=keep, engine="fast")
    with pytest.raises(InputError, match=r"^dropout_keep must be a keep-mask of 3 x 3 for dropout"):
        attend(head, x)
    with pytest.raises(ShapeError, match=r"^dropout_keep must be 3 x 3"):
        attend(head, x, dropout_keep=[[True]])
    with pytest.raises(InputError, match=r"^dropout_keep must come with dropout"):
        attend(posed([["0", "0", "0"]], c["input"]["V"])[0], x, dropout_keep=keep)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'keep'"):   # keep: visibility only
        attend(head, x, keep=keep)


def test_logsumexp_case():
    c = case("logsumexp")
    head, x = posed(c["input"]["scores"], ["1", "1", "1"])
    t = engines(head, x)
    lse = t.lse(0)
    assert isinstance(lse, LogSumExp) and lse.text() == "log(exp(1) + exp(2) + exp(3))"
    assert lse.decimal(10) == c["expected"]["lse_decimal"]
    assert t.lse(0, base="2").decimal(10) == c["expected"]["lse_base2_decimal"]
    masked, _ = posed(c["input"]["scores"], ["1", "1", "1"], causal=True, query_offset=-1)
    assert attend(masked, x).lse(0).decimal(4) == "-inf"


def test_rope_head_pencil_only_and_relative():
    head = Head([[1, 2], [0, 1]], [[1, 0], [1, 1]], [[1, 0], [0, 1]], divisor=None)
    roped = head.with_policy(head.policy.replace(rope=Rope(theta=F(100))))
    x = [[1, 0], [0, 1], [1, 1]]
    t = attend(roped, x)
    assert t.engine == "pencil" and t.macs["rotation"] == 2 * 2 * 9
    assert t.rotated_score(1, 1) == t.raw_scores[1][1] and type(t.rotated_score(1, 1)) is F
    assert isinstance(t.rotated_score(1, 0), Surd) and t.rotated_score(1, 0).transcendental
    # the queries moved 5 positions on: query 0 is no longer at key 0's position
    shifted = attend(roped.with_policy(roped.policy.replace(query_offset=5)), x)
    assert isinstance(shifted.rotated_score(0, 0), Surd) and shifted.rotated_score(0, 0).transcendental
    assert t.rotated_score(0, 0) == t.raw_scores[0][0] and type(t.rotated_score(0, 0)) is F
    with pytest.raises(InputError, match=r"^engine must be 'pencil' or 'auto' for rope"):
        attend(roped, x, engine="fast")
    assert t.share_decimals(6) == [[t.share(i, j).decimal(6) for j in range(3)] for i in range(3)]


def test_modified_heads_refuse_symbols():
    import sympy
    head, x = posed([["1", "0"]], ["3", "1"], sink=F(0))
    with pytest.raises(InputError, match=r"^a head with modifiers \(sink\) must run on the "):
        attend(head, x, engine="symbolic")
    with pytest.raises(InputError, match="got symbolic entries"):
        attend(head, [[sympy.Symbol("a"), 0], [0, 1]])


def test_plain_policy_fields_keep_the_plain_path():
    """A window or query offset is no score modifier: the bulk path and the row cache stay."""
    head, x = posed([["1", "0", "2"], ["0", "1", "0"]], ["3", "1", "5"], window=(1, 0))
    t = attend(head, x)
    assert not t.policy.modified and isinstance(t.row(0), SoftmaxRow)
    assert t.share_decimals(4) == attend(head, x, engine="fast").share_decimals(4)
    assert t.dropped_share(1, 1) == t.share(1, 1) and t.dropped_decimals(4) == t.share_decimals(4)
    assert t.alibi_bias(0, 0) is None and t.sink_share(0) == 0
