"""Bulk certified decimals: every share and output of a head rounded at once, from integers.

With the raw scores written as integers over one common denominator,
``s_ij = N_ij / den``, every share's numerator is ``exp(-u_ij c)`` for the
integer gap ``u_ij = max_k N_ik - N_ij >= 0`` (over visible keys) and the one
constant ``c = 1/(den sqrt(D))``.  Splitting ``u`` into base-2^b digits turns
that into a product of a few table entries ``exp(-a 2^(b l) c)``; the tables
(a few thousand entries) are enclosed by ``arb`` and rounded outwards to F-bit
fixed-point integers.  From there the work is exact integer interval
arithmetic over numpy arrays: products of the tables (rounded down for the
lower end, up for the upper end), row sums, the output sums ``sum_j e_ij
V_jc`` and the rounding decision ``k - 1/2 < 10^places * share < k + 1/2``
compared with integer multiplications only.  Every entry whose interval
touches a rounding boundary (about one in 10^5 at 4 places, and every exact
tie) is handed back to the caller's exact per-entry path, so the printed
digits are always the correctly rounded ones.

Exactness: integer matrix products whose every partial sum is proved below
2^53 run through float64 BLAS, where such integers (and their sums, in any
order) are exact; any larger product goes through ``fmpz_mat``.  No binary
float ever becomes a value.

Possible issues: the tables need ``den sqrt(D)`` below about 2^55; past that
:func:`decimals` returns None and the caller rounds entry by entry.

>>> import numpy as np
>>> keep = np.ones((2, 2), dtype=bool)
>>> s, o, undecided = decimals(np.array([[0, 0], [0, 1]]), 1, None, keep,
...                            np.array([[1], [0]]), 1, 4)
>>> s, o, undecided
([['0.5000', '0.5000'], ['0.2689', '0.7311']], [['0.5000'], ['0.2689']], ([], []))
"""

from __future__ import annotations

from fractions import Fraction

from .digits import format_scaled, working_precision
from .exact import fmpq_of
from .limbs import abs_max, mix, score_split

__all__ = ["block_bounds", "exact_matmul"]

_EXACT_FLOAT = 1 << 53      # integers below this, and their sums, are exact in float64
_INT64_SAFE = 1 << 62       # headroom for one more addition in int64
_TABLE_BITS = 12            # at most 2^12 table entries per digit of a gap
_MAX_CUT = 1 << 62          # beyond this the gaps do not fit int64


def int_array(ints, shape):
    """Python integers as a numpy array of ``shape``: int64 where every entry fits, else objects."""
    import numpy as np
    ints = [int(v) for v in ints]
    try:
        a = np.array(ints, dtype=np.int64)
        big = a.size and (int(a.max()) >= _INT64_SAFE or int(a.min()) <= -_INT64_SAFE)
    except OverflowError:
        big = True
    if big:
        a = np.array(ints, dtype=object)
    return a.reshape(shape)


def int_rows(rows):
    """Rows of integers (a list of equal-length rows) as one :func:`int_array`."""
    return int_array([v for r in rows for v in r], (len(rows), len(rows[0])))


def mat_ints(m):
    """``(numerators, common denominator)`` of an ``fmpq_mat``: an :func:`int_array` and an int."""
    num, den = m.numer_denom()
    return int_array(num.entries(), (num.nrows(), num.ncols())), int(den)


def exact_matmul(a, b):
    """The exact integer product ``a @ b`` (numpy arrays of integers).

    float64 BLAS when every product and partial sum is proved below 2^53; int64 arrays
    cut into limbs through BLAS (:func:`~exactattn.numbers.limbs.mix`); otherwise
    ``fmpz_mat``.  Returns int64 (where every entry fits) or Python-int (object) arrays.
    """
    import numpy as np
    from flint import fmpz_mat
    inner = a.shape[1]
    ma, mb = abs_max(a), abs_max(b)
    if ma < _EXACT_FLOAT and mb < _EXACT_FLOAT and ma * mb * inner < _EXACT_FLOAT:
        return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.int64)
    if a.dtype != object and b.dtype != object and max(ma, mb) < 2 ** 62:   # mix's limit
        return int_array(mix(a, b).ravel().tolist(), (a.shape[0], b.shape[1]))
    ma = fmpz_mat(a.shape[0], a.shape[1], [int(v) for v in a.ravel().tolist()])
    mb = fmpz_mat(b.shape[0], b.shape[1], [int(v) for v in b.ravel().tolist()])
    prod = ma * mb
    return int_array(prod.entries(), (prod.nrows(), prod.ncols()))


class ExpTables:
    """Integer enclosures ``lo <= 2^F exp(-u c) <= hi`` for integer gaps ``u >= 0``.

    ``c = 1 / (den sqrt(D))`` (``1/den`` without a divisor).  Gaps at or past
    ``cut`` (where ``2^F exp(-u c) < 1``) get ``[0, 1]``.  ``F = 62`` runs in
    uint64 (each product split into 31-bit halves); larger ``F`` in Python ints.
    """

    def __init__(self, den: int, divisor_squared: Fraction | None, F: int):
        from flint import arb
        self.F = F
        self.prec = 2 * F + 64
        with working_precision(self.prec):
            step = arb(den)
            if divisor_squared is not None:
                step *= arb(fmpq_of(divisor_squared)).sqrt()
            self.step = step
            bound = arb(F) * arb.const_log2() * step     # u >= F ln 2 / c => 2^F exp(-uc) <= 1
            self.cut = int(bound.upper().floor().unique_fmpz()) + 2
        self.feasible = self.cut < _MAX_CUT
        if self.feasible:
            nbits = max(self.cut.bit_length(), 1)
            self.levels = -(-nbits // _TABLE_BITS)
            self.bits = -(-nbits // self.levels)

    def _enclose(self, gap: int) -> tuple[int, int]:
        """``2^F exp(-gap c)`` rounded down and up (``gap > 0``)."""
        from flint import arb
        one = 1 << self.F
        with working_precision(self.prec):
            v = (arb(-gap) / self.step).exp() * arb(one)
            return (max(int(v.lower().floor().unique_fmpz()), 0),
                    min(int(v.upper().ceil().unique_fmpz()), one))

    def digit_table(self, level: int):
        """``(lo, hi)`` arrays enclosing ``2^F exp(-(a << bits level) c)`` for every digit
        ``a`` of a level (uint64 for F = 62, else Python ints).

        Built by doubling: entries m to 2m - 1 are entries 0 to m - 1 times the entry at
        m, which is enclosed by one arb exponential; each product is floored (lo) or
        ceiled (hi), so every lo stays below and every hi above the true value: entry a is
        at most ``2 popcount(a) - 1`` units of 2^-F from it on each side.

        >>> t = ExpTables(1, None, 62)
        >>> lo, hi = t.digit_table(0)
        >>> int(lo[0]) == int(hi[0]) == 2**62, bool((lo <= hi).all()), len(lo) == t.cut + 1
        (True, True, True)
        """
        import numpy as np
        F, at = self.F, self.bits * level
        size = min(1 << self.bits, (self.cut >> at) + 1)
        dtype = np.uint64 if F == 62 else object
        one = 1 << F
        lo, hi = np.array([one], dtype=dtype), np.array([one], dtype=dtype)
        m = 1
        while m < size:
            f_lo, f_hi = self._enclose(m << at)
            take = min(m, size - m)
            lo = np.concatenate([lo, _mul_shift(lo[:take], np.full(take, f_lo, dtype=dtype),
                                                F, False)])
            hi = np.concatenate([hi, np.minimum(_mul_shift(
                hi[:take], np.full(take, f_hi, dtype=dtype), F, True), one)])
            m *= 2
        return lo, hi


def _mul_shift(a, b, F: int, up: bool):
    """floor (or ceil when ``up``) of ``a * b / 2^F``, elementwise and exactly.

    For uint64 arrays with F = 62 each factor is split into 31-bit halves so
    that no partial product passes 2^64; nested floors (ceilings) of exact
    quotients equal the floor (ceiling) of the whole.
    """
    import numpy as np
    if a.dtype == object:
        return -((-(a * b)) >> F) if up else (a * b) >> F
    h, m = np.uint64(31), np.uint64((1 << 31) - 1)
    r = np.uint64(m if up else 0)
    a1, a0, b1, b0 = a >> h, a & m, b >> h, b & m
    low = a0 * b0
    low += r
    low >>= h
    np.multiply(a0, b1, out=a0)
    a0 += low
    a0 += r
    np.multiply(b0, a1, out=b0)
    a0 += b0
    a0 >>= h
    np.multiply(a1, b1, out=a1)
    a1 += a0
    return a1


def decimal_strings(k, places: int):
    """``k / 10**places`` formatted for every entry of the integer array k."""
    import numpy as np
    k = np.asarray(k)
    if k.dtype == object and k.size and max(-int(k.min()), int(k.max())) < _INT64_SAFE:
        k = k.astype(np.int64)
    if k.dtype != object and k.size:
        low, high = int(k.min()), int(k.max())
        if high - low <= k.size // 4 + 1024:     # a table of every value in range
            table = np.array([format_scaled(v, places) for v in range(low, high + 1)],
                             dtype=object)
            return table[k - low]
        uniq, inverse = np.unique(k, return_inverse=True)
        table = np.array([format_scaled(int(v), places) for v in uniq.tolist()], dtype=object)
        return table[inverse.reshape(k.shape)]
    out = np.empty(k.shape, dtype=object)
    flat = out.reshape(-1)
    for idx, v in enumerate(k.reshape(-1).tolist()):
        flat[idx] = format_scaled(int(v), places)
    return out


def decimals(num, den: int, divisor_squared: Fraction | None, keep, values_num, values_den: int,
             places: int):
    """Shares and outputs rounded to ``places``, in bulk; None if the tables are infeasible.

    A large common denominator (exact float32 or float64 inputs: ``den`` of 100 bits and
    more) counts each gap in steps of ``2^shift`` score units, as :func:`block_bounds`
    does: ``exp`` of a gap between two steps lies between the values at the steps around it.

    Shapes: ``num`` n_q x n_k integer raw-score numerators over ``den``;
    ``keep`` n_q x n_k booleans (True = visible; every row must see a key);
    ``values_num`` n_k x d_v integers over ``values_den``.

    Returns ``(shares, outputs, (share_cells, output_cells))``: lists of
    strings, and the (i, j) / (i, c) cells the integer intervals could not
    decide, which the caller must fill from the exact per-entry path.
    """
    import numpy as np
    keep, empty = _seen(keep)
    cached = block_tables(den, divisor_squared, fixed_bits(places))
    if cached is None:
        return None
    tables, shift = cached[:2]

    # gaps u_ij = max over visible k of N_ik - N_ij >= 0 (hidden: -1), clipped to the tables
    low = num.min() if num.dtype != object else min(num.ravel().tolist())
    # hidden entries may lie above the row maximum: their gaps 0 here, -1 below
    gaps = np.where(keep, np.where(keep, num, low).max(axis=1)[:, None] - num, 0)
    between = None
    if shift:                                  # floor(gap / 2^shift), and whether it was exact
        if gaps.dtype != object and shift > 62:
            gaps = gaps.astype(object)
        between = np.asarray(gaps % (1 << shift) != 0, dtype=bool)
        gaps = gaps >> shift
    if gaps.dtype == object:
        gaps = np.minimum(gaps, tables.cut).astype(np.int64)
    gaps = np.where(keep, gaps, -1)
    return bounds_decimals(_enclosed(cached, gaps, between, values_num, values_den, empty, 0),
                           places)


# --------------------------------------------------------------------------- row blocks
# One block of query rows against the keys it may see (exactattn.blocks): the enclosures of
# decimals(), with scores and mixes as exact limb products through BLAS (exactattn.numbers.limbs), gaps
# counted in steps of 2^shift when the common denominator is large (float inputs: a step is
# about 2^-55 in the exponent), the digit tables enclosed once per process, and every entry's
# bounds from those tables alone, so that no entry depends on the rows it is computed with.
from functools import lru_cache            # noqa: E402  (this section's own imports)
from typing import Any, NamedTuple         # noqa: E402

#: the largest gap, counted in steps of 2^shift score units, has at most this many bits
GAP_BITS = 60


def fixed_bits(places: int) -> int:
    """The fixed-point bits F of the exponentials that decide ``places`` decimals."""
    return 62 if places <= 6 else 4 * places + 40


@lru_cache(maxsize=8)
def block_tables(den: int, divisor_squared, F: int, min_shift: int = 0):
    """``(tables, shift, digit tables, lower end of one step)``, or None if infeasible."""
    tables = ExpTables(den, divisor_squared, F)
    shift = max(min_shift, tables.cut.bit_length() - GAP_BITS, 0)
    if shift:                   # steps of 2^shift units: den sqrt(D) / 2^shift per unit exponent
        d2 = Fraction(den, 1 << shift) ** 2 * (1 if divisor_squared is None else divisor_squared)
        tables = ExpTables(1, d2, F)
    if not tables.feasible:
        return None
    levels = [tables.digit_table(level) for level in range(tables.levels)]
    return tables, shift, levels, tables._enclose(1)[0]


def gap_bounds(cached, gaps):
    """(lo, hi) / 2^F around exp(-gap step), from the digit tables only (gap -1: hidden)."""
    import numpy as np
    tables, _, levels, _ = cached
    F, cut, bits = tables.F, tables.cut, tables.bits
    v = np.clip(gaps, 0, cut)
    lo = hi = None
    for level, (tlo, thi) in enumerate(levels):
        digit = (v >> (bits * level)) & ((1 << bits) - 1)
        dlo, dhi = tlo[digit], thi[digit]
        lo, hi = (dlo, dhi) if lo is None else (_mul_shift(lo, dlo, F, False),
                                                _mul_shift(hi, dhi, F, True))
    lo[gaps >= cut] = 0
    hi[gaps >= cut] = 1
    lo[gaps < 0] = 0
    hi[gaps < 0] = 0
    return lo, hi


class BlockBounds(NamedTuple):
    """Enclosures of a block: r x m ``lo/2^F <= e_ij <= hi/2^F`` (0 where hidden; 1 at the row
    maximum), r x 1 exact row sums ``den_lo``/``den_hi``, r x d_v outputs in ``[a_lo/b_lo,
    a_hi/b_hi]``; ``empty`` rows see no key (left to the per-entry path); ``top`` the largest
    |N| over visible pairs (scores N / den)."""

    lo: Any
    hi: Any
    F: int
    den_lo: Any
    den_hi: Any
    a_lo: Any
    a_hi: Any
    b_lo: Any
    b_hi: Any
    empty: Any
    top: int


def block_bounds(q, q_den: int, k, k_den: int, divisor_squared, keep, values_num,
                 values_den: int, F: int = 62, score_bound: int | None = None
                 ) -> BlockBounds | None:
    """The enclosures of a block of query rows from the exact inputs; None: use entries.

    Shapes: q r x d_k over ``q_den``, k m x d_k over ``k_den`` (int64
    numerators), ``keep`` r x m booleans, ``values_num`` m x d_v int64 over
    ``values_den``.  Scores ``N = q k^T`` over ``q_den k_den`` are exact
    (:func:`~exactattn.numbers.limbs.score_split`); gaps to the row maximum count
    steps of 2^shift, and each ``exp`` is enclosed between the steps around
    its gap.  ``score_bound`` bounds |N| over the whole call (default: this
    block's ``d_k max|q| max|k|``; it must be a true bound): with it the steps
    are the same for every block.  None when the tables are infeasible or an input too large for
    int64 limbs.

    >>> import numpy as np
    >>> b = block_bounds(np.array([[0], [1]]), 1, np.array([[0], [1]]), 1, None,
    ...                  np.ones((2, 2), dtype=bool), np.array([[1], [0]]), 1)
    >>> bounds_decimals(b, 4)[:2]
    ([['0.5000', '0.5000'], ['0.2689', '0.7311']], [['0.5000'], ['0.2689']])
    """
    import numpy as np
    if q.dtype == object or k.dtype == object or values_num.dtype == object or \
            keep.shape[1] == 0:
        return None
    if score_bound is None:
        score_bound = q.shape[1] * abs_max(q) * abs_max(k)
    cached = block_tables(q_den * k_den, divisor_squared, F, score_bound.bit_length() - 59)
    if cached is None:
        return None
    split = score_split(q, k, cached[1], score_bound)
    if split is None:
        return None
    high, low = split
    keep, empty = _seen(keep)
    ends = []                # each row's largest and smallest N, as (high, low)
    for pick, fill in ((np.max, np.iinfo(np.int64).min), (np.min, np.iinfo(np.int64).max)):
        h = pick(np.where(keep, high, fill), axis=1)[:, None]
        lo_fill = -1 if pick is np.max else 1 << 62
        ends.append((h, pick(np.where(keep & (high == h), low, lo_fill), axis=1)[:, None]))
    top = max((abs((int(h) << cached[1]) + int(x)) for hs, ls in ends
               for h, x in zip(hs.ravel().tolist(), ls.ravel().tolist())), default=0)
    (h_max, l_max), _ = ends
    gaps = np.where(keep, h_max - high - (low > l_max), -1)     # floor(gap / 2^shift)
    between = keep & (low != l_max) if cached[1] else None
    del high, low, ends
    return _enclosed(cached, gaps, between, values_num, values_den, empty, top)


def _seen(keep):
    """``(keep, empty)``: the rows that see no key (left to the per-entry path) marked
    ``empty`` and given every key in a copy of ``keep``, so that their sums are not zero."""
    empty = ~keep.any(axis=1)
    if empty.any():
        keep = keep.copy()
        keep[empty] = True
    return keep, empty


def _row_sums(x):
    """The exact sum of each row of x, r x 1 Python ints (uint64 summed as two 31-bit halves)."""
    import numpy as np
    if x.dtype == object:
        sums = x.sum(axis=1)
    else:
        h, m = np.uint64(31), np.uint64((1 << 31) - 1)
        sums = (x >> h).sum(axis=1).astype(object) * (1 << 31) + (x & m).sum(axis=1).astype(object)
    return sums.astype(object)[:, None]


def _enclosed(cached, gaps, between, values_num, values_den: int, empty, top: int
              ) -> BlockBounds:
    """The :class:`BlockBounds` of the gaps ``floor(gap / 2^shift)`` to the row maximum (-1:
    hidden) of :func:`block_tables`' ``cached``; ``between`` (None: shift 0) marks the gaps
    strictly between two steps.  The output sums ``e @ V`` lie in ``lo @ V +- (hi - lo) @ |V|``."""
    import numpy as np
    F = cached[0].F
    lo, hi = gap_bounds(cached, gaps)       # e_ij in [lo, hi] / 2^F
    if between is not None and between.any():  # its lower end one step further out
        lo = np.where(between, _mul_shift(lo, np.full(lo.shape, cached[3], dtype=lo.dtype), F,
                                          False), lo)
    if lo.dtype == object or values_num.dtype == object:
        mid = exact_matmul(lo, values_num).astype(object)
        rad = exact_matmul(hi - lo, abs(values_num)).astype(object)
    else:       # limbs through BLAS straight away: the float path's checks cost more here
        mid = mix(lo.astype(np.int64), values_num)
        rad = mix((hi - lo).astype(np.int64), abs(values_num))
    den_lo, den_hi = _row_sums(lo), _row_sums(hi)
    a_lo, a_hi = mid - rad, mid + rad
    d_lo, d_hi = den_lo * values_den, den_hi * values_den
    return BlockBounds(lo, hi, F, den_lo, den_hi, a_lo, a_hi, np.where(a_lo >= 0, d_hi, d_lo),
                       np.where(a_hi <= 0, d_hi, d_lo), empty, top)


def bounds_decimals(b: BlockBounds, places: int, shares: bool = True):
    """A block's shares (None unless ``shares``) and outputs rounded to ``places``, as
    :func:`decimals` returns them: ``(shares, outputs, (share_cells, output_cells))`` with the
    cells the intervals leave undecided.  ``b.F`` at least :func:`fixed_bits` of ``places``."""
    import numpy as np
    scale = 10 ** places
    share_text, share_cells = None, []
    if shares:
        lo, hi, d_lo, d_hi = b.lo, b.hi, b.den_lo, b.den_hi
        if lo.dtype != object and (2 * scale + 1) * lo.shape[1] * (1 << 32) < _INT64_SAFE:
            shift = np.uint64(b.F - 31)       # 31 bits are plenty for the shares: int64
            lo = (lo >> shift).astype(np.int64)
            hi = ((hi + np.uint64((1 << (b.F - 31)) - 1)) >> shift).astype(np.int64)
            d_lo, d_hi = lo.sum(axis=1)[:, None], hi.sum(axis=1)[:, None]
        elif lo.dtype != object:              # uint64 times 2 * scale would wrap: Python ints
            lo, hi = lo.astype(object), hi.astype(object)
        top = 2 * scale * lo
        k = (top + d_hi) // (2 * d_hi)
        decided = np.asarray((top > (2 * k - 1) * d_hi) & (2 * scale * hi < (2 * k + 1) * d_lo),
                             dtype=bool)
        share_text = decimal_strings(k, places).tolist()
        decided[b.empty] = False
        share_cells = [(int(i), int(j)) for i, j in zip(*np.nonzero(~decided))]
    top_lo, top_hi = 2 * scale * b.a_lo, 2 * scale * b.a_hi
    k = (top_lo + b.b_lo) // (2 * b.b_lo)
    decided = np.asarray((top_lo > (2 * k - 1) * b.b_lo) & (top_hi < (2 * k + 1) * b.b_hi),
                         dtype=bool)
    outputs = decimal_strings(k, places).tolist()
    decided[b.empty] = False
    output_cells = [(int(i), int(c)) for i, c in zip(*np.nonzero(~decided))]
    return share_text, outputs, (share_cells, output_cells)
