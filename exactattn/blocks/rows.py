"""One block of query rows: certified shares and outputs from the exact inputs.

The unit of work is the block of query rows ``r0 .. r1 - 1`` against the keys
those rows can see.  Which keys a query sees comes from
:meth:`Policy.visible_keys <exactattn.call.policy.Policy.visible_keys>` (the one
visibility rule) and the inputs' explicit mask; a causal or windowed block
reads only the span of keys its rows see (:func:`key_span`), so its cost is
rows x span, not rows x n.  The block's shares and outputs are decided in bulk
from integer enclosures (:func:`exactattn.numbers.bulk.block_bounds`); the few entries
the enclosures leave undecided, and rows that see no key, go through the exact
per-entry path (:func:`exact_row`: the row :class:`~exactattn.verify.Reference`
builds, through the one composition of the modifiers), so every printed digit is
the correctly rounded one.  The enclosures know the plain softmax: a call with
soft-capping, a sink, ALiBi, RoPE or dropout has every entry on the exact path.

Every row is computed from its own scores only, so the strings are the same
for every block size, and the same as :meth:`Trace.share_decimals
<exactattn.engines.trace.Trace.share_decimals>` gives for the whole head.

Memory: about :data:`~exactattn.blocks.memory.BYTES_PER_PAIR` bytes per
(row, key) pair of the block at its peak, plus the inputs (O(n d)).

>>> from exactattn.call import Call, Policy
>>> x = Call([[0], [1]], [[0], [1]], [[1], [0]], policy=Policy(scale="none", causal=True)).head()
>>> res = certify_block(x, 1, 2, 4)
>>> res.shares, res.outputs, res.keys
([['0.2689', '0.7311']], [['0.2689']], (0, 2))
>>> certify_block(x, 0, 1, 4).shares      # query 0 sees key 0 only
[['1.0000', '0.0000']]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cache, lru_cache

import numpy as np

from ..call.modifiers import dropout_factors
from ..numbers.bulk import block_bounds, bounds_decimals, exact_matmul, fixed_bits
from ..numbers.digits import check_places, format_scaled
from ..numbers.softmax import SoftmaxRow
from ..reference.bound import gamma
from ..reference.logits import rope_row, softmax_row


def numerators(call) -> list[tuple[np.ndarray, int]]:
    """A one-head call's (:meth:`Call.head <exactattn.call.Call.head>`) query, key and value
    as n x d integers over one denominator each: ``[(q, q_den), (k, k_den), (v, v_den)]``."""
    return [(ints[0, 0], den) for ints, den in map(call.numerators, ("query", "key", "value"))]


@lru_cache(maxsize=1)       # a call's blocks share it: once per call in each process
def score_bound(call) -> int:
    """A bound on every |raw-score numerator| of a one-head call: ``ceil(max|q_i| max|k_j|)``
    with Euclidean norms (Cauchy-Schwarz), exact."""
    norms = [int((a.astype(object) ** 2).sum(axis=1).max()) if a.size else 0
             for a, _ in numerators(call)[:2]]
    return math.isqrt(norms[0] * norms[1]) + 1


def key_span(call, r0: int, r1: int) -> tuple[int, int]:
    """``(c0, c1)``: the keys ``c0 .. c1 - 1`` that any of rows r0 .. r1 - 1 sees by position.

    ``(0, 0)`` when none sees a key.  From :meth:`Policy.visible_keys`, row by row.
    """
    sh = call.shape
    seen = [r for r in (call.policy.visible_keys(i, sh["L"], sh["S"]) for i in range(r0, r1))
            if r.stop > r.start]
    return (min(r.start for r in seen), max(r.stop for r in seen)) if seen else (0, 0)


def block_keep(call, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
    """(r1 - r0) x (c1 - c0) booleans: query i sees key j (position rule and explicit mask)."""
    out, sh = np.zeros((r1 - r0, c1 - c0), dtype=bool), call.shape
    for i in range(r0, r1):
        r = call.policy.visible_keys(i, sh["L"], sh["S"])
        out[i - r0, max(r.start, c0) - c0:max(min(r.stop, c1) - c0, 0)] = True
    if call.mask is not None:     # boolean (Call.head): True keeps unless the kind drops
        out &= call.mask[0, 0, r0:r1, c0:c1].astype(bool) != (call.mask_kind == "bool_drop")
    return out


def exact_row(call, i: int, cols: np.ndarray) -> SoftmaxRow:
    """Query i's exact softmax row, seeing keys ``cols``, as :class:`~exactattn.verify.Reference`
    builds it: raw scores (exact, or rotary under RoPE) through
    :func:`~exactattn.reference.logits.softmax_row`, the one composition of the modifiers."""
    (q, qd), (k, kd), _ = numerators(call)
    policy, (n_q, n_k) = call.policy, (call.shape["L"], call.shape["S"])
    raw: list = [None] * n_k
    if policy.rope is not None:
        raw = rope_row([Fraction(int(a), qd) for a in q[i].tolist()],
                       lambda j: [Fraction(int(a), kd) for a in k[j].tolist()],
                       cols.tolist(), policy, i, n_q, n_k)
    elif len(cols):
        nums = exact_matmul(q[i:i + 1], k[cols].T)[0].tolist()
        for j, num in zip(cols.tolist(), nums):
            raw[j] = Fraction(int(num), qd * kd)
    return softmax_row(raw, policy.divisor_squared_for(call.shape["E"]), policy, i, n_q, n_k)


def exact_rows(call, r0: int, c0: int, keep: np.ndarray):
    """The exact per-entry path of a block: ``(row, values)``, row i's :func:`exact_row` and
    the value column c row i weighs (times its dropout factors under dropout, as
    :meth:`Reference.output <exactattn.verify.Reference.output>`), built once on demand."""
    v, vd = numerators(call)[2]

    @cache
    def row(i: int) -> SoftmaxRow:
        return exact_row(call, i, np.flatnonzero(keep[i - r0]) + c0)

    @cache
    def column(c: int) -> list[Fraction]:
        return [Fraction(int(x), vd) for x in v[:, c].tolist()]

    def values(i: int, c: int) -> list:
        if call.dropout_keep is None:
            return column(c)
        factors = dropout_factors(call.policy.dropout, call.dropout_keep[0, 0, i].tolist())
        return [x * f for x, f in zip(column(c), factors)]
    return row, values


def block(call, r0: int, r1: int, bits: int):
    """What rows r0 .. r1 - 1 are decided from: ``(c0, c1, bounds, row, values)``, the span of
    keys they see, their bulk enclosures at ``bits`` (:func:`~exactattn.numbers.bulk.block_bounds`;
    None when no row sees a key, or under a modifier: the enclosures know the plain softmax)
    and the exact per-entry path (:func:`exact_rows`)."""
    c0, c1 = key_span(call, r0, r1)
    keep = block_keep(call, r0, r1, c0, c1)
    (q, qd), (k, kd), (v, vd) = numerators(call)
    b = None if c1 == c0 or call.policy.modified else block_bounds(
        q[r0:r1], qd, k[c0:c1], kd, call.policy.divisor_squared_for(call.shape["E"]), keep,
        v[c0:c1], vd, bits, score_bound(call))
    return (c0, c1, b) + exact_rows(call, r0, c0, keep)


@dataclass
class BlockResult:
    """Certified decimals of rows ``r0 .. r1 - 1``.

    ``shares``: (r1 - r0) x n_k strings (None when not asked for);
    ``outputs``: (r1 - r0) x d_v strings; ``keys``: the span of keys read;
    ``fallbacks``: entries decided by the exact per-entry path.
    """

    r0: int
    r1: int
    shares: list | None
    outputs: list
    keys: tuple
    fallbacks: int


def certify_block(call, r0: int, r1: int, places: int, shares: bool = True) -> BlockResult:
    """Every share (when ``shares``) and output of rows r0 .. r1 - 1, correctly rounded.

    Shapes: the result's ``shares`` (r1 - r0) x n_k, ``outputs`` (r1 - r0) x
    d_v, decimal strings with ``places`` places.

    Raises:
        InputError: ``places`` is not a whole number from 0 to 50.
    """
    check_places(places)
    c0, c1, b, row, values = block(call, r0, r1, fixed_bits(places))
    n, n_k, d_v = r1 - r0, call.shape["S"], call.shape["E_v"]
    if b is None:       # modifiers, infeasible tables or huge inputs: every entry exactly
        span, outputs, empty = [[]] * n, [[None] * d_v for _ in range(n)], range(n)
        share_cells, output_cells = [], [(i, c) for i in range(n) for c in range(d_v)]
    else:
        span, outputs, (share_cells, output_cells) = bounds_decimals(b, places, shares)
        empty = np.flatnonzero(b.empty).tolist()
    for i, c in output_cells:
        outputs[i][c] = row(r0 + i).combine(values(r0 + i, c)).decimal(places)
    share_text, count = None, len(output_cells)
    if shares:
        zero = format_scaled(0, places)
        share_text = [[zero] * c0 + r + [zero] * (n_k - c1) for r in span]
        skip = set(empty)
        share_cells = [(i, j) for i, j in share_cells if i not in skip]
        for i, j in share_cells:
            share_text[i][c0 + j] = row(r0 + i).share(c0 + j).decimal(places)
        for i in empty:
            share_text[i] = [row(r0 + i).share(j).decimal(places) for j in range(n_k)]
        count += len(share_cells) + len(empty) * n_k
    return BlockResult(r0, r1, share_text, outputs, (c0, c1), count)


def score_top(call, r0: int, r1: int) -> int:
    """The largest |q_i . k_j| (numerators over ``q_den k_den``) over visible pairs of the rows.

    0 when no row sees a key.  Exact, and the same for any split into blocks.
    A float64 product picks the candidates: each of its entries is within
    ``e = gamma_(d+2) d max|q| max|k|``, ``gamma_m = m u / (1 - m u)`` with
    ``u = 2^-53`` (the numerators rounded to float64, then a dot product in
    any order of summation: Higham 2002, sec. 3.1), so the largest |N| is
    among the entries within 2e of the largest float; those are computed
    exactly.  More than 64 candidates:
    every score exactly (:func:`~exactattn.numbers.limbs.score_split`).
    """
    c0, c1 = key_span(call, r0, r1)
    keep = block_keep(call, r0, r1, c0, c1)
    if not keep.any():
        return 0
    (q, _), (k, _), _ = numerators(call)
    q, k = q[r0:r1], k[c0:c1]
    if q.dtype != object and k.dtype != object:
        err = gamma(q.shape[1] + 2) * score_bound(call) + 1     # e, rounded up
        approx = np.abs(q.astype(np.float64) @ k.T.astype(np.float64))
        approx[~keep] = -1.0
        top = float(approx.max())
        slack = 2 * err + 4 * (top + err) * 2.0 ** -52        # and this subtraction's rounding
        rows, cols = np.nonzero(approx >= top - slack)
        if len(rows) <= 64:
            return max(abs(sum(int(a) * int(b) for a, b in zip(q[i].tolist(), k[j].tolist())))
                       for i, j in zip(rows.tolist(), cols.tolist()))
    n = exact_matmul(q, k.T)[keep]
    return max(abs(int(x)) for x in n.tolist())
