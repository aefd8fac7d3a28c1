"""Heads with biases (every engine), and exact attention layers (W_O, GQA, padding)."""

from fractions import Fraction as F

import numpy as np
import pytest

from exactattn import Head, attend
from exactattn.call.policy import Mask, Policy
from exactattn.errors import ShapeError
from exactattn.examples import chronicle
from exactattn.engines.layer import Layer, LayerValue, attend_layer, padding_mask
from exactattn.numbers.softmax import ExpRatio

X = [[1, 0, F(1, 2)], [0, 2, -1], [1, 1, 1], [F(-1, 4), 0, 3]]
W_Q = [[1, 0, 2], [0, 1, F(1, 3)]]
W_K = [[1, 2, 0], [0, 1, -1]]
W_V = [[1, 0, 0], [F(1, 2), 1, 1]]


def test_bias_engines_agree_in_both_layouts():
    b = dict(b_Q=[1, F(1, 2)], b_K=[3, -1], b_V=[F(1, 3), -1])
    slots = Head(W_Q, W_K, W_V, **b)
    rows = Head(*(np.array(m, dtype=object).T.tolist() for m in (W_Q, W_K, W_V)),
                layout="rows", **b)
    traces = [attend(h, X, engine=e) for h in (slots, rows) for e in ("pencil", "fast")]
    sym = attend(slots, X, engine="symbolic")
    for t in traces:
        assert t.queries == traces[0].queries and type(t.queries[0][0]) is F
        assert t.raw_scores == traces[0].raw_scores
        assert t.output_decimals(12) == sym.output_decimals(12)
        assert t.share_decimals(12) == sym.share_decimals(12)
    assert traces[0].queries[0] == [F(3), F(1, 2) + F(1, 6)]
    assert [[F(str(e)) for e in r] for r in sym.queries] == traces[0].queries


def test_bias_additions_are_counted_apart_from_macs():
    plain = attend(Head(W_Q, W_K, W_V), X, engine="pencil")
    biased = attend(Head(W_Q, W_K, W_V, b_Q=[1, 1], b_V=[0, 2]), X, engine="pencil")
    assert biased.macs == plain.macs
    assert (plain.bias_adds, biased.bias_adds) == (0, 4 * 2 + 4 * 2)
    assert attend(Head(W_Q, W_K, W_V, b_K=[1, 1]), X, engine="symbolic").bias_adds == 8


def test_key_bias_cancels_from_the_shares():
    plain = attend(Head(W_Q, W_K, W_V), X)
    b_K = [F(7, 3), -5]
    biased = attend(Head(W_Q, W_K, W_V, b_K=b_K), X)
    for i in range(4):
        shift = sum(q * b for q, b in zip(plain.queries[i], b_K))
        assert biased.raw_scores[i] == [s + shift for s in plain.raw_scores[i]]
        for j in range(4):
            a, b = biased.share(i, j), plain.share(i, j)
            assert type(a) is ExpRatio and a == b
    assert biased.share_decimals(20) == plain.share_decimals(20)
    assert biased.output_decimals(20) == plain.output_decimals(20)


def test_value_bias_shifts_outputs_exactly():
    plain = attend(Head(W_Q, W_K, W_V), X)
    b_V = [F(1, 3), -2]
    biased = attend(Head(W_Q, W_K, W_V, b_V=b_V), X)
    for i in range(4):
        for c in range(2):
            got = biased.output(i, c)
            assert type(got) is ExpRatio
            assert got == plain.output(i, c) + b_V[c]
            assert got - b_V[c] == plain.output(i, c)


def test_bias_of_the_wrong_width_is_refused():
    with pytest.raises(ShapeError, match=r"b_K must have 2 numbers \(got 3\)"):
        Head(W_Q, W_K, W_V, b_K=[1, 2, 3])


# -- layers ----------------------------------------------------------------------------

def _float_layer(x, wq, wk, wv, wo, kv_of, bo=None, keep=None):
    """The layer in float64 numpy, written independently (slots layout weights)."""
    x = np.array(x, dtype=float)
    heads = []
    for a, q in enumerate(wq):
        g = kv_of[a]
        Q, K, V = (x @ np.array(w, dtype=float).T for w in (q, wk[g], wv[g]))
        s = Q @ K.T / np.sqrt(Q.shape[1])
        if keep is not None:
            s = np.where(np.array(keep)[None, :], s, -np.inf)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        heads.append((p / p.sum(axis=1, keepdims=True)) @ V)
    out = np.concatenate(heads, axis=1) @ np.array(wo, dtype=float).T
    return out + (0 if bo is None else np.array(bo, dtype=float))


def _weights(h, d_model, d, seed, kv=None):
    rng = np.random.default_rng(seed)
    return [[[F(int(v), 4) for v in r] for r in rng.integers(-6, 7, (d, d_model))]
            for _ in range(kv or h)]


@pytest.mark.parametrize("H,H_kv", [(2, 2), (4, 2), (4, 1)])
def test_layer_matches_a_float_reference(H, H_kv):
    wq, wk, wv = _weights(H, 3, 2, 1), _weights(H, 3, 2, 2, H_kv), _weights(H, 3, 2, 3, H_kv)
    wo = [[F((d + 3 * c) % 5 - 2, 2) for c in range(2 * H)] for d in range(3)]
    layer = Layer(wq, wk, wv, wo, b_O=[1, 0, F(-1, 2)])
    run = attend_layer(layer, X)
    assert layer.kv_of == [Policy().kv_head(a, H, H_kv) for a in range(H)]
    want = _float_layer(X, wq, wk, wv, wo, layer.kv_of, bo=[1, 0, -0.5])
    got = np.array([[float(v) for v in r] for r in run.outputs])
    assert np.allclose(got, want, rtol=1e-12, atol=1e-12)
    assert all(type(v) is LayerValue for r in run.outputs for v in r)
    # shared key/value heads are projected once: 4 tokens x 3 x 2 per projection
    assert run.macs["projections"] == 24 * (H + 2 * H_kv)
    assert run.macs["out_projection"] == 4 * 3 * 2 * H
    assert run.bias_adds == 4 * 3


def test_gqa_equals_duplicated_key_value_heads():
    wq, wk, wv = _weights(4, 3, 2, 5), _weights(4, 3, 2, 6, 2), _weights(4, 3, 2, 7, 2)
    wo = [[F(c - d, 3) for c in range(8)] for d in range(3)]
    shared = attend_layer(Layer(wq, wk, wv, wo), X)
    dup = attend_layer(Layer(wq, [wk[0], wk[0], wk[1], wk[1]], [wv[0], wv[0], wv[1], wv[1]], wo),
                       X)
    assert shared.output_decimals(15) == dup.output_decimals(15)
    assert shared.macs["projections"] < dup.macs["projections"]
    tiled = attend_layer(Layer(wq, wk, wv, wo, policy=Policy(gqa="tile")), X)
    assert tiled.layer.kv_of == [0, 1, 0, 1]


def test_one_head_with_identity_W_O_is_the_head():
    ex = chronicle()
    h = ex.head
    run = attend_layer(Layer([h.W_Q], [h.W_K], [h.W_V], np.eye(4, dtype=int).tolist()), ex.x)
    trace = attend(h, ex.x)
    for i in range(4):
        for c in range(4):
            v = run.outputs[i][c]
            assert v.terms[0] == trace.output(i, c) and v.constant == 0
    assert run.output_decimals(8) == trace.output_decimals(8)
    assert run.share(0, 1, 0) == trace.share(1, 0)


def test_W_O_layouts_agree_and_wrong_shape_is_named():
    wq, wk, wv = _weights(2, 3, 2, 8), _weights(2, 3, 2, 9), _weights(2, 3, 2, 10)
    wo = [[F(c + d, 2) for c in range(4)] for d in range(3)]
    rows = [list(c) for c in zip(*wo)]
    as_rows = [[list(c) for c in zip(*m)] for m in wq], [[list(c) for c in zip(*m)] for m in wk], \
        [[list(c) for c in zip(*m)] for m in wv]
    a = attend_layer(Layer(wq, wk, wv, wo), X)
    b = attend_layer(Layer(*as_rows, rows, layout="rows"), X)
    assert a.output_decimals(12) == b.output_decimals(12)
    with pytest.raises(ShapeError, match="W_O must be 3 x 4 in the slots layout"):
        Layer(wq, wk, wv, rows)


def test_padding_mask_hides_padded_keys():
    wq, wk, wv = _weights(2, 3, 2, 11), _weights(2, 3, 2, 12), _weights(2, 3, 2, 13)
    wo = [[F(c - d, 2) for c in range(4)] for d in range(3)]
    layer = Layer(wq, wk, wv, wo)
    keep = [True, True, True, False]
    run = attend_layer(layer, X, mask=padding_mask(keep))
    other = attend_layer(layer, X[:3] + [[5, 5, 5]], mask=padding_mask(keep))
    assert run.output_decimals(15)[:3] == other.output_decimals(15)[:3]
    assert run.share(1, 0, 3) == 0
    want = _float_layer(X, wq, wk, wv, wo, [0, 1], keep=keep)
    got = np.array([[float(v) for v in r] for r in run.outputs])
    assert np.allclose(got, want, rtol=1e-12, atol=1e-12)
    causal = attend_layer(Layer(wq, wk, wv, wo, policy=Policy(causal=True)), X,
                          mask=padding_mask(keep))
    assert causal.share(0, 0, 1) == 0 and causal.share(0, 3, 2) != 0
    with pytest.raises(ShapeError, match=r"mask must be 4 x 4 \(got 1 x 2\)"):
        attend_layer(layer, X, mask=Mask("bool_keep", [[True, False]]))
