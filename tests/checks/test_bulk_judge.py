"""The assertion's bulk judge (float64 enclosures with a proved bound) against the exact path.

Every case is judged both ways: :func:`verify_outputs` with ``floats`` (the bulk judge, the exact path only
for the entries it leaves open) and :func:`verify_outputs` on the exact call.  Status, ULP
count and the correctly rounded exact value must agree on every entry; the errors agree to
three digits wherever the bulk judge measured them (an entry it passed on the ULP count with
an error below float64's resolution reports None).
"""

import numpy as np
import pytest

from exactattn.call import Call
from exactattn.call.inputs import sdpa_floats
from exactattn.reference.bound import enclose_outputs
from exactattn.verify.check import verify_outputs


def _both(out, q, k, v, **kw):
    make = lambda: Call.from_sdpa(q, k, v, **kw)   # noqa: E731
    floats = sdpa_floats(q, k, v, **kw)
    assert floats is not None
    bulk = verify_outputs(make, out, floats=floats, name="actual")
    exact = verify_outputs(make(), out, name="actual")
    assert len(bulk.entries) == len(exact.entries)
    for x, y in zip(bulk.entries, exact.entries):
        assert (x.index, x.status, x.ulps, x.rounded) == (y.index, y.status, y.ulps, y.rounded)
        if x.rel is None and x.status == "ok":
            continue
        for a, b in ((x.rel, y.rel), (x.terms_ulps, y.terms_ulps)):
            assert (a is None) == (b is None)
            assert a is None or a == b or abs(a - b) <= 2e-3 * abs(b)
    assert bulk.passed == exact.passed
    assert bulk.summary()["max_ulps"] == exact.summary()["max_ulps"]
    assert bulk.summary()["over"] == exact.summary()["over"]
    return bulk


CASES = [
    dict(is_causal=True),
    dict(),
    dict(scale=0.2),
    dict(sink="1/2"),
    dict(is_causal=True, alignment="bottom_right"),
    dict(window=(3, 0)),
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("kw", CASES)
def test_bulk_and_exact_agree(dtype, kw):
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((1, 2, 12, 8)).astype(dtype) for _ in range(3))
    mid, _, _, _ = enclose_outputs(*sdpa_floats(q, k, v, **kw)[:6])
    out = mid.astype(dtype)          # about correctly rounded: passes
    report = _both(out, q, k, v, **kw)
    assert report.passed
    wrong = out.copy()
    wrong[0, 1, 5, 3] = 2 * wrong[0, 1, 5, 3] + 1     # one entry off: fails there
    bad = _both(wrong, q, k, v, **kw)
    assert not bad.passed
    assert [e.index for e in bad.found.failures] == [(0, 1, 5, 3)]
    assert report.entries[0].index == (0, 0, 0, 0)


def test_bulk_gqa_and_masks_agree():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 4, 10, 8)).astype(np.float32)
    k, v = (rng.standard_normal((1, 2, 10, 8)).astype(np.float32) for _ in range(2))
    keep = rng.random((10, 10)) > 0.3
    keep[:, 0] = True
    offsets = rng.standard_normal((10, 10))
    for kw in (dict(enable_gqa=True), dict(enable_gqa=True, attn_mask=keep),
               dict(enable_gqa=True, attn_mask=offsets)):
        ref = Call.from_sdpa(q, k, v, **kw)
        from exactattn.reference.reference import Reference
        rounded = Reference(ref).rounded_outputs("float32")[0]
        _both(rounded.astype(np.float32), q, k, v, **kw)


def test_edge_of_tolerance():
    """Outputs placed exactly at the tolerance and one ULP past it: ok, then over."""
    rng = np.random.default_rng(11)
    q, k, v = (rng.standard_normal((1, 1, 6, 4)).astype(np.float32) for _ in range(3))
    make = lambda: Call.from_sdpa(q, k, v)   # noqa: E731
    exact = verify_outputs(make(), np.zeros((1, 1, 6, 4), np.float32), max_ulps=0)
    rounded = np.array([[[[e.rounded for e in exact.entries]]]]).reshape(1, 1, 6, 4)
    at = np.nextafter(rounded.astype(np.float32), np.float32(np.inf))
    for extra in range(2):
        out = at.copy()
        for _ in range(extra):
            out = np.nextafter(out, np.float32(np.inf))
        bulk = verify_outputs(make, out, floats=sdpa_floats(q, k, v), max_ulps=1, name="actual")
        ex = verify_outputs(make(), out, max_ulps=1, name="actual")
        assert [e.status for e in bulk.entries] == [e.status for e in ex.entries]
        assert [e.ulps for e in bulk.entries] == [e.ulps for e in ex.entries] == [1 + extra] * 24


def test_inputs_the_bulk_judge_leaves_to_the_exact_reading():
    q = np.zeros((2, 1))
    assert sdpa_floats(q, q, np.array([[1.0], [np.inf]])) is None     # named by Call
    assert sdpa_floats([[0.0]], [[0.0]], [[1]]) is None
    assert sdpa_floats(q, q, q, softcap="30") is None


@pytest.mark.parametrize("size, kw", [
    (1.0, dict()), (4.0, dict(is_causal=True)), (3.0, dict(sink="5/2")),
    (2.0, dict(scale=1.5, window=(2, 1))), (1.0, dict(attn_mask="offsets")),
    (0.001, dict()),
])
def test_enclosures_hold_the_exact_outputs(size, kw):
    """The proved radius holds every exact output (computed from its definition in arb),
    on large logits (up to about 50), a sink, offsets, and values near zero."""
    from flint import arb
    from exactattn.reference.reference import Reference
    rng = np.random.default_rng(11)
    q, k, v = (size * rng.standard_normal((1, 2, 9, 6)) for _ in range(3))
    if kw.get("attn_mask") == "offsets":
        kw = dict(attn_mask=rng.standard_normal((9, 9)) * 3)
    mid, rad, _, _ = enclose_outputs(*sdpa_floats(q, k, v, **kw)[:6])
    ref = Reference(Call.from_sdpa(q, k, v, **kw))
    worst = 0.0
    for idx in np.ndindex(mid.shape):
        _, ball = Reference.round_exact(ref.output(*idx), "float64", 160)
        err = float(abs(ball - arb(float(mid[idx]))).upper())
        assert err <= rad[idx], (idx, err, rad[idx])
        worst = max(worst, err / rad[idx]) if rad[idx] else worst
    assert 0 < worst <= 1


def _same_entries(xs, ys):
    assert len(xs) == len(ys)
    for x, y in zip(xs, ys):
        assert (x.index, x.status, x.ulps, x.rounded, x.got) == \
            (y.index, y.status, y.ulps, y.rounded, y.got)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("policy", [dict(), dict(causal=True), dict(sink="1/2"),
                                    dict(causal=True, window=(3, 0)), dict(gqa="interleave")])
def test_verify_bulk_and_exact_agree_with_probes(monkeypatch, dtype, policy):
    """verify's outputs and every probe's entries: the bulk judge and the exact path agree."""
    from exactattn.call.policy import Policy
    from exactattn.verify import check
    heads = 2 if policy.get("gqa") else 1
    call = Call.random(10, 4, seed=5).with_policy(Policy(**policy))
    if heads == 2:
        rng = np.random.default_rng(5)
        q = rng.standard_normal((1, 4, 10, 4))
        k, v = (rng.standard_normal((1, 2, 10, 4)) for _ in range(2))
        call = Call(q, k, v, floats="exact", policy=Policy(**policy))
    with monkeypatch.context() as m:      # the bulk run reads no exact table
        m.setattr(check.Reference, "rounded_outputs", None)
        bulk = check.verify("numpy", call, dtype)
    assert bulk.probes and all(p.found.count for p in bulk.probes)
    monkeypatch.setattr(check, "bulk_report", lambda *a, **k: None)
    exact = check.verify("numpy", call, dtype)
    _same_entries(bulk.entries, exact.entries)
    assert [p.probe.label for p in bulk.probes] == [p.probe.label for p in exact.probes]
    for x, y in zip(bulk.probes, exact.probes):
        _same_entries(x.found.kept, y.found.kept)
    assert bulk.passed == exact.passed and bulk.max_ulps == exact.max_ulps
