"""verify's judge at once (``compare.decide`` on ``compare.enclosures`` of the balls): the entries it
clears are judged as the per-entry judge judges them, and every entry it cannot be sure of is
left to that judge.

The per-entry judge (``compare.judge``) is the reference here: each verify below runs twice,
once with ``decide`` clearing nothing, and the two reports must agree entry by entry.
"""

import math
from fractions import Fraction

import numpy as np
import pytest
from flint import arb

import exactattn.verify.check as check
import exactattn.verify.compare as compare
from exactattn.call import Call
from exactattn.numbers.formats import float_format, round_to_format, ulp_index, ulp_indices
from exactattn.verify.check import verify
from exactattn.verify.compare import enclosures

F32 = float_format("float32")


def _nothing(got, mid, rad, *args):       # every entry undecided: left to the judge
    none = np.zeros(np.shape(mid))
    return np.full(np.shape(mid), 3), mid, none.astype(np.int64), none, none


def cleared(got, balls, mags, fmt, tol, at_terms):
    """The entries ``decide`` clears on the balls' enclosures, exact magnitudes (the model
    check's bulk judge), with its counts."""
    status, _, ulps, rel, terms = compare.decide(got, *enclosures(balls), mags, fmt, tol,
                                                 at_terms, slack=0.0)
    return status == 0, ulps, rel, terms


@pytest.mark.parametrize("impl, dtype, shape, kw", [
    ("numpy", "float32", (1, 2, 24, 8), {}),
    ("numpy", "float32", (2, 1, 16, 4), {"is_causal": True}),
    ("numpy", "float16", (1, 1, 16, 8), {}),
    ("torch", "bfloat16", (1, 1, 12, 4), {}),
    ("numpy-naive", "float16", (1, 1, 20, 8), {}),        # fails: entries over the tolerance
    ("numpy", "float64", (1, 1, 8, 4), {}),               # nothing cleared at float64
    ("numpy", "float32", (1, 1, 12, 4), {"scale": 3.0}),  # a wrong scale read: failures
])
def test_the_report_is_the_per_entry_judge_s(monkeypatch, impl, dtype, shape, kw):
    if impl == "torch":
        pytest.importorskip("torch")
    rng = np.random.default_rng(sum(shape))
    q, k, v = (2 * rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    call = Call.from_sdpa(q, k, v, **kw)
    fast = verify(impl, call, dtype)
    monkeypatch.setattr(check, "decide", _nothing)
    slow = verify(impl, call, dtype)
    assert fast.passed == slow.passed
    for a, b in [(fast.found, slow.found)] + [(p.found, r.found) for p, r in
                                             zip(fast.probes, slow.probes)]:
        assert [(e.index, repr(e.got), e.rounded, e.ulps, e.status) for e in a.kept] == \
            [(e.index, repr(e.got), e.rounded, e.ulps, e.status) for e in b.kept]
        assert (a.count, a.over, a.hard, a.histogram, a.off_format, a.undecided) == \
            (b.count, b.over, b.hard, b.histogram, b.off_format, b.undecided)
        for x, y in zip(a.kept, b.kept):     # the slow path knows rel to 1/1024 of itself;
            for m, n in ((x.rel, y.rel), (x.terms_ulps, y.terms_ulps)):   # None: a rough ok
                assert m == n or (m is None and x.status == "ok" and x.ulps == y.ulps) or \
                    math.isclose(m, n, rel_tol=2e-3), (x, y)


def _one(got: float, exact, *, rounded=None, mag=None, tol=4, fmt=F32):
    ball = exact if isinstance(exact, arb) else arb(exact)
    r = round_to_format(Fraction(float(ball.mid())), fmt) if rounded is None else rounded
    clear, ulps, rel, terms = cleared(np.array([got]), np.array([ball], dtype=object),
                                      np.array([abs(float(ball.mid())) if mag is None
                                                else mag]), fmt, tol, False)
    return bool(clear[0]), int(ulps[0]), float(rel[0]), float(terms[0])


def test_an_exact_output_is_cleared_with_no_error():
    assert _one(0.5, arb(0.5)) == (True, 0, 0.0, 0.0)


def test_a_plain_entry_is_cleared_with_the_judge_s_counts():
    third = arb(1) / 3
    got = float(np.float32(1 / 3)) + 2 ** -25        # one float32 ULP (2^-25 at 1/3) away
    clear, ulps, rel, terms = _one(got, third)
    assert clear and ulps == ulp_index(got, "float32") - ulp_index(round_to_format(
        Fraction(1, 3), "float32"), "float32") == 1
    assert math.isclose(rel, abs(got - 1 / 3) * 3, rel_tol=1e-9)


@pytest.mark.parametrize("case", ["tie", "over", "off-format", "nan", "zero",
                                  "wide ball"])
def test_what_is_left_to_the_per_entry_judge(case):
    one = float(np.float32(1.0))
    step = 2.0 ** -23
    if case == "tie":        # a tight ball still holding the midpoint of two floats
        mid = arb(one + step / 2, step * 2.0 ** -30)
        assert not _one(one + step, mid, rounded=one)[0]
    elif case == "over":
        assert not _one(one + 9 * step, arb(1) + arb(1) / 10 ** 12, tol=4)[0]
    elif case == "off-format":  # not a float32: the judge rounds it and says so
        assert not _one(1 + 2.0 ** -40, arb(1) + arb(1) / 10 ** 9)[0]
    elif case == "nan":
        assert not _one(math.nan, arb(1) / 3)[0]
    elif case == "zero":       # the exact value is 0: relative error infinite
        assert not _one(2.0 ** -30, arb(0))[0]
    elif case == "wide ball":  # the error is not known to 2^-20 of itself from this ball
        assert not _one(one + step, arb(1, step))[0]


def test_float64_is_never_cleared():
    clear = cleared(np.array([1 / 3]), np.array([arb(1) / 3]), np.array([1 / 3]),
                    float_format("float64"), 4, False)[0]
    assert clear.tolist() == [False]


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_ulp_indices_are_ulp_index(dtype):
    fmt = float_format(dtype)
    rng = np.random.default_rng(7)
    x = rng.standard_normal(400) * 10.0 ** rng.integers(-8, 8, 400)
    x = np.array([round_to_format(Fraction(float(v)), fmt) for v in x] +
                 [0.0, -0.0, 2.0 ** (fmt.emin - fmt.precision + 1), -(2.0 ** fmt.emin), 0.1,
                  math.inf, math.nan])
    idx, valid = ulp_indices(x, fmt)
    for v, i, ok in zip(x.tolist(), idx.tolist(), valid.tolist()):
        finite_in = math.isfinite(v) and round_to_format(Fraction(v), fmt) == v
        assert ok == finite_in, v
        if ok:
            assert i == ulp_index(v, fmt), v


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("causal", [False, True])
def test_the_backward_report_is_the_per_entry_judge_s(monkeypatch, dtype, causal):
    import exactattn.verify.backward as backward
    from exactattn.call.policy import Policy
    call = Call.random(12, 4, seed=5).with_policy(Policy(causal=causal))
    fast = backward.verify_backward("numpy", call, dtype)
    # the backward judges with check.judge_entries, on compare.decide
    monkeypatch.setattr(check, "decide", _nothing)
    slow = backward.verify_backward("numpy", call, dtype)
    assert fast.passed == slow.passed
    a, b = fast.found, slow.found
    assert [(e.index, repr(e.got), e.rounded, e.ulps, e.status) for e in a.kept] == \
        [(e.index, repr(e.got), e.rounded, e.ulps, e.status) for e in b.kept]
    assert (a.count, a.over, a.histogram) == (b.count, b.over, b.histogram)
    for x, y in zip(a.kept, b.kept):
        assert x.rel == y.rel or math.isclose(x.rel, y.rel, rel_tol=2e-3), (x, y)


def test_at_the_terms_an_entry_over_the_ulp_count_is_cleared_with_a_margin():
    # an output of 2^-20 whose terms are of size 1: 64 float32 ULPs off at its own size,
    # a fraction of one ULP at the size of its terms
    exact = arb(2) ** -20 + arb(1) / 10 ** 12
    got = float(np.float32(2.0 ** -20)) + 64 * 2.0 ** -43
    args = (np.array([got]), np.array([exact], dtype=object), np.array([1.0]), F32, 4)
    clear, ulps, _, terms = cleared(*args, False)[:4]
    assert not clear[0] and int(ulps[0]) > 4
    clear, _, _, terms = cleared(*args, True)[:4]
    assert clear[0] and terms[0] < 1
    wide = (args[0], args[1], np.array([2.0 ** -20]), F32, 4)   # terms: itself
    assert not cleared(*wide, True)[0][0]


def test_the_worst_few_are_built_without_building_every_entry_judged_at_once():
    from exactattn.verify.compare import Comparison, Judgement, failures_first
    built = []

    def make(k):
        built.append(k)
        return Judgement("ok", int(ulps[k]), 0.0, float(ulps[k]))
    for rank in (None, failures_first):
        ulps = np.array([3, 9, 1, 9, 4])
        c = Comparison(None) if rank is None else Comparison(None, rank=rank)
        c.add(Judgement("over", 2, 0.1, 7.0))
        c.add(Judgement("hard", None))
        c.add_many(np.arange(2, 7), ulps, np.zeros(5), ulps.astype(float), make)
        built.clear()
        top = c.top(3)
        assert len(built) == 3 and [(e.status, e.ulps) for e in c.failures] == [("over", 2), ("hard", None)]
        assert [(e.status, e.ulps) for e in top] == [(e.status, e.ulps) for e in c.worst[:3]]
        assert [(e.status, e.ulps) for e in top] == (
            [("hard", None), ("ok", 9), ("ok", 9)] if rank is None else
            [("hard", None), ("over", 2), ("ok", 9)])


def test_a_zero_decided_in_bulk_carries_the_exact_value_s_sign():
    """Both ends of an enclosure rounding to a zero decide the rounded value only when the
    enclosure also decides its sign: an exact 0 is +0, a tiny negative value -0, and a ball
    around 0 is left to the per-entry judge (it once came back as -0.0 for a positive value)."""
    f = float_format("float16")
    mid = np.array([1e-12, -1e-12, 0.0, 1e-12])
    rad = np.array([2e-13, 2e-13, 0.0, 2e-12])
    status, rounded, *_ = compare.decide(np.zeros(4), mid, rad, np.full(4, 1.5), f, 2)
    assert status.tolist() == [4, 4, 0, 3]
    assert [math.copysign(1.0, r) for r in rounded[:3]] == [1.0, -1.0, 1.0]
