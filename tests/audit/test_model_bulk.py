"""``model check``'s float64 steps against the exact path they stand in for: the certified
decimals decided from enclosures, the drift's correct rounding, and a group judged in bulk
(verify's decide, the judge for the rest) beside the judge and certify entry by entry."""

import math
from fractions import Fraction
from functools import partial

import numpy as np

from exactattn.models.check import PREC, judge_group, projection_drift, significant
from exactattn.numbers.digits import certify, round_fraction, working_precision
from exactattn.numbers.formats import float_format, round_enclosed, round_to_format
from exactattn.numbers.softmax import SoftmaxRow
from exactattn.reference.floats import round_balls
from exactattn.verify.compare import judge

F32 = float_format("float32")


def test_decimals_decided_in_float64_are_the_exact_rounding_and_boundaries_stay_open():
    # the decimals judge_group takes from enclosures (reference.floats.round_balls, the one
    # float64 decimal rounding): what they decide is the exact rounding, a boundary stays open
    rng = np.random.default_rng(0)
    edges = [(2 * k + 1) / 2e4 for k in range(-300, 300)]           # x.xxxx5: a boundary
    xs = np.array(edges + [np.nextafter(e, s) for e in edges for s in (-1, 1)] +
                  list(rng.standard_normal(2000) * 10.0 ** rng.integers(-6, 3, 2000)) +
                  [0.0, -0.0, 1e-300, -7.5e-5, 2.0 ** 40])
    for places in (0, 4, 9, 16):        # 16: past 10^15 too, each decided one exact
        texts, undecided = round_balls(xs, 0 * xs, places)
        for x, text, open_ in zip(xs.tolist(), texts.tolist(), undecided.tolist()):
            if not open_:
                assert text == round_fraction(Fraction(x), places), (x, places)
        assert round_balls(np.array(edges), 0 * np.array(edges), 4)[1].all()
    # an interval across a boundary is open; one inside a cell is decided
    assert round_balls(np.array([0.12345]), np.array([1e-5]), 4)[1][0]
    assert round_balls(np.array([0.123445]), np.array([4e-6]), 4)[0][0] == "0.1234"


def test_drift_rounds_every_projection_correctly_ties_included():
    den = 2 ** 40
    base = np.float32(np.random.default_rng(1).standard_normal(200)).astype(np.float64)
    up = np.nextafter(base.astype(np.float32), np.float32(np.inf)).astype(np.float64)
    nums = []
    for a, b in zip(base.tolist(), up.tolist()):
        mid = (Fraction(a) + Fraction(b)) / 2 * den                   # a float32 tie ...
        nums += [int(mid), int(mid) + 1, int(mid) - 1] if mid.denominator == 1 else [int(mid)]
    exact = np.array([Fraction(v, den) for v in nums], dtype=object).reshape(1, -1)
    got = np.array([round_to_format(q, F32) for q in exact[0]], dtype=np.float32)
    assert projection_drift(got, exact, F32).max_ulps == 0
    moved = got.copy()
    moved[0] = np.nextafter(moved[0], np.float32(np.inf))
    d = projection_drift(moved, exact, F32)
    assert (d.max_ulps, d.count - d.histogram[0], d.count) == (1, 1, len(nums))


def _per_entry(got, balls, mags, exact, budget, places):
    """The group as the judge and certify give it entry by entry: (ulps, terms, rel, cell,
    over, hard, misses, decimals)."""
    found = []
    for cell in np.ndindex(got.shape):
        g, ball, value = float(got[cell]), balls[cell], partial(exact, *cell)
        j = judge(g, round_enclosed(ball, F32, PREC, value, 2 * PREC)[0], ball,
                  float(mags[cell]), F32, value, budget)
        with working_precision(PREC):
            dec = certify(lambda p: ball if p <= PREC else value().ball(p), places)
        printed = f"{g:.{places}f}"
        printed = printed[1:] if printed.startswith("-") and not printed.strip("-0.") else printed
        found.append((cell, j, dec, not math.isfinite(g) or printed != dec))
    live = [(c, j) for c, j, _, _ in found if j.status != "hard"]
    worst = min(found, key=lambda e: (e[1].status != "hard", -(e[1].ulps or 0),
                                      -(e[1].terms_ulps or 0)))[0]
    return (max((j.ulps for _, j in live if j.ulps is not None), default=0),
            max((j.terms_ulps for _, j in live if j.terms_ulps is not None), default=0.0),
            max((j.rel for _, j in live if j.rel is not None), default=0.0), worst,
            sum(j.status == "over" for _, j, _, _ in found),
            sum(j.status == "hard" for _, j, _, _ in found),
            sum(m for *_, m in found), {c: d for c, _, d, _ in found})


def test_a_group_judged_in_bulk_is_the_group_judged_entry_by_entry():
    rng = np.random.default_rng(2)
    rows = [SoftmaxRow([Fraction(int(s), 4) for s in rng.integers(-12, 12, 12)], None)
            for _ in range(12)]
    shares = [[r.share(j) for j in range(12)] for r in rows]
    with working_precision(PREC):
        balls = np.array([[s.ball(PREC) for s in r] for r in shares], dtype=object)
    exact = np.array([[round_to_format(Fraction(float(b.mid())), F32) for b in r]
                      for r in balls])
    steps = rng.integers(-4, 5, exact.shape)
    got = exact.astype(np.float32)
    for _ in range(4):        # up to 4 float32 steps away, both ways
        got = np.where(steps > 0, np.nextafter(got, np.float32(1)), got)
        got = np.where(steps < 0, np.nextafter(got, np.float32(-1)), got)
        steps = steps - np.sign(steps)
    base = got.astype(np.float64)
    base[1, 1], base[2, 2] = exact[1, 1] * (1 + 1e-3), exact[3, 3]    # over the budget
    base[4, 4] = float(np.float32(round(exact[4, 4], 4) + 5e-5))     # near a 4-place edge
    mags = np.ones(base.shape)
    ties = np.nextafter(exact.astype(np.float32), np.float32(1)).astype(np.float64)
    for budget, places, nan in ((1, 4, None), (3, 4, False), (0, 2, False), (40, 6, True)):
        if nan:
            base[0, 0] = math.nan                                     # a hard failure
        got = ties if nan is None else base      # first: every entry 1 ULP off, terms rank
        w = judge_group(got, balls, mags, lambda i, j: shares[i][j], F32, budget, places, True)
        ulps, terms, rel, cell, over, hard, misses, decimals = \
            _per_entry(got, balls, mags, lambda i, j: shares[i][j], budget, places)
        assert (w.max_ulps, w.max_terms, w.max_rel, w.worst[0].index, w.over, w.hard,
                w.misses) == (ulps, terms, rel, cell, over, hard, misses)
        assert w.decimals == decimals and w.count == got.size and w.hard == bool(nan)
        assert judge_group(got, balls, mags, lambda i, j: shares[i][j], F32, budget, places,
                       False).misses == misses
        assert w.worst[0].got == got[cell] or math.isnan(got[cell])
        assert w.worst_exact == significant(shares[cell[0]][cell[1]], w.worst[0].got)
