"""Certified float64 enclosures of a plain call's gradients, to round whole matrices at once.

The exponentials come from the forward pass's integer enclosures
(:func:`exactattn.numbers.bulk.block_bounds`: ``lo / 2^F <= exp(x_ij - max_k x_ik) <=
hi / 2^F`` and exact row sums); everything after that is midpoint-radius
interval arithmetic in numpy float64 (Rump 1999, "Fast and parallel interval
arithmetic", BIT 39), where every radius bounds the error of the midpoint
*including* the rounding of each float operation:

* a product or sum of floats is off by at most ``u = 2^-53`` of its size
  (round to nearest), plus ``2^-1074`` below the normal range;
* a matrix product ``A B`` of length n is off by at most ``gamma_n |A| |B|``
  with ``gamma_n = n u / (1 - n u)``, in any summation order, FMA or not
  (Higham 2002, sec. 3.5);
* a radius is itself a sum of non-negative float terms, computed in round to
  nearest, so it is multiplied by ``1 + 2^-30`` (covering the ``(1 - u)^-(n +
  10)`` it may have lost for n below 2^22) and given ``2^-1000`` of absolute
  slack (covering underflow).

:func:`round_balls` then decides ``round(value * 10^places)`` for every entry
whose enclosure lies strictly inside one rounding interval, comparing floats
exactly (``x - rint(x)`` is exact by Sterbenz's lemma); the rest are handed
back to the caller's exact path, so every printed digit is the correctly
rounded one and no float becomes a value.

Used for calls without offsets, sink or dropout whose inputs fit int64 over a
common denominator (what :func:`~exactattn.numbers.bulk.block_bounds` takes);
:func:`enclose` returns None for any other call and the ``arb`` path runs.

>>> from exactattn.call.policy import Policy
>>> from exactattn.gradients import gradients
>>> g = gradients([[0], [1]], [[0], [1]], [[1], [3]], [[1], [1]], Policy(scale="none"))
>>> mid, rad = enclose(g)["dV"]
>>> round_balls(mid, rad, 4)[0].tolist()
[['0.7689'], ['1.2311']]
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np


#: the most places decided from float64 enclosures (past this the arb path runs)
MAX_PLACES = 10
_U = 2.0 ** -53
_GROW = 1.0 + 2.0 ** -30
_TINY = 2.0 ** -1000
_DOWN, _UP = 1.0 - 2.0 ** -48, 1.0 + 2.0 ** -48


def _up(x):
    """A radius expression computed in round to nearest, made an upper bound."""
    return x * _GROW + _TINY


def _exact(rows, common=None):
    """Floats within ``4u`` of a matrix of ``Fraction`` (plus ``2^-1074``), the radius
    :func:`_matmul` assumes of its right factor: the integers over one common denominator
    (``common``, from :func:`exactattn.numbers.exact.common_denominator`) divided in float64
    (two roundings and a division), or each entry's nearest float when they do not fit (the
    correctly rounded quotient of its numerator by its denominator, as ``float()`` gives)."""
    from ..numbers.bulk import int_rows
    if common is not None and common[1] < 2 ** 1000:
        ints, den = common
        a = int_rows(ints)
        if a.dtype != object:
            return a.astype(np.float64) / float(den)
    return np.array([[x.numerator / x.denominator for x in r] for r in rows], dtype=np.float64)


def _matmul(a, b):
    """(mid, rad) of A B for (mid, rad) A (r x n) and B (n x c) given by its nearest floats.

    With ``|B - Bm| <= c |Bm| + tau`` (c = 4u, tau = 2^-1074) and ``gamma = (n + 2) u``::

        |A B - fl(Am Bm)| <= ((1 + c) Ar + (c + gamma) |Am|) |Bm| + tau rowsum(|Am| + Ar)

    one product for the midpoint and one for the radius.
    """
    am, ar = a
    n, c = am.shape[1], 4 * _U
    aa = np.abs(am)
    m = am @ b
    r = ((1 + c) * ar + (c + (n + 2) * _U) * aa) @ np.abs(b)
    r += 2.0 ** -1074 * (aa.sum(axis=1, keepdims=True) + ar.sum(axis=1, keepdims=True))
    return m, _up(r)


def _mul(a, b):
    (am, ar), (bm, br) = a, b
    m = am * bm
    return m, _up(np.abs(am) * br + ar * np.abs(bm) + ar * br + (2 * _U) * np.abs(m))


def _sub(a, b):
    m = a[0] - b[0]
    return m, _up(a[1] + b[1] + (2 * _U) * np.abs(m))


def _row_sum(a):
    n = a[0].shape[1]
    m = a[0].sum(axis=1, keepdims=True)
    return m, _up(a[1].sum(axis=1, keepdims=True) +
                  ((n + 2) * _U) * np.abs(a[0]).sum(axis=1, keepdims=True))


def _scalar(q: Fraction, D: Fraction | None):
    """(mid, rad) of ``q / sqrt(D)`` (``q`` when D is None) from an arb enclosure."""
    from flint import arb
    from ..numbers.digits import arb_to_fraction, working_precision
    from ..numbers.reals import atom_ball
    from ..numbers.exact import fmpq_of
    with working_precision(128):
        b = arb(fmpq_of(q)) * (1 if D is None else atom_ball(D))
        m = float(arb_to_fraction(b.mid()))
        r = float(arb_to_fraction(b.rad()))
    return np.float64(m), np.float64(_up(r + 2 * _U * abs(m)))


def enclose(g) -> dict | None:
    """``{name: (mid, rad)}`` numpy float64 enclosures of every matrix of
    :class:`~exactattn.reference.backward.Gradients` ``g`` (``D`` as a vector), or None
    when the call has offsets, a sink or dropout, or inputs past int64."""
    from ..numbers.bulk import block_bounds, int_rows
    from ..numbers.exact import common_denominator
    if not g.plain or g.R == 0 or g.S == 0:
        return None
    keep = g.keep
    got = [common_denominator(m) for m in (g.queries, g.keys)]
    if any(x is None for x in got):
        return None
    (qi, qd), (ki, kd) = got
    q, k = int_rows(qi), int_rows(ki)
    commons = {"Q": got[0], "K": got[1], "V": None, "dO": None}
    b = block_bounds(q, qd, k, kd, g.divisor_squared, keep,
                     np.zeros((g.S, 1), dtype=np.int64), 1)
    if b is None:
        return None
    # shares: P in [lo / den_hi, hi / den_lo], every quantity non-negative
    z_lo = np.array([float(x) for x in b.den_lo.ravel().tolist()])[:, None]
    z_hi = np.array([float(x) for x in b.den_hi.ravel().tolist()])[:, None]
    p_lo = np.maximum(b.lo.astype(np.float64) / z_hi * _DOWN - _TINY, 0.0)
    p_hi = b.hi.astype(np.float64) / z_lo * _UP + _TINY
    p_hi[~keep] = 0.0
    p_lo[~keep] = 0.0
    kinds = g.kinds
    for i, kind in enumerate(kinds):
        if kind != "ok":
            p_lo[i] = p_hi[i] = (1.0 / g.S) if kind == "uniform" else 0.0
    pm = (p_lo + p_hi) / 2
    P = (pm, _up(np.maximum(p_hi - pm, pm - p_lo) + (2 * _U) * pm))
    Q, K, V, dO = (_exact(m, commons[k]) for k, m in
                   (("Q", g.queries), ("K", g.keys), ("V", g.values), ("dO", g.d_out)))
    got = g.compose(_Intervals, P, _matmul((dO, np.abs(dO) * (4 * _U) + 2.0 ** -1074), V.T),
                  Q, K, V, dO, ok=g._ok, s=_scalar(g.scale_rational, g.irrational_scale))
    got["D"] = tuple(a[:, 0] for a in got["D"])
    return got


class _Intervals:
    """:func:`~exactattn.reference.backward.compose` over ``(mid, rad)`` pairs (a product's
    right factor: floats within ``4u`` of exact)."""
    mul, sub, matmul = staticmethod(_mul), staticmethod(_sub), staticmethod(_matmul)
    dot = staticmethod(lambda P, dP: _row_sum(_mul(P, dP)))
    T = staticmethod(lambda a: (a[0].T, a[1].T))
    where = staticmethod(lambda ok, a: (np.where(ok, a[0], 0.0), np.where(ok, a[1], 0.0)))


def round_balls(mid, rad, places: int):
    """``(texts, undecided)``: every entry of ``mid +/- rad`` correctly rounded to ``places``
    where the enclosure decides it (numpy object array of strings), and a boolean array of
    the entries it leaves undecided (their texts are None)."""
    from ..numbers.bulk import decimal_strings
    sc = float(10 ** places)
    with np.errstate(all="ignore"):
        x = mid * sc
        w = _up(rad * sc + (2 * _U) * np.abs(x))
        k = np.rint(x)
        decided = np.isfinite(x) & np.isfinite(w) & (np.abs(x) < 2.0 ** 50) & \
            (np.abs(x - k) + w <= 0.5 - 2.0 ** -30)
    texts = decimal_strings(np.where(decided, k, 0).astype(np.int64), places)
    texts[~decided] = None
    return texts, ~decided
