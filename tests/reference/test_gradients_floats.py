"""The certified float64 enclosures behind bulk rounding (exactattn.reference.floats).

Each enclosure must contain the exact value (checked against arb balls at 256 bits), and
every decimal it decides must be the one the exact per-entry path gives; entries it cannot
decide (ties, values astride a boundary) are left to the exact path.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from exactattn.call.policy import Mask, Policy
from exactattn.gradients import gradients
from exactattn.reference.backward import certified
from exactattn.reference.floats import MAX_PLACES, enclose, round_balls

F = Fraction
NAMES = ("P", "dP", "D", "dS", "dQ", "dK", "dV", "O")


def call(seed, L=6, S=5, E=3, Ev=2, **policy):
    rng = np.random.default_rng(seed)

    def m(r, c):
        return [[F(int(x), 8) for x in row] for row in rng.integers(-24, 25, (r, c))]
    return m(L, E), m(S, E), m(S, Ev), m(L, Ev), Policy(**policy)


@pytest.mark.parametrize("seed, policy", [
    (0, {}), (1, {"causal": True}), (2, {"scale": "none", "causal": True,
                                         "alignment": "bottom_right"}),
    (3, {"scale": "1/3", "window": (1, 1)}), (4, {"causal": True, "empty_row": "uniform"}),
])
def test_enclosures_contain_the_exact_values_and_decide_the_same_decimals(seed, policy):
    Q, K, V, dO, pol = call(seed, **policy)
    mask = Mask("bool_keep", [[i != 2 for _ in range(5)] for i in range(6)]) \
        if pol.empty_row == "uniform" else None
    g = gradients(Q, K, V, dO, pol, mask)
    got = enclose(g)
    assert got is not None and sorted(got) == sorted(NAMES)
    from flint import arb
    exact = g.balls(256)
    for name in NAMES:
        mid, rad = got[name]
        assert mid.dtype == np.float64 and rad.dtype == np.float64 and (rad >= 0).all()
        for idx in np.ndindex(*mid.shape):
            b = exact[name][idx[0]] if name == "D" else exact[name][idx]
            assert arb(float(mid[idx]), float(rad[idx])).contains(b), (name, idx)
        want = [[v.decimal(6) for v in r] for r in g.matrix(name)] if name != "D" else \
            [v.decimal(6) for v in g.D]
        assert g.decimals(name, 6) == want


def test_nan_rows_and_the_arb_path_agree():
    Q, K, V, dO, _ = call(5)
    mask = Mask("bool_keep", [[i != 0] * 5 for i in range(6)])
    g = gradients(Q, K, V, dO, Policy(empty_row="nan"), mask)
    assert g.enclosures is not None
    assert g.decimals("dV", 4) == [["nan", "nan"]] * 5
    assert g.decimals("dQ", 4)[0] == ["nan"] * 3 and "nan" not in g.decimals("dQ", 4)[1]


def test_calls_with_offsets_a_sink_or_dropout_take_the_arb_path():
    Q, K, V, dO, _ = call(6)
    for pol, kw in ((Policy(sink=F(0)), {}),
                    (Policy(dropout=F(1, 2)), {"dropout_keep": [[True] * 5] * 6})):
        g = gradients(Q, K, V, dO, pol, **kw)
        assert g.enclosures is None
        balls = g.balls(64)["dQ"]
        grid = [[balls[i, c] for c in range(3)] for i in range(6)]
        assert g.decimals("dQ", 5) == certified(grid, 5, lambda i, c: g.value("dQ", i, c))
    additive = Mask("additive", [["1/2"] * 5] * 6)
    assert gradients(Q, K, V, dO, Policy(), additive).enclosures is None


def test_round_balls_decides_only_what_the_enclosure_proves():
    mid = np.array([0.12345, 0.123449, -0.00004, 2.5, 1e300, np.nan])
    rad = np.array([1e-20, 1e-20, 1e-20, 0.0, 0.0, 0.0])
    texts, undecided = round_balls(mid, rad, 4)
    # 0.12345 * 10^4 rounds to the boundary 1234.5 itself: left to the exact path
    assert texts.dtype == object and undecided.dtype == bool and undecided[0]
    assert texts[1] == "0.1234" and texts[2] == "0.0000" and texts[3] == "2.5000"
    assert undecided[4] and undecided[5] and texts[4] is None
    wide = round_balls(np.array([0.12344]), np.array([1e-5]), 4)
    assert wide[1].tolist() == [True]
    assert MAX_PLACES == 10


def test_a_float32_call_rounds_like_the_arb_path():
    rng = np.random.default_rng(0)
    arrs = [rng.standard_normal((24, 8)).astype(np.float32) for _ in range(4)]
    exact = [[[F(float(x)) for x in r] for r in a] for a in arrs]
    g = gradients(*exact, Policy(causal=True))
    assert g.enclosures is not None
    for name in ("dQ", "dK", "dV"):
        balls = g.balls(64)[name]
        grid = [[balls[i, c] for c in range(8)] for i in range(24)]
        assert g.decimals(name, 8) == certified(grid, 8, lambda i, c: g.value(name, i, c))
