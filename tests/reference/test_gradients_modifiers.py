"""Exact gradients under the call model's modifiers: sinks, ALiBi (rational and 2^(-1/2) slopes),
dropout; cross-checked against sympy's diff, exactly (no floats, no tolerance)."""

from __future__ import annotations

from fractions import Fraction

import pytest
import sympy

from exactattn.call.policy import Mask, Policy
from exactattn.errors import InputError, ShapeError
from exactattn.numbers.ratio import ExpRatio
from exactattn.gradients import gradients, head_gradients
from exactattn.engines.head import Head
from exactattn.call.modifiers import Alibi
from exactattn.call import Call
from exactattn.reference.reference import Reference

F = Fraction


def assert_exactly_equal(expr, value: ExpRatio):
    """sympy ``expr`` equals ``value`` as a rational function of the exponentials.

    Each exp(sum_k c_k a_k) (a_k = 1, sqrt(2), 2**(1/4), ...: sympy's canonical
    irrational atoms, independent over Q) becomes a monomial in one symbol per atom
    (Lindemann-Weierstrass), and the difference is cancelled to 0."""
    diff = sympy.expand(expr - value.closed_form())
    exps = list(diff.atoms(sympy.exp))
    if diff.has(sympy.E):
        exps.append(sympy.E)
    coeffs = [sympy.expand(1 if a == sympy.E else a.args[0]).as_coefficients_dict() for a in exps]
    atoms = sorted({t for c in coeffs for t in c}, key=sympy.default_sort_key)
    dens = {t: sympy.ilcm(1, 1, *[sympy.Rational(c.get(t, 0)).q for c in coeffs]) for t in atoms}
    symbols = {t: sympy.Symbol(f"X{k}", positive=True) for k, t in enumerate(atoms)}
    rep = {a: sympy.Mul(*[symbols[t] ** (sympy.Rational(c.get(t, 0)) * dens[t]) for t in atoms])
           for a, c in zip(exps, coeffs)}
    assert sympy.cancel(sympy.together(diff.xreplace(rep))) == 0, diff


def symbolic_loss(Q, K, V, dO, *, scale=1, keep=None, offsets=None, sink=None, factors=None):
    """``sum dO * O`` written out in sympy with a symbol per entry of Q, K, V (and the sink)."""
    L, S, E = len(Q), len(K), len(Q[0])
    sub = {}

    def sym(name, M):
        out = []
        for i, row in enumerate(M):
            r = []
            for j, x in enumerate(row):
                s = sympy.Symbol(f"{name}_{i}_{j}")
                sub[s] = sympy.Rational(str(x))
                r.append(s)
            out.append(r)
        return out
    q, k, v = sym("q", Q), sym("k", K), sym("v", V)
    s_sym = None
    if sink is not None:
        s_sym = sympy.Symbol("sink")
        sub[s_sym] = sympy.Rational(str(sink))
    loss = 0
    for i in range(L):
        vis = [j for j in range(S) if keep is None or keep[i][j]]
        logits = {j: scale * sum(q[i][e] * k[j][e] for e in range(E))
                  + (offsets[i][j] if offsets is not None else 0) for j in vis}
        z = sum(sympy.exp(x) for x in logits.values()) + (sympy.exp(s_sym) if s_sym is not None
                                                          else 0)
        for c in range(len(V[0])):
            o = sum(sympy.exp(logits[j]) * (factors[i][j] if factors else 1) * v[j][c]
                    for j in vis) / z
            loss += sympy.Rational(str(dO[i][c])) * o
    return loss, sub, (q, k, v, s_sym)


def check(g, loss, sub, syms, names=("dQ", "dK", "dV")):
    for name, S in zip(names, syms):
        mine = g.matrix(name)
        for i, row in enumerate(S):
            for j, s in enumerate(row):
                assert_exactly_equal(sympy.diff(loss, s).xreplace(sub), mine[i][j])


Q3, K3, V3, dO3 = [[1, 0], [0, 2], [1, 1]], [[1, 1], [2, 0], [0, 1]], [[1], [3], [-2]], \
    [[1], [-1], [2]]


def test_sink_gradients_and_dsink_equal_sympy():
    loss, sub, (q, k, v, s) = symbolic_loss(Q3, K3, V3, dO3, sink=F(1, 2))
    g = gradients(Q3, K3, V3, dO3, Policy(scale="none", sink=F(1, 2)))
    check(g, loss, sub, (q, k, v))
    assert_exactly_equal(sympy.diff(loss, s).xreplace(sub), g.dsink)
    # dsink = -sum_i P_i,sink D_i, and every row of dS (the sink's column included) sums to 0
    total = sum((g.value("P", i, 3) * 0 for i in range(3)), g.dsink)   # a gradient value
    assert isinstance(total, ExpRatio) and g.dsink.sign() == -1
    for i in range(3):
        row = sum(g.dS[i][1:], g.dS[i][0]) + g.value("dS", i, 3)
        assert row.is_zero()
    assert g.decimals("dsink", 6) == [g.dsink.decimal(6)]
    assert g.decimals("dQ", 6) == [[v.decimal(6) for v in r] for r in g.dQ]


def test_sink_with_a_row_that_sees_no_key_is_not_empty():
    keep = Mask("bool_keep", [[False, False], [True, True]])
    g = gradients([[1], [2]], [[1], [0]], [[1], [3]], [[2], [1]],
                  Policy(scale="none", sink=F(0), empty_row="nan"), keep)
    assert g.terms.kinds == ["ok", "ok"]
    assert g.value("P", 0, 2).rational() == 1 and g.dQ[0][0].rational() == 0
    assert g.value("dS", 0, 2).rational() == 0 and not g.dV[0][0].nan


@pytest.mark.parametrize("heads, head, scale", [(8, 0, "none"), (8, 2, "1/2"),
                                                (12, 8, "default"), (16, 1, "default")])
def test_alibi_gradients_equal_sympy(heads, head, scale):
    """ALiBi adds slope * distance: 1/2 and 1/8 are rational; 12 heads' head 8 has slope
    1/sqrt(2) (the scale's atom under d = 2), 16 heads' head 1 has 1/4 (rational)."""
    alibi = Alibi(heads)
    pol = Policy(scale=scale, alibi=alibi, head=head, causal=True)
    slope = alibi.slope(head)
    slope_s = slope.sympy() if hasattr(slope, "sympy") else sympy.Rational(str(slope))
    offsets = [[slope_s * alibi.distance(i, j) for j in range(3)] for i in range(3)]
    keep = [[j <= i for j in range(3)] for i in range(3)]
    sc = 1 if pol.divisor_squared is None else 1 / sympy.sqrt(sympy.Rational(str(pol.divisor_squared_for(2))))
    loss, sub, (q, k, v, _) = symbolic_loss(Q3, K3, V3, dO3, scale=sc, keep=keep,
                                            offsets=offsets)
    g = gradients(Q3, K3, V3, dO3, pol)
    check(g, loss, sub, (q, k, v))
    assert g.decimals("dK", 8) == [[v.decimal(8) for v in r] for r in g.dK]


def test_an_irrational_slope_beside_another_irrational_scale_needs_two_generators():
    pol = Policy(scale="1/sqrt(3)", alibi=Alibi(12), head=8)          # slope 1/sqrt(2)
    Q, K, V, dO = Q3[:2], K3[:2], V3[:2], dO3[:2]
    g = gradients(Q, K, V, dO, pol)
    assert [atom for _, atom in g.terms.generators] == [F(3), F(2)]
    offsets = [[sympy.sqrt(2) / 2 * Alibi(12).distance(i, j) for j in range(2)]
               for i in range(2)]
    loss, sub, (q, k, v, _) = symbolic_loss(Q, K, V, dO, scale=1 / sympy.sqrt(3),
                                            offsets=offsets)
    check(g, loss, sub, (q, k, v))
    assert "u = exp(1/2)" not in g.dV[0][0].text(style="generators") and \
        "sqrt(2)" in g.dV[0][0].text(style="generators")


def test_a_quarter_power_slope_is_a_generator_of_its_own():
    pol = Policy(scale="none", alibi=Alibi(32), head=1)          # 2^(-1/2): head 1 of 32 heads
    slope = Alibi(32).slope(1)
    g = gradients([[1], [0]], [[1], [2]], [[1], [0]], [[1], [1]], pol)
    assert len(g.terms.generators) == 2
    offsets = [[slope.sympy() * Alibi(32).distance(i, j) for j in range(2)] for i in range(2)]
    loss, sub, (q, k, v, _) = symbolic_loss([[1], [0]], [[1], [2]], [[1], [0]], [[1], [1]],
                                            offsets=offsets)
    check(g, loss, sub, (q, k, v))


def test_dropout_gradients_equal_sympy():
    keep = [[True, False, True], [True, True, True], [False, True, True]]
    factors = [[F(3, 2) if x else 0 for x in r] for r in keep]
    loss, sub, (q, k, v, _) = symbolic_loss(Q3, K3, V3, dO3, factors=factors)
    g = gradients(Q3, K3, V3, dO3, Policy(scale="none", dropout=F(1, 3)), dropout_keep=keep)
    check(g, loss, sub, (q, k, v))
    # dP is M * (dO V^T): 0 where a weight was dropped
    assert g.dP[0][1].rational() == 0 and g.dP[0][0].rational() == F(3, 2)
    assert g.decimals("dV", 6) == [[v.decimal(6) for v in r] for r in g.dV]
    # D_i = dO_i . O_i still (O with the dropped weights)
    for i in range(3):
        assert (g.D[i] - sum((dO3[i][c] * g.O[i][c] for c in range(1)), g.D[i] * 0)).is_zero()


def test_modified_head_gradients_match_the_call():
    h = Head([[1, 0]], [[0, 1]], [[1, 1]]).with_policy(
        Policy(scale=None, sink=F(-1), alibi=Alibi(4), head=1))
    hg = head_gradients(h, [[1, 0], [0, 1], [1, 1]], [[1], [0], [2]])
    assert hg.call.sink == F(-1) and hg.call.value("dsink").sign() != 0
    # with a sink the key bias does NOT cancel (the sink's logit does not move with it):
    # db_K = sum_j dK_j = sum_i q_i sum_j dS_ij = -sum_i q_i dS_i,sink
    call = hg.call
    want = sum((call.value("dS", i, 3) * -call.queries[i][0] for i in range(3)),
               call.value("dS", 0, 3) * 0)
    assert (hg.db_K[0] - want).is_zero() and not hg.db_K[0].is_zero()


def test_refusals_are_one_line():
    with pytest.raises(InputError, match="^value must be over exact logits to be written in "
                       r"closed form \(got a gradient over rotary or soft-capped scores\); use "
                       r"\.decimal\(places\)$"):
        Reference(Call([[1]], [[1]], [[2]], policy=Policy(softcap=F(30)))).gradients(
            [[1]]).value("dV", 0, 0, 0, 0).text()
    with pytest.raises(InputError, match=r"^dropout needs both p and a keep-mask \(got p without "
                       r"a keep-mask\)$"):          # the Call's and Reference's own refusals
        gradients([[1]], [[1]], [[1]], [[1]], Policy(dropout=F(1, 10)))
    with pytest.raises(InputError, match=r"dropout needs both p and a keep-mask \(got a keep-mask "
                       "without p"):
        gradients([[1]], [[1]], [[1]], [[1]], Policy(), dropout_keep=[[True]])
    with pytest.raises(ShapeError, match="dropout_keep must be L x S = 1 x 1"):
        gradients([[1]], [[1]], [[1]], [[1]], Policy(dropout=F(1, 10)),
                  dropout_keep=[[True, True]])
    with pytest.raises(InputError, match="dropout_keep must hold true/false entries"):
        gradients([[1]], [[1]], [[1]], [[1]], Policy(dropout=F(1, 10)), dropout_keep=[[1]])
    with pytest.raises(InputError, match="must have a sink for dsink"):
        gradients([[1]], [[1]], [[1]], [[1]]).dsink
