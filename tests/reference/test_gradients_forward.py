"""The backward pass's shares and outputs are the forward pass's, digit for digit.

The gradients keep their own exact softmax algebra (:mod:`exactattn.numbers.terms`:
every exponential a monomial in a few generators ``t, u, v, ...``), apart from the
forward one (:func:`exactattn.reference.logits.softmax_row`, read through
:class:`exactattn.reference.reference.Reference`).  Nothing but these tests ties the two
together, so they compose every modifier the gradients take (irrational and rational
scales, sinks, additive offsets with ``-inf`` entries, ALiBi with 12/16/24/32 heads whose
slopes are ``2^(-1/2)``- and ``2^(-1/4)``-type, several slopes in one GQA block, dropout,
the causal rule, windows, empty rows) and compare the certified decimals of ``P`` and
``O`` at 6 and 15 places, and the values themselves (``==``, ``<``, ``hash``).  The issue's two cases (a sink, then an additive offset, beside
an irrational scale and an irrational ALiBi slope: three generators, of which the ball
evaluation once read two) are pinned with their numbers, and their dQ is checked against
a plain mpmath computation of the chain rule written out here, not the package's algebra.
"""

from __future__ import annotations

import json
from fractions import Fraction

import mpmath
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exactattn.call.policy import Mask, Policy
from exactattn.errors import InputError
from exactattn.cli import main
from exactattn.gradients import gradients
from exactattn.call.modifiers import Alibi, alibi_slopes
from exactattn.call import Call
from exactattn.reference.reference import Reference

F = Fraction
PLACES = (6, 15)

# --------------------------------------------------------------------------- the issue's cases
# tokens x = (1), (0); W_Q = W_K = W_V = (1): Q = K = V = x; divisor sqrt(3); ALiBi with 16
# heads, head 0: slope 2^(-1/2), relative form (bias -m (i - j)); dO = (1), (0)
Q1, K1, V1, DO1 = [[1], [0]], [[1], [0]], [[1], [0]], [[1], [0]]
SINK_POLICY = Policy(scale="1/sqrt(3)", sink=F(1, 2), alibi=Alibi(16), head=0)
MASK_POLICY = Policy(scale="1/sqrt(3)", alibi=Alibi(16), head=0)
MASK_ROWS = [["1/2", "0"], ["0", "0"]]


def mp_backward(Q, K, V, dO, *, sink=None, mask=None, dps=60):
    """P (sink column last), O, dS and dQ of one head in plain mpmath: the chain rule of
    docs/gradients.md ("The mathematics") written out, nothing from exactattn.  The call is
    the issue's: scale 1/sqrt(3), ALiBi slope 2^(-1/2) (16 heads, head 0) in the relative
    form ``-m (i - j)``."""
    with mpmath.workdps(dps):
        scale = 1 / mpmath.sqrt(3)
        slope = 1 / mpmath.sqrt(2)
        L, S = len(Q), len(K)
        P, O, dS, dQ = [], [], [], []
        for i in range(L):
            x = [scale * mpmath.fsum(mpmath.mpf(a) * b for a, b in zip(Q[i], K[j]))
                 - slope * (i - j) + (0 if mask is None else mpmath.mpf(F(mask[i][j]).numerator)
                                      / F(mask[i][j]).denominator)
                 for j in range(S)]
            if sink is not None:
                x.append(mpmath.mpf(sink.numerator) / sink.denominator)
            e = [mpmath.exp(v) for v in x]
            z = mpmath.fsum(e)
            p = [v / z for v in e]
            vals = [list(r) for r in V] + ([[0] * len(V[0])] if sink is not None else [])
            keys = [list(r) for r in K] + ([[0] * len(K[0])] if sink is not None else [])
            dP = [mpmath.fsum(mpmath.mpf(a) * b for a, b in zip(dO[i], vals[j]))
                  for j in range(len(p))]
            D = mpmath.fsum(a * b for a, b in zip(p, dP))
            ds = [a * (b - D) for a, b in zip(p, dP)]
            P.append(p)
            O.append([mpmath.fsum(p[j] * vals[j][c] for j in range(len(p)))
                      for c in range(len(V[0]))])
            dS.append(ds)
            dQ.append([scale * mpmath.fsum(ds[j] * keys[j][c] for j in range(len(p)))
                       for c in range(len(K[0]))])
        return P, O, dS, dQ


def mp_round(x, places: int) -> str:
    """``x`` rounded to ``places`` decimals (x computed to 60 digits: far from any tie)."""
    with mpmath.workdps(80):
        k = int(mpmath.nint(x * mpmath.mpf(10) ** places))
    sign = "-" if k < 0 else ""
    k = abs(k)
    whole, frac = divmod(k, 10 ** places)
    return f"{sign}{whole}.{frac:0{places}d}"


def test_the_issues_sink_case_has_the_forward_shares_and_the_right_dq():
    g = gradients(Q1, K1, V1, DO1, SINK_POLICY)
    assert g.terms.generator_text() == "t = exp(1/sqrt(3)), u = exp(1/2), v = exp(1/sqrt(2))"
    assert [g.value("P", 0, j).decimal(6) for j in range(3)] == \
        ["0.326358", "0.371576", "0.302066"]
    assert [g.value("P", 1, j).decimal(6) for j in range(3)] == \
        ["0.156939", "0.318290", "0.524771"]
    assert g.value("P", 0, 0).text(style="generators") == \
        "t/(t + u + v) where t = exp(1/sqrt(3)), u = exp(1/2), v = exp(1/sqrt(2))"
    assert g.value("P", 0, 0).text() == \
        "exp(1/sqrt(3))/(exp(1/2) + exp(1/sqrt(3)) + exp(1/sqrt(2)))"     # as the forward prints it
    P, O, dS, dQ = mp_backward(Q1, K1, V1, DO1, sink=F(1, 2))
    for places in PLACES:
        for name, want in (("P", P), ("dS", dS)):
            got = g.decimals(name, places)
            assert [r + [g.value(name, i, 2).decimal(places)] for i, r in enumerate(got)] == \
                [[mp_round(x, places) for x in r] for r in want], name
        assert g.decimals("dQ", places) == [[mp_round(x, places) for x in r] for r in dQ]
        assert [[v.decimal(places) for v in r] for r in g.dQ] == \
            [[mp_round(x, places) for x in r] for r in dQ]
        assert g.decimals("O", places) == [[mp_round(x, places) for x in r] for r in O]
        assert g.dsink.decimal(places) == mp_round(sum(r[2] for r in dS), places)
    assert g.dQ[0][0].decimal(6) == "0.126930"        # 0.138804 before the fix


def test_the_issues_additive_mask_case_has_the_forward_shares_and_the_right_dq():
    g = gradients(Q1, K1, V1, DO1, MASK_POLICY, Mask("additive", MASK_ROWS))
    assert len(g.terms.generators) == 3
    assert [g.value("P", 0, j).decimal(6) for j in range(2)] == ["0.591518", "0.408482"]
    assert [g.value("P", 1, j).decimal(6) for j in range(2)] == ["0.330238", "0.669762"]
    ref = Reference((Call(Q1, K1, V1, MASK_ROWS, mask_kind="additive")).with_policy(MASK_POLICY))
    assert [[ref.share(0, 0, i, j).decimal(6) for j in range(2)] for i in range(2)] == \
        g.decimals("P", 6)
    P, O, dS, dQ = mp_backward(Q1, K1, V1, DO1, mask=MASK_ROWS)
    for places in PLACES:
        assert g.decimals("P", places) == [[mp_round(x, places) for x in r] for r in P]
        assert g.decimals("dS", places) == [[mp_round(x, places) for x in r] for r in dS]
        assert g.decimals("dQ", places) == [[mp_round(x, places) for x in r] for r in dQ]
        assert [[v.decimal(places) for v in r] for r in g.dQ] == \
            [[mp_round(x, places) for x in r] for r in dQ]
    assert g.dQ[0][0].decimal(6) == "0.139502"        # 0.109401 before the fix


def test_the_issues_command_prints_the_forward_shares(tmp_path, capsys):
    spec = tmp_path / "head.json"
    spec.write_text(json.dumps({"layout": "rows", "tokens": [{"x": [1]}, {"x": [0]}],
                                "W_Q": [[1]], "W_K": [[1]], "W_V": [[1]],
                                "divisor": "sqrt(3)"}))
    common = ["--spec", str(spec), "--sink", "1/2", "--alibi", "16", "--head", "0",
              "--digits", "6"]
    assert main(["backward", *common, "--d-out", "1;0"]) == 0
    back, _ = capsys.readouterr()
    assert main(["scores", *common]) == 0
    fwd, _ = capsys.readouterr()
    for line in ("1      0.326358  0.371576  0.302066", "2      0.156939  0.318290  0.524771"):
        assert line in back and line in fwd      # backward's P table, forward's shares table
    _, _, _, dQ = mp_backward(Q1, K1, V1, DO1, sink=F(1, 2))
    dq_table = back.split("dQ = scale dS K")[1].split("the scale is")[0]
    assert f"1      {mp_round(dQ[0][0], 6)}" in dq_table


# --------------------------------------------------------------------------- every composition
NUMBERS = [F(-2), F(-1), F(-1, 2), F(0), F(1, 3), F(1, 2), F(1), F(3, 2), F(2)]
OFFSETS = ["0", "0", "1/2", "-1", "1/3", "5/2", "-inf"]


@st.composite
def calls(draw):
    """A small call with every modifier the gradients take.

    Half the draws are *hard*: an irrational scale, an irrational ALiBi slope and a sink or
    an additive mask, so that a row's logits need three or more generators (the case whose
    balls once read two); the other half draw every modifier independently."""
    hard = draw(st.booleans())
    hq = draw(st.sampled_from([1, 1, 2, 4]))
    hkv = draw(st.sampled_from([h for h in (1, 2) if hq % h == 0]))
    L, S = draw(st.integers(1, 3)), draw(st.integers(2 if hard else 1, 4))
    E, Ev = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    num = st.sampled_from(NUMBERS)

    def array(*shape):
        return draw(st.lists(st.lists(st.lists(num, min_size=shape[2], max_size=shape[2]),
                                      min_size=shape[1], max_size=shape[1]),
                             min_size=shape[0], max_size=shape[0]))
    q, k, v, dO = array(hq, L, E), array(hkv, S, E), array(hkv, S, Ev), array(hq, L, Ev)
    scale = draw(st.sampled_from(["1/sqrt(3)", "1/sqrt(5)", "1/sqrt(6)"] if hard else
                                 ["default", "1/sqrt(3)", "1/sqrt(8)", "1/sqrt(2)", "none",
                                  "1/2"]))
    n_heads = draw(st.sampled_from([12, 16, 24, 32] if hard else
                                   [None, 2, 8, 12, 16, 24, 32]))
    alibi, head = None, 0
    if n_heads is not None and n_heads >= hq:
        alibi = Alibi(n_heads, draw(st.sampled_from(["relative", "absolute", "symmetric"])))
        irrational = [h for h in range(n_heads - hq + 1)
                      if not isinstance(alibi_slopes(n_heads)[h], Fraction)]
        pick = irrational and (hard or draw(st.booleans()))
        head = draw(st.sampled_from(irrational) if pick else st.integers(0, n_heads - hq))
    window = draw(st.none() | st.tuples(st.sampled_from([None, 0, 1]),
                                        st.sampled_from([None, 0, 1])))
    sink = draw(st.none() | st.sampled_from([F(0), F(1, 2), F(-1), F(2, 3)]))
    mask = kind = None
    if draw(st.booleans()) or (hard and sink is None):
        kind = draw(st.sampled_from(["additive"] if hard and sink is None else
                                    ["additive", "additive", "bool_keep"]))
        entry = st.sampled_from(OFFSETS) if kind == "additive" else st.booleans()
        mask = draw(st.lists(st.lists(entry, min_size=S, max_size=S), min_size=L, max_size=L))
    policy = dict(scale=scale, causal=draw(st.booleans()),
                  alignment=draw(st.sampled_from(["top_left", "bottom_right"])),
                  window=window, empty_row=draw(st.sampled_from(["zero", "uniform", "nan"])),
                  sink=sink, alibi=alibi, head=head)
    keep = None
    if draw(st.booleans()):
        policy["dropout"] = draw(st.sampled_from([F(1, 2), F(1, 4)]))
        keep = draw(st.lists(st.lists(st.lists(st.booleans(), min_size=S, max_size=S),
                                      min_size=L, max_size=L), min_size=hq, max_size=hq))
    return q, k, v, dO, mask, kind, keep, Policy(**policy)


def _check_call(q, k, v, dO, mask, kind, keep, policy):
    problem = Call(q, k, v, mask, mask_kind=kind or "bool_keep",
                                  dropout_keep=keep)
    ref = Reference(problem.with_policy(policy))
    ex = Reference(problem.with_policy(policy)).gradients([dO])
    hq, L, S, Ev = len(q), len(q[0]), len(k[0]), len(v[0][0])
    sink = policy.sink is not None
    for places in PLACES:
        for h in range(hq):
            block, start, _ = ex.locate("dQ", 0, h, 0, 0)
            P, O = block.decimals("P", places), block.decimals("O", places)
            for i in range(L):
                row = ref.row(0, h, i)
                want = [ref.share(0, h, i, j).decimal(places) for j in range(S)]
                got = [block.value("P", start + i, j).decimal(places) for j in range(S)]
                assert got == want, (places, h, i, block.terms.generator_text())
                assert P[start + i] == want, (places, h, i, "bulk")
                if sink:
                    assert block.value("P", start + i, S).decimal(places) == \
                        row.sink_share().decimal(places), (places, h, i, "sink")
                want_o = [ref.output(0, h, i, c).decimal(places) for c in range(Ev)]
                assert [block.value("O", start + i, c).decimal(places)
                        for c in range(Ev)] == want_o, (places, h, i, "O")
                assert O[start + i] == want_o, (places, h, i, "O bulk")
    for h in range(hq):          # and as values: the two algebras' == and < agree exactly
        block, start, _ = ex.locate("dQ", 0, h, 0, 0)
        for i in range(L):
            if ref.row(0, h, i).nan:
                continue
            for j in range(S):
                p, share = block.value("P", start + i, j), ref.share(0, h, i, j)
                assert p == share and share == p and hash(p) == hash(share), (h, i, j)
                other = ref.share(0, h, i, (j + 1) % S)
                assert (p < other, p > other) == (share < other, share > other), (h, i, j)
            for c in range(Ev):
                assert block.value("O", start + i, c) == ref.output(0, h, i, c), (h, i, c, "O")
    if hq == 1:                  # the public entry point builds the same call
        g = gradients(q[0], k[0], v[0], dO[0], policy,
                      None if mask is None else Mask(kind, mask),
                      dropout_keep=None if keep is None else keep[0])
        for places in PLACES:
            assert g.decimals("P", places) == ex.blocks[(0, 0)].decimals("P", places)
            assert g.decimals("O", places) == ex.blocks[(0, 0)].decimals("O", places)
            assert g.decimals("dQ", places) == ex.blocks[(0, 0)].decimals("dQ", places)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls())
def test_backward_shares_and_outputs_are_the_forward_ones(call):
    """The quick loop's version (under a second)."""
    _check_call(*call)


@pytest.mark.slow
@settings(max_examples=max(400, settings.default.max_examples), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(calls())
def test_backward_shares_and_outputs_are_the_forward_ones_widely(call):
    """400 calls (more under the ``fuzz`` profile): about 10 s."""
    _check_call(*call)


@pytest.mark.parametrize("n_heads, head, hq, scale, sink, kind, n_generators", [
    (16, 0, 1, "1/sqrt(3)", F(1, 2), None, 3),          # the issue: t, u, v
    (12, 8, 4, "1/sqrt(3)", F(1, 2), "additive", 3),    # 2^(-1/2)-type slopes of 12 heads
    (32, 0, 4, "1/sqrt(3)", F(-1), "additive", 5),      # 2^(3/4), 2^(-1/2), 2^(1/4), 1/2
    (24, 14, 4, "1/sqrt(3)", None, "additive", 5),      # past 16: 2^(1/4)-type slopes join
    (24, 16, 2, "1/sqrt(5)", F(0), None, 3),            # 2^(3/4)/2, 2^(1/4)/2: no rational part
    (32, 0, 4, "1/sqrt(2)", None, "additive", 4),       # the scale's atom is a slope's
    (32, 3, 4, "none", F(0), None, 4),
    (16, 1, 2, "1/sqrt(8)", None, "additive", 2),       # 1/sqrt(8) and 2^(-1/2): one atom
])
def test_many_generators_in_one_block(n_heads, head, hq, scale, sink, kind, n_generators):
    """Several ALiBi slopes in one GQA block: up to five generators, every one read."""
    q = [[[F(1), F(-1, 2)], [F(0), F(1)], [F(1, 2), F(1, 3)]] for _ in range(hq)]
    k = [[[F(1), F(0)], [F(-1), F(2)], [F(1, 2), F(1, 2)]]]
    v = [[[F(1)], [F(-2)], [F(3, 2)]]]
    dO = [[[F(1)], [F(-1)], [F(1, 2)]] for _ in range(hq)]
    mask = [["1/2", "0", "-1/3"], ["0", "-inf", "2"], ["1", "1/3", "0"]] if kind else None
    policy = Policy(scale=scale, sink=sink, alibi=Alibi(n_heads), head=head)
    problem = Call(q, k, v, mask, mask_kind=kind or "bool_keep")
    block = Reference(problem.with_policy(policy)).gradients([dO]).blocks[(0, 0)]
    assert len(block.terms.generators) == n_generators, block.terms.generator_text()
    _check_call(q, k, v, dO, mask, kind, None, policy)


def test_a_share_and_the_backwards_p_of_it_are_one_value():
    """Two equal exact values compare equal whichever algebra holds them; a scaled
    gradient entry (dQ carries 1/sqrt(2)) equals no share; kinds that cannot compare
    refuse instead of saying False."""
    call = Call([[1, 0], [0, 1]], [[1, 0], [0, 1], [1, 1]], [[1], [0], [2]],
                policy=Policy(scale="1"))
    ref = Reference(call)
    g = ref.gradients([[1], [1]])
    share, p = ref.share(0, 0, 0, 0), g.value("P", 0, 0, 0, 0)
    assert share.text() == p.text() == "exp(1)/(1 + 2*exp(1))"
    assert p.text(style="generators") == "(2*t)/(4*t + 2) where t = exp(1)"
    assert share == p and p == share and not share != p and share <= p and not share < p
    assert p > ref.share(0, 0, 0, 1) and ref.share(0, 0, 0, 1) < p
    assert ref.output(0, 0, 0, 0) == g.value("O", 0, 0, 0, 0) > g.value("O", 0, 0, 1, 0)
    scaled = Reference(call.with_policy(Policy())).gradients([[1], [1]]).value("dQ", 0, 0, 0, 0)
    assert scaled.scaled and scaled != share and (scaled < share) == (float(scaled) < float(share))
    with pytest.raises(InputError, match="^values must be of kinds that compare exactly "
                                         r"\(got ExpRatio and LogSumExp\); compare"):
        share == ref.lse(0, 0, 0)


@pytest.mark.parametrize("policy, additive", [
    (Policy(scale="none", alibi=Alibi(12), head=8, causal=True), False),
    (Policy(), True), (Policy(scale="1"), False), (Policy(sink=F(1, 3)), True),
    (Policy(alibi=Alibi(4), head=1), True), (Policy(causal=True, empty_row="uniform"), False),
])
def test_the_backward_prints_in_the_forwards_form(policy, additive):
    """P and O print exactly as the forward's shares and outputs; every gradient's exp(...)
    text, read by sympy, is its value (to 22 places)."""
    import sympy
    q = [[F(1), F(-1, 2)], [F(0), F(3, 4)], [F(2), F(1, 3)]]
    k = [[F(1, 2), F(1)], [F(-1), F(2, 3)], [F(0), F(-3, 2)]]
    v = [[F(1)], [F(-2)], [F(3, 2)]]
    mask = [["1/2", "0", "-1/3"], ["0", "-inf", "2"], ["1", "1/3", "0"]] if additive else None
    call = Call(q, k, v, mask, mask_kind="additive", policy=policy) if additive else \
        Call(q, k, v, policy=policy)
    ref = Reference(call)
    g = ref.gradients([[1], [F(-1, 2)], [2]])
    for i in range(3):
        assert [ref.share(0, 0, i, j).text() for j in range(3)] == \
            [g.value("P", 0, 0, i, j).text() for j in range(3)]
        assert ref.output(0, 0, i, 0).text() == g.value("O", 0, 0, i, 0).text()
    block = g.blocks[(0, 0)]
    for name in ("dQ", "dK", "dV", "dS", "D"):
        for value in (x for r in block.matrix(name) for x in (r if isinstance(r, list) else [r])):
            text = value.text()
            assert "where" not in text and "t" not in text.replace("sqrt", "")
            got = sympy.N(sympy.sympify(text.replace("^", "**")), 30)
            assert abs(got - sympy.Float(value.decimal(25), 30)) < sympy.Float("1e-22"), text
