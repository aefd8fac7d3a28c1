"""Enclosures of a whole head at once: every output (and log-sum-exp) of one call in ``arb`` balls.

The numeric side of :class:`~exactattn.verify.Reference`: one head's logits
are formed as an ``arb_mat`` (the integer scores of :meth:`Reference.score_ints
<exactattn.reference.reference.Reference.score_ints>` times the scale; with RoPE the
queries and keys are rotated first, as ``arb`` matrices), the modifiers of
the one composition (:func:`exactattn.reference.logits.softmax_row`) are applied entry
by entry (soft-cap ``cap * tanh(x / cap)``, ALiBi ``slope * distance``,
additive offsets), and the exponentials, the normalisers (with the sink's
``exp(sink)``), the dropout factors and the mixing with the values are
``arb_mat`` products.  Every number is an enclosure of the exact value of
the same composition; a ball that does not decide a rounding falls back to
the exact :class:`~exactattn.numbers.softmax.ExpRatio` of ``Reference.output``.

The functions take the reference as their first argument (they read its
policy per head, visibility, scores and values) and import nothing from it.

Reference: Vaswani et al. 2017, sec. 3.2.1; Su et al. 2021 (RoFormer),
sec. 3.4.2 for the rotation; Ziv 1991 for the rounding loop.
"""

from __future__ import annotations

import math

import numpy as np

from ..numbers.digits import working_precision
from ..numbers.reals import atom_ball
from ..numbers.exact import fmpq_of
from ..numbers.reals import angle_ball, gain_ball, real_ball, softcap_ball
from ..numbers.formats import float_format, round_cells, round_enclosed
from ..call.inputs import empty_rows, keys_read
from .logits import modified_row

__all__ = ["block_balls"]


def rotated_balls(mat_rows, positions, rope):
    """Rows of exact numbers (or ``arb`` balls) rotated by RoPE at the given positions, as an
    ``arb_mat`` (negative positions turn back: the backward's ``R^T``)."""
    from flint import arb, arb_mat
    n, d = len(mat_rows), len(mat_rows[0])
    g = gain_ball(rope.gain).sqrt()     # yarn's attention factor multiplies cos and sin
    out = [[x if isinstance(x, arb) else arb(fmpq_of(x)) for x in r] for r in mat_rows]
    for a, b, w in rope.frequencies(d):
        w = angle_ball(*w)
        for i in range(n):
            phi = positions[i] * w
            c, s = g * phi.cos(), g * phi.sin()
            xa, xb = out[i][a], out[i][b]
            out[i][a], out[i][b] = xa * c - xb * s, xa * s + xb * c
    return arb_mat(n, d, [x for r in out for x in r])


def int_mat(ints, den):
    """An ``arb_mat`` of integers over one denominator (each entry ``n / den`` rounded once)."""
    from flint import arb_mat, fmpz_mat
    return arb_mat(fmpz_mat(*ints.shape, ints.ravel().tolist())) / den


def logit_entries(ref, b: int, h: int) -> list:
    """The L x S logits of one head as a row-major list of ``arb`` (call under a precision).

    Raw scores (rotated by RoPE when set), divided by sqrt(D), soft-capped,
    plus the ALiBi bias; additive mask offsets are added by the caller
    (:func:`block_balls` subtracts their row maximum first).  Hidden entries
    are left as the plain scaled scores: the caller skips them.
    """
    pol = ref.head_policy(h)
    L, S = ref.L, ref.S
    if pol.rope is not None:
        q = ref.exact_call.query[b, h].tolist()
        k = ref.exact_call.key[b, ref.kv(h)].tolist()
        qpos = [pol.query_position(i, L, S) for i in range(L)]
        A = rotated_balls(q, qpos, pol.rope) * \
            rotated_balls(k, list(range(S)), pol.rope).transpose()
    else:
        A = int_mat(*ref.score_ints(b, h))
    if ref.divisor_squared is not None:
        A = A * atom_ball(ref.divisor_squared)
    ents = A.entries()
    if pol.softcap is None and pol.alibi is None:
        return ents
    vis = ref.visible(b, h).tolist()
    slope = None if pol.alibi is None else real_ball(pol.alibi.slope(pol.head))
    for i in range(L):           # the one order (exactattn.reference.logits.modified_row)
        p, row = pol.query_position(i, L, S), ents[i * S:(i + 1) * S]
        added = None if slope is None else \
            [slope * pol.alibi.distance(p, j) if v else None for j, v in enumerate(vis[i])]
        done = modified_row([x if v else None for x, v in zip(row, vis[i])], pol, added,
                            softcap_ball)
        ents[i * S:(i + 1) * S] = [x if v else e for x, e, v in zip(done, row, vis[i])]
    return ents


def block_balls(ref, b: int, h: int, prec: int, magnitudes: bool = False):
    """One head's outputs and log-sum-exps as ``arb`` balls at ``prec`` bits.

    Returns ``(outputs, lse)`` or, with ``magnitudes``, ``(outputs, lse, mags)``:
    ``outputs`` L x E_v balls (None for a NaN row), ``lse`` L entries (a ball
    of the natural log-sum-exp, ``-math.inf`` for a row with no key and no
    sink under ``empty_row=zero``, None for NaN rows), ``mags`` the L x E_v
    floats ``sum_j weights_ij |value_jc|``.  Call under ``working_precision(prec)``.
    """
    cache = ref.__dict__.setdefault("_block_balls", {})     # shared by dtypes and backends
    got = cache.get((b, h, prec))
    if got is not None and (len(got) == 3 or not magnitudes):
        return got if magnitudes else got[:2]
    out = _block_balls(ref, b, h, prec, magnitudes)
    cache[(b, h, prec)] = out if magnitudes else out[:2]
    return out


def _block_balls(ref, b: int, h: int, prec: int, magnitudes: bool):
    from flint import arb, arb_mat
    L, S, Ev = ref.L, ref.S, ref.Ev
    pol = ref.head_policy(h)
    vis = ref.visible(b, h)
    V, vd = ref.call.numerators("value")
    V = V[b, ref.kv(h)]
    ents = logit_entries(ref, b, h)
    E = [arb(0)] * (L * S)
    tops = [0] * L
    empty = empty_rows(pol, vis)       # no key and no sink: the policy's empty_row answer
    reads = keys_read(pol, vis)        # uniform: an empty row reads every key, at logit 0
    for i in range(L):
        row_vis = np.flatnonzero(reads[i])
        if empty[i]:
            for j in row_vis:
                E[i * S + j] = arb(1)
            continue
        if len(row_vis) == 0:          # only the sink: output 0
            continue
        offsets = ref.offsets(b, h, i)
        if offsets is not None:
            top = tops[i] = max(offsets[j] for j in row_vis)
            for j in row_vis:
                E[i * S + j] = (ents[i * S + j] + arb(fmpq_of(offsets[j] - top))).exp()
        else:
            for j in row_vis:
                E[i * S + j] = ents[i * S + j].exp()
    Em = arb_mat(L, S, E)
    den = Em * arb_mat(S, 1, [1] * S)
    dens = [den[i, 0] for i in range(L)]
    if pol.sink is not None:
        dens = [d + (arb(fmpq_of(pol.sink - t))).exp() for d, t in zip(dens, tops)]
    if ref.policy.dropout is not None:
        Em = arb_mat(L, S, [e if f == 1 else e * arb(fmpq_of(f)) if f else arb(0) for e, f in
                            zip(E, (f for i in range(L) for f in ref.factors(b, h, i)))])
    N = Em * int_mat(V, vd)
    out = [[None] * Ev for _ in range(L)]
    lse: list = [None] * L
    share = pol.empty_share(max(S, 1))   # a key's share in a row that sees none (None: NaN)
    dens = [arb(1) if e and not share else d for d, e in zip(dens, empty)]   # zeros: 0 / 1
    for i in range(L):
        if empty[i] and share is None:
            continue
        out[i] = [N[i, c] / dens[i] for c in range(Ev)]
        # a row that sees no key has no normaliser: lse = log 0, whatever its shares are
        lse[i] = -math.inf if empty[i] else dens[i].log() + arb(fmpq_of(tops[i]))
    if not magnitudes:
        return out, lse
    M = Em * int_mat(abs(V), vd)
    mags = np.zeros((L, Ev))
    for i in range(L):
        if out[i][0] is None:
            continue
        mags[i] = [float((M[i, c] / dens[i]).mid()) for c in range(Ev)]
    return out, lse, mags


def rounded_outputs(ref, dtype: str, prec: int):
    """Every output correctly rounded to ``dtype``: ``(rounded, balls, magnitudes)``.

    See :meth:`Reference.rounded_outputs <exactattn.verify.Reference.rounded_outputs>`.
    """
    fmt = float_format(dtype)
    prec = max(prec, fmt.precision + 64)
    shape = (ref.B, ref.Hq, ref.L, ref.Ev)
    rounded = np.empty(shape, dtype=np.float64)
    balls = np.empty(shape, dtype=object)
    mags = np.zeros(shape)
    cells = [(i, c) for i in range(ref.L) for c in range(ref.Ev)]
    for b in range(ref.B):
        for h in range(ref.Hq):
            def balls_at(p):      # the whole block at p bits; done when <= 8 are left
                if p == prec:
                    blk, _, mags[b, h] = block_balls(ref, b, h, p, magnitudes=True)
                else:
                    blk = block_balls(ref, b, h, p)[0]
                return lambda cell: blk[cell[0]][cell[1]]
            round_cells(cells, balls_at, lambda cell: ref.output(b, h, *cell), fmt, prec,
                        (rounded[b, h], balls[b, h]), max_prec=4 * prec, exact_prec=8 * prec,
                        left=8)
    return rounded, balls, mags


def rounded_lse(ref, dtype: str, base: str, prec: int):
    """Every row's log-sum-exp correctly rounded to ``dtype``: ``(rounded, balls)``, B x H_q x L.

    ``-inf`` for a row with no key (``empty_row=zero``), NaN for a NaN row.
    """
    fmt = float_format(dtype)
    prec = max(prec, fmt.precision + 64)
    shape = (ref.B, ref.Hq, ref.L)
    rounded = np.empty(shape, dtype=np.float64)
    balls = np.empty(shape, dtype=object)
    for b in range(ref.B):
        for h in range(ref.Hq):
            with working_precision(prec):
                from flint import arb
                lses = block_balls(ref, b, h, prec)[1]
                log2 = arb(2).log()
            for i, x in enumerate(lses):
                if x is None or (isinstance(x, float) and math.isinf(x)):
                    rounded[b, h, i] = math.nan if x is None else x
                    continue
                if base == "2":
                    x = x / log2
                rounded[b, h, i], balls[b, h, i] = round_enclosed(
                    x, fmt, prec, lambda: ref.lse(b, h, i, base), 2 * prec)
    return rounded, balls


def max_abs_logit(ref) -> float:
    """The largest |logit| over visible pairs (a float, a few digits; inf past float64's range)."""
    from flint import arb
    top = arb(0)
    with working_precision(64):
        for b in range(ref.B):
            for h in range(ref.Hq):
                vis = ref.visible(b, h)
                if not vis.any():
                    continue
                ents = logit_entries(ref, b, h)
                m = ref.mask(b, h)
                for i, j in zip(*np.nonzero(vis)):
                    x = ents[i * ref.S + j]
                    if m is not None:
                        x += arb(fmpq_of(m.offset(i, j)))
                    top = max(top, abs(x).upper())
        return float(top.upper())      # inf past the largest float64
