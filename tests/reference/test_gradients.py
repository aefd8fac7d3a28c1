"""Exact gradients of attention (exactattn.gradients): cross-checked against sympy's diff.

Every check is exact: sympy's derivative and the exact value are compared as rational
functions of the exponentials (each exp(a) written as a power of one or two symbols),
never through floats.  Finite differences are no substitute and are not used.
"""

from __future__ import annotations

import doctest
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import sympy

from exactattn.call.policy import Mask, Policy
from exactattn.errors import ExactAttnError, InputError, ShapeError
from exactattn.numbers.ratio import ExpRatio
from exactattn.gradients import gradients, head_gradients
from exactattn.engines.head import Head, attend

ROOT = Path(__file__).resolve().parents[2]
F = Fraction


# --------------------------------------------------------------------------- exact comparison
def _split(arg):
    """``arg = r0 + r1 sqrt(q)`` for rationals r0, r1 (one square root at most)."""
    arg = sympy.expand(arg)
    roots = [a for a in arg.atoms(sympy.Pow) if a.exp == sympy.Rational(1, 2)]
    assert len(roots) <= 1, arg
    if not roots:
        return sympy.Rational(arg), sympy.Integer(0), None
    r1 = arg.coeff(roots[0])
    r0 = sympy.expand(arg - r1 * roots[0])
    return sympy.Rational(r0), sympy.Rational(r1), roots[0]


def assert_exactly_equal(expr, value: ExpRatio):
    """sympy ``expr`` equals ``value`` as a rational function of exp(rational) and
    exp(rational * sqrt(q)) (two independent transcendentals)."""
    diff = sympy.expand(expr) - value.closed_form()
    atoms = list(diff.atoms(sympy.exp)) + ([sympy.E] if diff.has(sympy.E) else [])
    if not atoms:
        assert sympy.simplify(diff) == 0, diff
        return
    parts = [_split(1 if a == sympy.E else a.args[0]) for a in atoms]
    d0 = sympy.ilcm(1, 1, *[p[0].q for p in parts])
    d1 = sympy.ilcm(1, 1, *[p[1].q for p in parts])
    U, W = sympy.symbols("U W", positive=True)
    rep = {a: U ** (p[0] * d0) * W ** (p[1] * d1) for a, p in zip(atoms, parts)}
    assert sympy.cancel(sympy.together(diff.xreplace(rep))) == 0, diff


def sympy_loss(Q, K, V, dO, *, scale=None, keep=None, offsets=None):
    """``(L, symbols)``: L = sum dO * O of the call written out in sympy, with a symbol per
    entry of Q, K, V and of the offsets (``offsets`` rationals or None = hidden)."""
    L_, S_, E = len(Q), len(K), len(Q[0])
    sub = {}

    def symbols(name, M):
        out = []
        for i, row in enumerate(M):
            r = []
            for j, x in enumerate(row):
                if x is None:
                    r.append(None)
                    continue
                s = sympy.Symbol(f"{name}_{i}_{j}")
                sub[s] = sympy.Rational(str(x))
                r.append(s)
            out.append(r)
        return out
    q, k, v = symbols("q", Q), symbols("k", K), symbols("v", V)
    m = symbols("m", offsets) if offsets is not None else None
    loss = 0
    for i in range(L_):
        vis = [j for j in range(S_) if (keep is None or keep[i][j])
               and (m is None or m[i][j] is not None)]
        logits = {j: (scale if scale is not None else 1) * sum(q[i][e] * k[j][e] for e in range(E))
                  + (m[i][j] if m is not None else 0) for j in vis}
        z = sum(sympy.exp(x) for x in logits.values())
        for c in range(len(V[0])):
            o = sum(sympy.exp(logits[j]) * v[j][c] for j in vis) / z
            loss += sympy.Rational(str(dO[i][c])) * o
    return loss, sub, (q, k, v, m)


def check_against_sympy(Q, K, V, dO, *, scale_text="none", keep=None, offsets=None):
    """Every dQ, dK, dV (and dS where there are offsets) equals sympy's derivative exactly."""
    policy = Policy(scale=scale_text)
    scale = None
    if policy.divisor_squared is not None:
        D = policy.divisor_squared_for(len(Q[0]))
        scale = 1 / sympy.sqrt(sympy.Rational(D.numerator, D.denominator))
    loss, sub, (q, k, v, m) = sympy_loss(Q, K, V, dO, scale=scale, keep=keep, offsets=offsets)
    mask = None
    if offsets is not None:
        mask = Mask("additive", [["-inf" if e is None else str(e) for e in r] for r in offsets])
    elif keep is not None:
        mask = Mask("bool_keep", keep)
    g = gradients(Q, K, V, dO, policy, mask)
    for name, syms in (("dQ", q), ("dK", k), ("dV", v)) + ((("dS", m),) if m else ()):
        mine = g.matrix(name)
        for i, row in enumerate(syms):
            for j, s in enumerate(row):
                want = 0 if s is None else sympy.diff(loss, s).xreplace(sub)
                assert_exactly_equal(want, mine[i][j])
    return g


# --------------------------------------------------------------------------- sympy cross-checks
def test_sympy_diff_no_scale_two_tokens():
    g = check_against_sympy([[1, 0], [0, 2]], [[1, 1], [2, 0]], [[1, 2], [3, -1]],
                            [[1, 0], [2, 1]])
    assert g.terms.generators == [(F(1), None)]


def test_sympy_diff_irrational_default_scale_three_tokens_causal():
    g = check_against_sympy([[1, 0], [0, 2], [1, 1]], [[1, 1], [2, 0], [0, 1]],
                            [[1], [3], [-2]], [[1], [-1], [2]], scale_text="default",
                            keep=[[True, False, False], [True, True, False], [True, True, True]])
    assert g.irrational_scale == F(2) and g.terms.generators == [(F(1), F(2))]
    assert g.dQ[1][0].scaled and not g.dV[0][0].scaled


def test_sympy_diff_additive_mask_is_the_bias_gradient():
    offsets = [[F(1, 2), None, 0], [0, F(-1, 3), F(2)]]
    g = check_against_sympy([[1], [2]], [[1], [0], [-1]], [[1, 0], [0, 1], [2, 2]],
                            [[1, -1], [F(1, 2), 3]], scale_text="1/2", offsets=offsets)
    assert g.dS[0][1].rational() == 0 and type(g.dS[0][1].rational()) is Fraction


def test_sympy_diff_irrational_scale_with_offsets_uses_two_generators():
    offsets = [[F(1, 2), 0], [0, F(1, 3)]]
    g = check_against_sympy([[1, 0], [1, 1]], [[1, 2], [0, 1]], [[1], [2]], [[1], [1]],
                            scale_text="default", offsets=offsets)
    assert g.terms.paired and len(g.terms.generators) == 2
    assert "u = exp(1/6)" in g.dV[0][0].text(style="generators")


def _symbol_matrix(name, rows, cols, values, sub):
    out = []
    for s in range(rows):
        r = []
        for m in range(cols):
            x = sympy.Symbol(f"{name}_{s}_{m}")
            sub[x] = sympy.Rational(str(values[s][m]))
            r.append(x)
        out.append(r)
    return out


@pytest.mark.parametrize("case", ["default", "none-causal-biases", "rows-divisor-2"])
def test_sympy_diff_of_the_symbolic_engine_equals_the_weight_gradients(case):
    """attend(engine="symbolic") on a head whose weights are symbols; sympy.diff of
    sum dO * outputs w.r.t. each weight and bias equals head_gradients exactly."""
    x = [[1, 0], [F(1, 2), 2], [0, -1]]
    WQ, WK, WV = [[1, 2], [0, 1]], [[2, 0], [1, -1]], [[1, 1], [0, 3]]
    bQ, bK, bV = [1, 0], [F(1, 2), 2], [0, 1]
    dO = [[1, 0], [-1, 2], [F(1, 2), 1]]
    if case == "default":         # sqrt(2) in every exponent: two tokens keep sympy quick
        x, dO = x[:2], dO[:2]
    kwargs = {}
    biases = case == "none-causal-biases"
    layout = "rows" if case == "rows-divisor-2" else "slots"
    if case == "none-causal-biases":
        kwargs = {"divisor": "none", "causal": True}
    elif case == "rows-divisor-2":
        kwargs = {"divisor": "2"}
        WQ, WK, WV = ([list(c) for c in zip(*W)] for W in (WQ, WK, WV))
    sub = {}
    sym = [_symbol_matrix(n, len(W), len(W[0]), W, sub) for n, W in
           (("WQ", WQ), ("WK", WK), ("WV", WV))]
    bsym = [_symbol_matrix(n, 1, 2, [b], sub)[0] for n, b in (("bQ", bQ), ("bK", bK), ("bV", bV))]
    extra = dict(zip(("b_Q", "b_K", "b_V"), bsym)) if biases else {}
    head = Head(*sym, layout=layout, symbolic=True, **extra, **kwargs)
    trace = attend(head, x, engine="symbolic")
    loss = sum(sympy.Rational(str(dO[i][c])) * trace.outputs[i][c]
               for i in range(len(x)) for c in range(2))
    numeric = Head(WQ, WK, WV, layout=layout, **(dict(b_Q=bQ, b_K=bK, b_V=bV) if biases else {}),
                   **kwargs)
    g = head_gradients(numeric, x, dO)
    for name, S in zip(("dW_Q", "dW_K", "dW_V"), sym):
        mine = g.matrix(name)
        assert len(mine) == len(S) and len(mine[0]) == len(S[0])
        for a, row in enumerate(S):
            for b, s in enumerate(row):
                assert_exactly_equal(sympy.diff(loss, s).xreplace(sub), mine[a][b])
    if biases:
        for name, B in zip(("db_Q", "db_K", "db_V"), bsym):
            for s, b in enumerate(B):
                assert_exactly_equal(sympy.diff(loss, b).xreplace(sub), g.matrix(name)[s])
        assert [v.rational() for v in g.db_K] == [0, 0]


# --------------------------------------------------------------------------- exact values
def test_a_row_of_equal_scores_gives_rational_gradients():
    g = gradients([[0, 0], [0, 0]], [[1, 2], [3, 4]], [[1], [3]], [[1], [2]],
                  Policy(scale="none"))
    assert [[v.rational() for v in r] for r in g.dS] == [[F(-1, 2), F(1, 2)], [-1, 1]]
    assert [[v.rational() for v in r] for r in g.dQ] == [[1, 1], [2, 2]]
    assert [[v.rational() for v in r] for r in g.dK] == [[0, 0], [0, 0]]
    assert [[v.rational() for v in r] for r in g.dV] == [[F(3, 2)], [F(3, 2)]]
    assert all(type(v.rational()) is Fraction for r in g.dQ + g.dK + g.dV for v in r)
    assert g.decimals("dQ", 3) == [["1.000", "1.000"], ["2.000", "2.000"]]
    # the same under the default scale 1/sqrt(2): dQ = [1, 1] / sqrt(2), irrational
    h = gradients([[0, 0], [0, 0]], [[1, 2], [3, 4]], [[1], [3]], [[1], [2]])
    v = h.dQ[0][0]
    assert v.rational() is None and v.closed_form() == sympy.sqrt(2) / 2
    assert v.decimal(6) == "0.707107" and v > F(7, 10) and v == h.dQ[0][1]
    assert h.dV[0][0].rational() == F(3, 2)


def test_d_out_orthogonal_to_the_values_gives_exact_zeros():
    Q, K = [[1, 0], [2, 1]], [[0, 1], [1, 3]]
    g = gradients(Q, K, [[1, 0], [2, 0]], [[0, 1], [0, 3]], Policy(scale="none"))
    for name in ("dQ", "dK", "dS", "D", "dP"):
        flat = g.matrix(name)
        flat = [v for r in flat for v in r] if isinstance(flat[0], list) else flat
        assert all(v.is_zero() and v == 0 and v.rational() == 0 for v in flat), name
    assert all(not v.is_zero() and v.rational() is None for r in g.dV for v in r[1:])
    assert [r[0].rational() for r in g.dV] == [0, 0]
    # dO orthogonal only to the differences of the values: dP is constant along each row,
    # so dS, dQ and dK are still exactly 0 while dP and D are not
    h = gradients(Q, K, [[1, 5], [1, 7]], [[1, 0], [3, 0]], Policy(scale="none"))
    assert all(v.is_zero() for name in ("dQ", "dK", "dS") for r in h.matrix(name) for v in r)
    assert [v.rational() for v in h.D] == [1, 3]


def test_rows_of_dS_sum_to_zero_and_the_key_bias_gradient_is_zero():
    g = gradients([[1, 2], [3, -1], [0, 1]], [[1, 0], [2, 1], [F(1, 2), 1]],
                  [[1, 2], [0, 1], [5, -3]], [[1, 1], [2, -1], [0, 3]], Policy())
    for row in g.dS:
        total = sum(row[1:], row[0])
        assert total.is_zero() and total == 0 and total.rational() == 0
        assert any(v.rational() is None for v in row)
    for c in range(2):                       # sum_j dK_jc = scale sum_i Q_ic sum_j dS_ij = 0
        total = sum((r[c] for r in g.dK[1:]), g.dK[0][c])
        assert total == 0 and total.scaled
    assert g.dS[0][0].sign() == -g.dS[0][0].__neg__().sign() != 0


def test_shift_invariance_a_row_constant_offset_changes_nothing():
    Q, K, V, dO = [[1], [2]], [[1], [0], [3]], [[1], [2], [4]], [[1], [-2]]
    plain = gradients(Q, K, V, dO, Policy(scale="1/3"))
    shifted = gradients(Q, K, V, dO, Policy(scale="1/3"),
                        Mask("additive", [["5/7", "5/7", "5/7"], [-2, -2, -2]]))
    for name in ("dQ", "dK", "dV", "dS"):
        assert [[v.text(style="generators") for v in r] for r in plain.matrix(name)] == \
            [[v.text(style="generators") for v in r] for r in shifted.matrix(name)]


def test_a_rational_value_exactly_on_a_rounding_boundary_rounds_to_even():
    g2 = gradients([[0]], [[0], [0]], [[1], [0]], [["1/4"]], Policy(scale="none"))
    assert g2.decimals("dV", 2) == [["0.12"], ["0.12"]]      # 1/8, a tie: to even


def test_values_over_different_normalisers_decided_exactly():
    # rows see keys at scores (0, 1) and (0, 1, 2, 3): Z = 1 + t and (1 + t)(1 + t^2)
    keep = Mask("bool_keep", [[True, True, False, False], [True] * 4])
    g = gradients([[1], [1]], [[0], [1], [2], [3]], [[1], [0], [0], [0]], [[1], [-1]],
                  Policy(scale="none"), keep)
    same = g.P[1][0] + g.P[1][2] - g.P[0][0]        # (1 + t^2)/Z2 - 1/Z1 = 0 across classes
    assert same.is_zero() and same == 0 and same.rational() == 0
    # 1/(1 + e) - 1/(1 + e + e^2 + e^3): equal at equal scores, yet not equal
    apart = g.P[0][0] - g.P[1][0]
    assert not apart.is_zero() and apart.sign() == 1 and apart.rational() is None
    assert g.dV[0][0].rational() is None and g.dV[0][0] > 0


def test_bulk_decimals_equal_the_per_entry_exact_path():
    rng = np.random.default_rng(3)

    def m(r, c):
        return [[F(int(x), 4) for x in row] for row in rng.integers(-6, 7, (r, c))]
    g = gradients(m(6, 3), m(5, 3), m(5, 2), m(6, 2), Policy(causal=True,
                                                            alignment="bottom_right"))
    for name in ("dQ", "dK", "dV", "dS", "O", "P"):
        assert g.decimals(name, 6) == [[v.decimal(6) for v in r] for r in g.matrix(name)]
    assert g.decimals("D", 5) == [v.decimal(5) for v in g.D]


def test_empty_rows_zero_uniform_and_nan():
    keep = Mask("bool_keep", [[False, False], [True, True]])
    Q, K, V, dO = [[1], [2]], [[1], [0]], [[1], [3]], [[2], [1]]
    zero = gradients(Q, K, V, dO, Policy(scale="none"), keep)
    assert zero.terms.kinds == ["zero", "ok"]
    assert zero.dQ[0][0] == 0 and [v.rational() for v in zero.P[0]] == [0, 0]
    uni = gradients(Q, K, V, dO, Policy(scale="none", empty_row="uniform"), keep)
    assert uni.dQ[0][0] == 0 and [v.rational() for v in uni.P[0]] == [F(1, 2)] * 2
    # dV_j = P_1j dO_1 (+ dO_0 / 2 = 1 from the uniform row), dO_1 = 1
    assert all(zero.dV[j][0] - zero.P[1][j] == 0 for j in range(2))
    assert all(uni.dV[j][0] - uni.P[1][j] == 1 for j in range(2))
    nan = gradients(Q, K, V, dO, Policy(scale="none", empty_row="nan"), keep)
    assert nan.dQ[0][0].nan and nan.dV[1][0].nan and not nan.dQ[1][0].nan
    assert nan.decimals("dV", 3) == [["nan"], ["nan"]] and nan.dQ[0][0] != nan.dQ[0][0]
    with pytest.raises(InputError, match="value must be a number to be compared"):
        nan.dK[0][0] < 1


def test_head_gradients_layouts_and_biases():
    W = [[1, 2], [0, 1]]
    x, dO = [[1, 0], [1, 1], [0, 2]], [[1, 0], [0, 1], [1, -1]]
    slots = head_gradients(Head(W, W, W, b_K=[1, 1]), x, dO)
    rows = head_gradients(Head(*([list(c) for c in zip(*W)],) * 3, layout="rows",
                               b_K=[1, 1]), x, dO)
    for name in ("dW_Q", "dW_K", "dW_V"):
        a, b = slots.decimals(name, 8), rows.decimals(name, 8)
        assert a == [list(c) for c in zip(*b)]
    assert [v.rational() for v in slots.db_K] == [0, 0]
    assert [v.rational() for v in slots.db_V] == [2, 0]         # sum_i dO_i
    assert slots.decimals("db_V", 2) == ["2.00", "0.00"]
    assert slots.call.R == 3 and isinstance(slots.dW_Q[0][0], ExpRatio)


def test_one_line_errors():
    with pytest.raises(ShapeError, match=r"d_out must"):
        gradients([[1]], [[1]], [[1]], [[1], [2]])
    with pytest.raises(ShapeError, match=r"mask must be L x S = 1 x 2 or broadcast to 1 x 1 x 1 x 2 "
                       r"\(got 2 x 2\)"):
        gradients([[1]], [[1], [2]], [[1], [2]], [[1]], None, Mask("bool_keep", [[True] * 2] * 2))
    with pytest.raises(InputError, match="head must have numeric weights"):
        head_gradients(Head([[sympy.Symbol("a")]], [[1]], [[1]], symbolic=True), [[1]], [[1]])
    g = gradients([[1, 0], [2, 1]], [[1, 1], [0, 1]], [[1], [3]], [[2], [1]])   # 1/sqrt(2)
    h = gradients([[1, 0], [2, 1]], [[1, 1], [0, 1]], [[1], [3]], [[2], [1]])
    with pytest.raises(InputError, match="values must come from one call"):
        g.dV[0][0] + h.dV[0][0]
    with pytest.raises(InputError, match="both carry the scale"):
        g.dQ[0][0] + g.dV[0][0]
    with pytest.raises(InputError, match="value must be rational to be a Fraction"):
        g.dV[0][0].as_fraction()
    with pytest.raises(InputError, match="name must be one of dQ, dK, dV"):
        g.value("dX", 0, 0)


def test_an_identity_too_large_to_decide_is_a_one_line_error(monkeypatch):
    from exactattn.numbers import ratio
    keep = Mask("bool_keep", [[True, True, False, False], [True] * 4])
    g = gradients([[1], [1]], [[0], [1], [2], [3]], [[1], [0], [0], [0]], [[1], [-1]],
                  Policy(scale="none"), keep)
    monkeypatch.setattr(ratio, "MAX_TERMS", 2)
    monkeypatch.setattr(ratio, "ZERO_PREC", 128)
    with pytest.raises(ExactAttnError, match="value must be decided within 2 polynomial terms"):
        (g.P[1][0] + g.P[1][2] - g.P[0][0]).is_zero()


def test_the_worked_example_in_the_docs():
    failed, tried = doctest.testfile(str(ROOT / "docs" / "gradients.md"), module_relative=False,
                                     optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert tried > 5 and failed == 0


def test_gradients_class_takes_rows_of_a_gqa_group():
    from exactattn.call import Call
    from exactattn.reference.reference import Reference
    call = Call([[[[1], [2]], [[0], [-1]]]], [[[[1], [0], [2]]]], [[[[1], [2], [0]]]],
                policy=Policy(scale="none"))            # two query heads read one key head
    g = Reference(call).gradients([[[[1]] * 2] * 2]).blocks[(0, 0)]
    # the group's rows as one head's four queries against the same keys
    h = gradients([[1], [2], [0], [-1]], [[1], [0], [2]], [[1], [2], [0]], [[1]] * 4,
                  Policy(scale="none"))
    assert [h.decimals(n, 30) for n in ("dQ", "dK", "dS")] == \
        [g.decimals(n, 30) for n in ("dQ", "dK", "dS")]
    assert g.shape("dK") == (3, 1) and g.shape("dQ") == (4, 1)
    # query row 2 scores 0 everywhere: P = 1/3, dP = (1, 2, 0), D = 1, dS = (0, 1/3, -1/3)
    assert [v.rational() for v in g.dS[2]] == [0, F(1, 3), F(-1, 3)]
    assert g.dQ[2][0].rational() == F(-2, 3)


def test_soft_capping_and_rope_are_certified_through_the_reference_and_windows_work():
    from exactattn.call import Call
    from exactattn.call.modifiers import Rope
    from exactattn.reference.reference import Reference
    for field, value in (("softcap", F(30)), ("rope", Rope())):      # one key: P = 1, dS = 0
        call = Call([[1, 0]], [[1, 0]], [[1]], policy=Policy(**{field: value}))
        for g in (Reference(call).gradients([[1]]).blocks[(0, 0)],    # gradients(...) is its
                  gradients([[1, 0]], [[1, 0]], [[1]], [[1]], Policy(**{field: value}))):  # view
            assert g.certified and [g.decimals(n, 6)[0][0] for n in ("dV", "dQ")] == \
                ["1.000000", "0.000000"]
        # equal values: dP is constant along each row, so dS, dQ and dK are exactly 0 (an
        # enclosure of exactly 0, not one that holds 0: no bounded search, no refusal)
        same = Reference(Call([[1, 2], [0, 1]], [[1, 0], [0, 1], [2, 1]], [[3]] * 3,
                              policy=call.policy)).gradients([[1], [2]])
        assert all(same.value(n, 0, 0, i, c).rational() == 0 for n in ("dQ", "dK")
                   for i in range(2) for c in range(2))
        two = Reference(Call([[1, 0]], [[1, 0], [0, 1]], [[1], [2]], policy=call.policy))
        dV = two.gradients([[1]]).blocks[(0, 0)].dV           # the shares: they sum to 1
        assert (dV[0][0] + dV[1][0]).decimal(12) == "1.000000000000"
        with pytest.raises(InputError, match="^value must be over exact logits to be written "
                                             "in closed form") as info:
            dV[0][0].text()
        assert "\n" not in str(info.value)
    with pytest.raises(InputError, match="policy must be a Policy or None"):
        gradients([[1]], [[1]], [[1]], [[1]], "none")
    # a window only narrows which keys a query sees: query 2 sees keys 1 and 2
    g = gradients([[1], [2], [3]], [[1], [2], [3]], [[1], [2], [3]], [[1], [1], [1]],
                  Policy(scale="none", causal=True, window=(1, 0)))
    assert [g.terms.visible(i) for i in range(3)] == [[0], [0, 1], [1, 2]]
    assert g.dS[2][0].rational() == 0 and g.dQ[0][0].rational() == 0
    check_against_sympy([[1], [2], [3]], [[1], [2], [3]], [[1], [2], [3]], [[1], [1], [1]],
                        keep=[[True, False, False], [True, True, False], [False, True, True]])


def test_values_of_two_calls_compare_exactly():
    """Values of two calls are one kind of value: they compare exactly (keys moved by one
    vector move each query's scores by a constant: P, dS, dV and dQ do not change)."""
    g = gradients([[1, 0], [2, 1]], [[1, 1], [0, 1]], [[1], [3]], [[2], [1]], Policy(scale="none"))
    h = gradients([[1, 0], [2, 1]], [[2, 1], [1, 1]], [[1], [3]], [[2], [1]], Policy(scale="none"))
    for name in ("P", "dS", "dV"):
        for a, b in zip(g.matrix(name), h.matrix(name)):
            assert all(x == y and hash(x) == hash(y) for x, y in zip(a, b))
    assert g.P[0][0] != h.P[1][0] and (g.P[0][0] < h.P[1][0]) == (float(g.P[0][0]) < float(h.P[1][0]))
    # dQ = dS K: the keys' shared move adds dS_i . (1, 0) = 0 (every row of dS sums to 0)
    assert g.dQ[0][0] == h.dQ[0][0] and g.dQ[0][0].text() != h.dQ[0][0].text()



@pytest.mark.parametrize("d_lse, shape", [([[[1, 2, 3]]], "1 x 1 x 3"), ([1], "1"),
                                          (np.zeros((1, 1, 3), dtype=object), "1 x 1 x 3")])
def test_reference_gradients_read_d_lse_like_the_log_sum_exp(d_lse, shape):
    from exactattn import Call
    from exactattn.verify import Reference
    ref = Reference(Call([[0, 1], [1, 0]], [[0, 1], [1, 0]], [[1], [3]]))
    with pytest.raises(ShapeError) as e:
        ref.gradients([[1], [1]], d_lse)
    assert str(e.value) == f"d_lse must be 2 like the log-sum-exp (got {shape})"
    dq = [ref.gradients([[1], [1]], d).value("dQ", 0, 0, 0, 0).exact()
          for d in ([1, 2], [[[1, 2]]], np.array([1, 2]), None, [0, 0])]
    assert dq[0] == dq[1] == dq[2] != dq[3] == dq[4]


def test_the_inputs_a_gradient_was_computed_from_are_read_only():
    """Assigning an input after the fact would leave certified values computed from the old one."""
    g = gradients([[0], [1]], [[0], [1]], [[1], [3]], [[1], [1]], Policy(scale="none"))
    assert g.decimals("dQ", 4) == [["0.5000"], ["0.3932"]]
    for name in ("queries", "d_out", "offsets", "factors", "scale_rational", "nan_rows",
                 "rows", "terms", "dP_matrix", "enclosures", "magnitudes"):
        with pytest.raises(AttributeError):
            setattr(g, name, getattr(g, name))
