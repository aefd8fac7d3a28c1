"""The outputs of one attention call enclosed at float64 speed, with a proved error bound.

:func:`enclose_outputs` computes every output ``o = sum_j w_j v_j / sum_j w_j`` in float64
over whole heads (numpy matrix products and ``exp``) and a radius per entry that bounds
``|o_computed - o_exact|`` for the exact inputs (binary floats, read as their exact values).
A check that only needs "is this output within k ULPs of the exact value" decides almost
every entry from these enclosures (:func:`exactattn.verify.check.bulk_report`); the exact
path computes only the entries whose enclosure straddles a rounding boundary of the dtype or
the tolerance.

The bound (``u = 2^-53``, ``gamma_n = n u / (1 - n u)``, Higham 2002, sec. 3.1, Theorem 3.1:
it holds for any order of summation, blocked or fused, as BLAS uses):

1. A logit ``x = scale * q.k`` (plus an additive mask offset) is computed with an error
   ``delta <= scale (gamma_{E+8} sum_i |q_i||k_i| + 4 E 2^-1021)`` (the scale's own three
   roundings and the product's, and an absolute term for underflow, flushed to zero
   included); ``sum_i |q_i||k_i|`` is the product ``|Q| |K|^T`` computed in float64 (off by
   at most ``gamma_E`` of itself), its row's largest entry taken for every key of the row.  An offset adds ``2u |x|``; a sink ``s`` rounded to float64 is off by ``2u |s|``.
2. With ``m`` the row's largest computed logit, ``d_j = fl(x_j - m)`` is off from the exact
   ``x_j - m`` by ``tau_j = delta_j + u |d_j|``, and ``fl(exp(d_j)) = w_j (1 + rho_j)`` where
   ``w_j = exp(x_j - m)`` and ``|rho_j| <= r_j = expm1(tau_j) + epsilon`` (``epsilon``:
   :data:`EXP_ERROR`, the platform's ``exp``, checked at first use by :func:`exp_checked`).
   Keys with ``d_j < -708`` are counted as an absolute error instead (their weights are
   below ``2^-1020``, while the row's largest weight is at least 1/2).
3. The normaliser and the two sums ``sum_j w_j v_j`` and ``sum_j w_j |v_j|`` are matrix
   products over S (+1 for a sink) terms: with ``R = max_j r_j`` and ``eta = R +
   gamma_{S+1} (1 + R) + zeta``, ``zeta = (S + 1) 2^-1017``, the quotient obeys
   ``|o_computed - o| <= (2 eta + u)(1 + 2^-7) a + 2 zeta (max|v| + 1)`` where ``a`` is the
   computed ``sum_j p_j |v_j|`` (the terms' magnitude).  Derivation: ``N~ = sum_j w_j v_j (1 +
   alpha_j)`` and ``D~ = sum_j w_j (1 + beta_j)`` with ``|alpha_j|, |beta_j| <= eta``, so
   ``N~/D~ - N/D = (sum_j p_j v_j alpha_j - o sum_j p_j beta_j) D / D~`` is at most ``2 eta a
   / (1 - eta)`` (``|o| <= a``), one more rounding for the quotient, and ``a <= a~ (1 + 3 eta
   + 2u)``; with ``eta <= 2^-10`` the factors ``1/(1 - eta)`` and ``1 + 3 eta + 2u`` together
   are below ``1 + 2^-7``; valid while every ``tau_j`` and ``eta``
   are at most 2^-10 (else the row's radius is infinite and the exact path decides it).

Non-finite inputs or logits, and the policy fields the capability table lists for
``"enclose"`` (:data:`~exactattn.call.policy.UNSUPPORTED`: RoPE, soft-cap, ALiBi, dropout)
are not enclosed here (:func:`supported` says why); the caller takes the exact path for them.

>>> import numpy as np
>>> from exactattn.call.policy import Policy
>>> q, k, v = np.zeros((1, 1, 2, 1)), np.zeros((1, 1, 2, 1)), np.array([[[[1.0], [3.0]]]])
>>> mid, rad, mag, top = enclose_outputs(q, k, v, Policy(causal=True))
>>> mid.ravel().tolist(), bool((rad < 1e-12).all()), mag.ravel().tolist()
([1.0, 2.0], True, [1.0, 2.0])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..call.policy import Policy
from ..numbers.digits import working_precision

__all__ = ["enclose_outputs", "kernel_arithmetic"]

U = 2.0 ** -53
#: the relative error assumed of float64 ``numpy.exp`` (glibc and numpy's SIMD kernels are
#: within 4 ULPs, 2^-50; this leaves a factor 8): checked on the running machine, which must
#: be within a sixteenth of it (2^-51; measured here: 2^-52.8)
EXP_ERROR = 2.0 ** -47
_VALID = 2.0 ** -10          # the bound's first-order terms are valid below this
_EXP_OK: bool | None = None


def gamma(n: int, u: float = U) -> float:
    """Higham's ``gamma_n = n u / (1 - n u)``, rounded up (``inf`` from ``n u >= 1/2``)."""
    return n * u / (1 - n * u) * (1 + 2.0 ** -40) if n * u < 0.5 else math.inf


@dataclass(frozen=True)
class Arithmetic:
    """How the outputs the bound is about are computed (the module's steps with these units).

    ``u``: the unit roundoff of every product, sum, ``exp`` argument and quotient;
    ``exp_error``: the relative error of ``exp``; ``logit``: the relative error per logit
    of the roundings after the dot product (scale, offset, soft-cap, a base-2 conversion),
    in units of ``u``; ``sums``: how many roundings each weight sees in the sums, per key
    (3: online softmax's rescaling products too, and the ``exp`` of each rescaling factor,
    at most one per 16 keys, each within 16 units); ``merge``: the weights are merged through a
    log-sum-exp (split-KV), adding ``4 u (max|x| + log S + 2)``; ``weights``: the relative
    rounding of the weights before they meet the values (P rounded to the kernel's dtype)
    and ``tiny`` the absolute one there (half that dtype's smallest subnormal);
    ``underflow``: the absolute error of a weight that underflows; ``store``: the relative
    rounding of the scores when they are stored in a coarser dtype (and of the queries and
    keys scaled there), with the products still summed in ``u``.
    """

    u: float = U
    exp_error: float = EXP_ERROR
    logit: float = 0.0
    sums: int = 1
    merge: bool = False
    weights: float = 0.0
    tiny: float = 0.0
    underflow: float = 2.0 ** -1017
    store: float = 0.0


#: the float64 evaluation of :func:`enclose_outputs`
FLOAT64 = Arithmetic()


def kernel_arithmetic(dtype: str, accumulation: str = "float32") -> Arithmetic:
    """The arithmetic of a correct kernel with outputs in ``dtype`` that accumulates in
    ``accumulation``: every product, sum, ``exp`` (within 16 units) and quotient rounded in
    it, online softmax and a split-KV merge allowed, the unnormalised weights rounded to
    ``dtype`` before they meet the values (FlashAttention's P).  An ``accumulation`` coarser than
    ``dtype`` is taken as ``dtype``.  An ``accumulation`` of float16 or bfloat16 is a kernel
    that stores its scores and weights in it (and may scale the queries and keys there, as
    PyTorch's math backend does), its products summed in float32 inside each matrix product.

    >>> a = kernel_arithmetic("float16")
    >>> a.u == 2.0 ** -24, a.weights == 2.0 ** -11, a.tiny == 2.0 ** -25, a.store
    (True, True, True, 0.0)
    >>> kernel_arithmetic("float16", "float16").store == 2.0 ** -11
    True
    """
    from ..numbers.formats import float_format
    out, acc = float_format(dtype), float_format(accumulation)
    acc = out if out.precision > acc.precision else acc
    sums = acc if acc.precision >= 24 else float_format("float32")
    u = 2.0 ** -sums.precision
    return Arithmetic(u, 16 * u, 16.0, 3, True, 2.0 ** -out.precision,
                      2.0 ** (out.emin - out.precision), 2.0 ** (sums.emin + 4),
                      0.0 if acc is sums else 2.0 ** -acc.precision)


def exp_checked() -> bool:
    """True when ``numpy.exp`` is within :data:`EXP_ERROR` / 16 of the exact exponential on
    4,097 points of ``[-708, 0]`` (arb at 128 bits), checked once per process."""
    global _EXP_OK
    if _EXP_OK is None:
        from flint import arb
        xs = np.concatenate([-np.linspace(0.0, 708.0, 4096) * (1 + 2.0 ** -30), [-2.0 ** -30]])
        got = np.exp(xs)
        with working_precision(128):
            worst = max(abs(float(((arb(g) - arb(x).exp()) / arb(x).exp()).mid()))
                        for x, g in zip(xs.tolist(), got.tolist()))
        _EXP_OK = worst <= EXP_ERROR / 16
    return _EXP_OK


def supported(policy: Policy) -> str | None:
    """None when :func:`enclose_outputs` encloses calls of ``policy``, else what it does not take
    (the first of ``policy.unsupported("enclose")``, then the scale and ``exp``)."""
    bad = policy.unsupported("enclose")
    if bad:
        return bad[0]
    if policy.divisor_squared is not None and not isinstance(policy.divisor_squared, str):
        try:
            d = float(policy.divisor_squared)
        except OverflowError:
            d = math.inf
        if not (0 < d < math.inf and 0 < 1 / math.sqrt(d) < math.inf):
            return "a scale past float64"
    return None if exp_checked() else "numpy.exp less accurate than assumed"


def enclose_outputs(query, key, value, policy: Policy, keep=None, offsets=None,
                    each=lambda heads, total: heads, arith: Arithmetic | tuple = FLOAT64,
                    got=None, fmt=None):
    """Every output of a call enclosed: ``(mid, rad, mag, top)``.

    Shapes: ``query`` B x H_q x L x E, ``key`` B x H_kv x S x E, ``value`` B x H_kv x S x
    E_v, float64 (exact copies of the inputs); ``keep`` None or booleans broadcastable to
    B x H_q x L x S (True = the query sees the key; the policy's positions are applied
    too); ``offsets`` None or float64 offsets added to the scaled scores, broadcastable
    like ``keep`` (``-inf`` hides).  ``mid``, ``rad`` and ``mag`` are B x H_q x L x E_v:
    the exact output lies in ``[mid - rad, mid + rad]`` (``rad`` is ``inf`` where no bound
    holds), ``mag`` is ``sum_j p_j |v_j|`` within ``4 rad / mag`` of itself (``3 eta + 2u``:
    at most 2^-8 where ``rad`` is finite, about 2^-40 on usual inputs).  ``top`` is
    ``(lo, hi)``, bounds of the largest ``|logit|`` over visible pairs (sink aside), or
    None when some row has no bound.  The policy must be :func:`supported`.  ``each(heads,
    total)`` wraps the loop over the B x H_q heads (a progress bar).  With another
    ``arith`` (:func:`kernel_arithmetic`), ``rad`` bounds how far a correct kernel of that
    arithmetic may be from the exact output (to the float64 evaluation's own error, which a
    caller's margin covers); there a soft-cap is taken too (``tanh`` within 16 units).  A
    tuple of arithmetics gives a tuple of radii, one each, from one pass over the heads.
    With ``got`` (a kernel's outputs, floats of the format ``fmt``, shaped like ``mid``) and
    ``arith = (FLOAT64, kernel)``, a fifth item: per row (B x H_q x L), how far the row's
    error is past what a correct kernel of that arithmetic can make along it
    (:func:`_row_excess`: above 1, no correct kernel gives these outputs; 0 where not judged).
    """
    ariths = arith if isinstance(arith, tuple) else (arith,)
    B, Hq, L, E = query.shape
    Hkv, S, Ev = key.shape[1], key.shape[2], value.shape[3]
    d2 = policy.divisor_squared_for(E)
    scale = 1.0 if d2 is None else 1 / math.sqrt(float(d2))
    base = policy.keep(L, S)
    sink = None if policy.sink is None else float(policy.sink)
    cap = None if policy.softcap is None or ariths[0] is FLOAT64 else float(policy.softcap)
    n = S + (sink is not None)
    mid = np.empty((B, Hq, L, Ev))
    rads, mag = np.empty((len(ariths),) + mid.shape), np.empty_like(mid)
    excess = np.zeros((B, Hq, L))
    top = [0.0, 0.0]
    with np.errstate(over="ignore", invalid="ignore", under="ignore", divide="ignore"):
        for b, h in each(((b, h) for b in range(B) for h in range(Hq)), B * Hq):
            g = policy.kv_head(h, Hq, Hkv)
            vis = base if keep is None else base & np.broadcast_to(keep, (B, Hq, L, S))[b, h]
            x = (query[b, h] @ key[b, g].T) * scale
            # step 1 per row: the largest delta_j of the row
            sizes = (np.abs(query[b, h]) @ np.abs(key[b, g]).T).max(axis=1, initial=0.0)
            if cap is not None:        # |d/ds c tanh(s/c)| <= 1: the score's error carries over
                x = cap * np.tanh(x / cap)
            if offsets is not None:
                off = np.broadcast_to(offsets, (B, Hq, L, S))[b, h]
                vis = vis & (off != -np.inf)
                x = x + np.where(vis, off, 0.0)
            x = np.where(vis, x, -np.inf)
            x_top, x_low = x.max(axis=1), np.where(vis, x, np.inf).min(axis=1)
            ax = np.maximum(np.abs(x_top), np.abs(x_low))       # max_j |x_j|, seen keys
            deltas = []
            for a in ariths:
                delta = scale * (1 + 2.0 ** -30) * (gamma(E + 8, a.u) * (1 + gamma(E)) * sizes
                                                    + 4 * E * 2.0 ** -1021)
                if offsets is not None or a.logit:
                    delta = delta + (a.logit or 2) * a.u * (1 + 2.0 ** -30) * ax
                if a.store:   # the score stored, after q and k scaled, in the coarse dtype
                    delta = delta + a.store * (1 + 2.0 ** -20) * (ax + 3 * scale * sizes)
                deltas.append(delta)
            mid[b, h], mag[b, h], rads[:, b, h], excess[b, h] = _softmax_mix(
                x, x_top, x_low, deltas, vis, value[b, g], sink, n, ariths,
                0 if sink is not None else policy.empty_share(max(S, 1)),
                None if got is None else (got[b, h], fmt))
            seen = vis.any(axis=1)
            if seen.any():
                top = [max(top[0], float(np.max((ax - deltas[0])[seen]))),
                       max(top[1], float(np.max((ax + deltas[0])[seen])))]
    bounded = bool(np.isfinite(rads[0]).all()) and math.isfinite(top[1])
    return (mid, tuple(rads) if isinstance(arith, tuple) else rads[0], mag,
            tuple(top) if bounded else None) + ((excess,) if got is not None else ())


def _softmax_mix(x, x_top, x_low, deltas, vis, V, sink, n, ariths=(FLOAT64,), fill=None, got=None):
    """One head's outputs, magnitudes and radii, one per arithmetic of ``ariths`` with its
    logits' errors ``deltas`` (step 2 and 3 of the module's bound, in that arithmetic), the
    bound's terms taken per row: ``tau_j <= delta + u fl(m - min_j x_j)``
    (rounding is monotone, so ``|fl(x_j - m)| <= fl(m - min_j x_j)``) and ``r_j <= R =
    expm1(max tau) + epsilon`` (``expm1`` is increasing).  A row that sees no key takes
    ``fill``, each key's share there (:meth:`Policy.empty_share
    <exactattn.call.policy.Policy.empty_share>`; 0 with a sink): 0 exactly, ``1/S``: the mean
    of the values (a sum of S terms and a weight ``1/S``: ``gamma_{S+1} + w`` of the mean of
    ``|v|``), or None: NaN, left unbounded.  ``got``: ``(outputs, format)`` of a kernel, whose rows
    :func:`_row_excess` judges against the last arithmetic (else the excess is 0)."""
    m = x_top if sink is None else np.maximum(x_top, sink)
    e = np.exp(x - m[:, None])                 # hidden keys: exp(-inf) = 0
    D = e.sum(axis=1) + (0.0 if sink is None else np.exp(sink - m))
    out = (e @ V) / D[:, None]
    mag = (e @ np.abs(V)) / D[:, None]
    vmax = float(np.max(np.abs(V), initial=0.0))
    # exact outputs: 0 where every key the row sees has value 0 (a probe's columns); a row
    # that sees one key and no sink gives that key's value (its weight exp(0) = 1 = the sum)
    exact = ((vis.sum(axis=1) == 1) & (sink is None))[:, None]
    if (V == 0).any():
        exact = exact | ((vis.astype(np.float64) @ (V != 0).astype(np.float64)) == 0)
    empty = ~vis.any(axis=1)
    if empty.any() and fill is not None and V.shape[0]:
        out[empty] = V.mean(axis=0) if fill else 0.0
        mag[empty] = np.abs(V).mean(axis=0) if fill else 0.0
    found = [_radius(delta, a, m, x_low, sink, n, D, mag, vmax, vis, out, exact, empty, fill,
                     V.shape[0]) for delta, a in zip(deltas, ariths)]
    excess = 0.0 if got is None else _row_excess(*got, out, found[0][0], mag, e / D[:, None], V,
                                                 ariths[-1], n, *found[-1][1:])
    return out, mag, [f[0] for f in found], excess


def _row_excess(got, fmt, mid, rad, mag, p, V, arith: Arithmetic, n, eta, eta_n, kappa):
    """Per row, how far a kernel's outputs ``got`` (L x E_v floats of ``fmt``) are past what a
    correct kernel of ``arith`` can give: ``|w.e|`` over its proved most (above 1: no correct
    kernel), 0 where not judged.  ``mid``, ``rad``: the exact outputs' float64 enclosure;
    ``p``: the shares and ``mag`` the terms' magnitudes (float64, within ``2^-8`` of
    themselves where ``rad`` is finite: the enclosure's ``eta`` is at most ``2^-10`` there).

    The theorem (a correct kernel as in :func:`kernel_arithmetic`; ``delta_j`` the relative
    error key ``j``'s weight carries into every value column alike, from its logit, ``exp``,
    online rescaling, a merge and P's rounding to the dtype, ``|delta_j| <= eta_N``; ``theta``
    the normaliser's, ``|theta| <= eta_N`` (it may sum the rounded P); ``beta_jc`` the products' and sums' roundings of the
    numerator, ``|beta_jc| <= gamma_{sums (S+1)}``; ``d_c`` the division's and the output's own
    roundings): the error is ``e = (V^T (p o delta) + a - theta o) / (1 + theta) + d`` with
    ``|a_c| <= (1 + eta_N) gamma a_c``, so for every vector ``w``

        ``|w.e| <= (eta_N (sum_j p_j |w.v_j| + |w.o|) + sum_c |w_c| |a_c|) / (1 - eta_N)
        + sum_c |w_c| |d_c|``,

    ``|d_c| <= h_c + u (|got_c| + h_c)``, ``h_c`` half the dtype's spacing at ``got_c``.  A
    per-entry tolerance must allow every ``delta_j`` at its most with one sign; along ``w =
    e`` (less its part along ``o``) the shared ``delta_j`` must also explain the error's
    direction, which weights rounded coarser than the dtype (bfloat16 P in a float16 kernel)
    cannot.  Every float64 sum here is widened: products by ``gamma_{E_v + 1}``, ``p`` and
    ``a`` by ``2^-8``, the totals by ``2^-20``."""
    from ..numbers.formats import float_format, ulp_indices, ulp_unit
    fmt, u, Ev = float_format(fmt), arith.u, V.shape[1]
    dev = got - mid
    w = dev - ((dev * mid).sum(axis=1) / np.maximum((mid * mid).sum(axis=1), 2.0 ** -1000))[:, None] * mid
    aw, g = np.abs(w), gamma(Ev + 1)
    shared = eta_n * (((p * np.abs(w @ V.T)).sum(axis=1) + g * (aw * mag).sum(axis=1)) * (1 + 2.0 ** -8))
    along_o = eta_n * (np.abs((w * mid).sum(axis=1)) + (aw * rad).sum(axis=1) + g * (aw * np.abs(mid)).sum(axis=1))
    sums = (((1 + eta_n) * gamma(arith.sums * (n + 1), u) + 2 * u)[:, None] * mag * (1 + 2.0 ** -8) + kappa)
    half = ulp_unit(np.abs(got), fmt) / 2
    last = (aw * (half + u * (np.abs(got) + half) * (1 + 2.0 ** -20))).sum(axis=1)
    most = ((shared + along_o + (aw * sums).sum(axis=1)) / (1 - eta_n) + last) * (1 + 2.0 ** -20)
    seen = np.abs((w * dev).sum(axis=1)) - g * (aw * np.abs(dev)).sum(axis=1) - (aw * rad).sum(axis=1)
    judged = np.isfinite(rad).all(axis=1) & (eta <= 1 / 8) & np.isfinite(got).all(axis=1) & \
        (most > 0) & ulp_indices(got, fmt)[1].all(axis=1)
    return np.where(judged, np.maximum(seen, 0.0) / np.where(judged, most, 1.0), 0.0)


def _radius(delta, arith: Arithmetic, m, x_low, sink, n, D, mag, vmax, vis, out, exact, empty,
            fill, S):
    """One arithmetic's radii of a head's outputs (:func:`_softmax_mix`)."""
    u, first = arith.u, arith is FLOAT64
    tau_max = (delta + (1 if first else 2) * u * (m - x_low)) * (1 + 2.0 ** -30)
    R = np.expm1(tau_max) * (1 + 2.0 ** -20) + arith.exp_error
    if sink is not None:
        ds = sink - m
        ts = 2 * u * abs(sink) + u * (1 + 2.0 ** -30) * np.abs(ds) + 2.0 ** -1074
        R = np.maximum(R, np.where(ds >= -708, np.expm1(ts) * (1 + 2.0 ** -20) + arith.exp_error,
                                   0.0))
        tau_max = np.maximum(tau_max, ts)
    if arith.merge:
        R = R + 4 * u * (np.maximum(np.abs(m), np.abs(x_low)) + math.log(n) + 2)
    zeta = (n + 1) * arith.underflow
    eta = R + gamma(arith.sums * (n + 1), u) * (1 + R) + zeta
    # a weight rounded to a subnormal of the dtype: before the division (P, D >= 1), or after
    # it where the kernel stores its normalised weights in the dtype (accumulation=float16)
    kappa = 2 * zeta * (vmax + 1) + (n * arith.tiny * vmax / (np.ones_like(D) if arith.store else D))[:, None]
    if first:
        rad = ((2 * eta + u) * (1 + 2.0 ** -7))[:, None] * mag + kappa
        valid, eta_n = _VALID, eta
    else:      # the same derivation without first-order factors: the numerator's terms
        eta_n = eta + arith.weights * (1 + eta)       # also see P rounded, 1/(1 - eta) kept
        grow = (1 + eta_n) / ((1 - eta) * (1 - u)) * (1 + 2.0 ** -20)
        rad = (((eta_n + eta) / (1 - eta) + u) * grow)[:, None] * mag + kappa
        valid = 1 / 8
    ok = np.isfinite(m) & (tau_max <= valid) & (eta <= valid) & vis.any(axis=1)
    rad = np.where(ok[:, None] & np.isfinite(out) & np.isfinite(mag), rad, np.inf)
    rad = np.where(exact & np.isfinite(rad), 0.0, rad)
    if empty.any() and fill is not None and S:
        grow = gamma(arith.sums * (S + 1), u) + arith.weights + gamma(S + 1)
        rad[empty] = mag[empty] * grow * (1 + 2.0 ** -20) if fill else 0.0
    return rad, eta, eta_n, kappa


class RowBalls:
    """Single outputs of the same call enclosed in ``arb`` balls at ``prec`` bits, from the
    exact float inputs (``arb`` of a float is exact): what decides the entries whose float64
    enclosure straddled a rounding boundary, without reading the whole call exactly.

    ``balls(entries)`` gives ``{(b, h, i, c): ball}`` (the same composition as the module's:
    the scaled scores plus offsets, hidden keys left out, the sink in the normaliser), the
    rows of one head as one ``arb_mat`` product; a head's keys are converted once.
    """

    def __init__(self, query, key, value, policy: Policy, keep=None, offsets=None, prec: int = 128):
        self.q, self.k, self.v, self.policy, self.prec = query, key, value, policy, prec
        B, Hq, L, _ = query.shape
        S = key.shape[2]
        self.vis = np.broadcast_to(policy.keep(L, S), (B, Hq, L, S))
        if keep is not None:
            self.vis = self.vis & np.broadcast_to(keep, (B, Hq, L, S))
        self.offsets = None if offsets is None else np.broadcast_to(offsets, (B, Hq, L, S))
        self._keys: dict = {}

    def balls(self, entries) -> dict:
        from flint import arb, arb_mat
        from ..numbers.exact import fmpq_of
        from ..numbers.reals import atom_ball
        pol, (_, Hq, _, E), (_, Hkv, S, _) = self.policy, self.q.shape, self.k.shape
        groups: dict = {}
        for b, h, i, c in entries:
            groups.setdefault((b, h), {}).setdefault(i, set()).add(c)
        found = {}
        with working_precision(self.prec):
            d2 = pol.divisor_squared_for(E)
            scale = arb(1) if d2 is None else atom_ball(d2)
            sink = None if pol.sink is None else arb(fmpq_of(pol.sink))
            for (b, h), rows in groups.items():
                g = pol.kv_head(h, Hq, Hkv)
                if (b, g) not in self._keys:
                    self._keys[(b, g)] = arb_mat(E, S, self.k[b, g].T.reshape(-1).tolist())
                I, cols = sorted(rows), sorted(set().union(*rows.values()))
                X = arb_mat(len(I), E, self.q[b, h, I].reshape(-1).tolist()) * self._keys[(b, g)]
                near = (self.q[b, h, I] @ self.k[b, g].T) * float(scale.mid())
                W, D = arb_mat(len(I), S), []
                for r, i in enumerate(I):
                    seen = np.flatnonzero(self.vis[b, h, i]).tolist()
                    if not seen:      # an empty row: 0, or every key at weight 1 (1/S each)
                        fill = sink is None and pol.empty_share(max(S, 1))
                        for j in range(S if fill else 0):
                            W[r, j] = arb(1)
                        D.append(arb(S if fill else 1))
                        continue
                    x = [X[r, j] * scale for j in seen]
                    if self.offsets is not None:
                        off = self.offsets[b, h, i]
                        x = [t + arb(float(off[j])) for t, j in zip(x, seen)]
                        near[r] += np.where(np.isfinite(off), off, 0.0)
                    top = arb(float(np.max(near[r, seen])))
                    total = arb(0) if sink is None else (sink - top).exp()
                    for t, j in zip(x, seen):
                        W[r, j] = w = (t - top).exp()
                        total += w
                    D.append(total)
                N = W * arb_mat(S, len(cols), self.v[b, g][:, cols].reshape(-1).tolist())
                for r, i in enumerate(I):
                    for c in rows[i]:
                        found[(b, h, i, c)] = N[r, cols.index(c)] / D[r]
        return found
