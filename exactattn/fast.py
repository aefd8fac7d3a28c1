"""The fast engine: exact projections and scores through python-flint, certified shares in bulk.

The same head as the pencil engine (Vaswani et al. 2017, sec. 3.2.1), evaluated
for large n::

    queries = x W_Q^T, keys = x W_K^T, values = x W_V^T     fmpq_mat products (exact)
    raw scores = queries keys^T                             fmpq_mat product (exact)
    shares[i][j] = exp(s_ij / sqrt(D)) / sum_k exp(s_ik / sqrt(D))
    outputs[i]   = sum_j shares[i][j] values[j]

Every intermediate stays a python-flint type until it is asked for:
``trace.queries``, ``trace.raw_scores`` ... turn an ``fmpq_mat`` into lists of
``Fraction`` on first access (for a 1024 x 1024 score matrix that alone costs
seconds, so nothing converts what nobody reads).  ``trace.share(i, j)`` and
``trace.output(i, c)`` build the exact :class:`~exactattn.softmax.SoftmaxRow`
of row i on demand, so ``.decimal``, ``.exact``, ``.closed_form`` and
``.rational`` work exactly as with the pencil engine.

Certifying a whole matrix at once (:meth:`FastTrace.share_decimals`,
:meth:`FastTrace.output_decimals`) never calls ``exp`` per entry.  With the
raw scores written as integers over one common denominator, ``s_ij = N_ij /
den``, every share's numerator is ``exp(-u_ij c)`` for the integer gap
``u_ij = max_k N_ik - N_ij >= 0`` and the one constant ``c = 1/(den sqrt(D))``.
Splitting ``u`` into base-2^b digits turns that into a product of a few table
entries ``exp(-a 2^(b l) c)``; the tables (a few thousand entries) are enclosed
by ``arb`` and rounded outwards to F-bit fixed-point integers.  From there the
work is exact integer interval arithmetic over numpy arrays: products of the
tables (rounded down for the lower end, up for the upper end), row sums, the
output sums ``sum_j e_ij V_jc`` and the rounding decision
``k - 1/2 < 10^places * share < k + 1/2`` compared with integer
multiplications only.  Every entry whose interval touches a rounding boundary
(about one in 10^5 at 4 places, and every exact tie) is handed to the exact
per-entry path (:meth:`ExpRatio.decimal`: exact rationals round exactly, half
to even; the rest by Ziv's doubling), so the printed digits are always the
correctly rounded ones and the loop always ends.

Exactness: projections and raw scores are exact rationals.  Shares and outputs
are exact closed forms; their decimals are certified.  Integer matrix
products whose every partial sum is proved below 2^53 run through float64
BLAS, where such integers (and their sums, in any order) are exact; any larger
product goes through ``fmpz_mat``.  No binary float ever becomes a value.

Possible issues: the bulk path needs the score denominator times
``sqrt(D)`` below about 2^55; past that (unusual inputs with huge
denominators) the decimals come row by row from the exact per-entry path,
which is correct but about 100 times slower.  No multiply-adds are counted
(``trace.macs`` is None): nothing is counted that did not run.

Reference: Vaswani et al. 2017, "Attention is all you need", sec. 3.2.1.

>>> from exactattn import Head
>>> h = Head([[1, 0], [0, 1]], [[1, 0], [0, 1]], [[1, 0], [0, 1]], divisor="none")
>>> t = attend_fast(h, [[Fraction(0), Fraction(0)], [Fraction(1), Fraction(0)]])
>>> t.raw_scores
[[Fraction(0, 1), Fraction(0, 1)], [Fraction(0, 1), Fraction(1, 1)]]
>>> t.share_decimals(4)         # row 1: exactly 1/2 each; row 2: 1/(1+e), e/(1+e)
[['0.5000', '0.5000'], ['0.2689', '0.7311']]
>>> t.output_decimals(4)
[['0.5000', '0.0000'], ['0.7311', '0.0000']]
>>> t.share(1, 1).closed_form(), t.macs
(E/(1 + E), None)
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Sequence

from .digits import _format_scaled, check_places
from .head import Head, Trace
from .softmax import ExpRatio, SoftmaxRow

__all__ = ["FastTrace", "attend_fast"]

_EXACT_FLOAT = 1 << 53      # integers below this, and their sums, are exact in float64
_INT64_SAFE = 1 << 62       # headroom for one more addition in int64
_TABLE_BITS = 12            # at most 2^12 table entries per digit of a gap
_MAX_CUT = 1 << 62          # beyond this the gaps do not fit int64


# --- conversions ----------------------------------------------------------------
def _to_fmpq_mat(rows: Sequence[Sequence[Fraction]]):
    """A list of rows of ``Fraction`` as an ``fmpq_mat`` (no float on the way)."""
    from flint import fmpq, fmpq_mat
    return fmpq_mat(len(rows), len(rows[0]),
                    [fmpq(e.numerator, e.denominator) for r in rows for e in r])


def _to_fractions(m) -> list[list[Fraction]]:
    """An ``fmpq_mat`` as lists of ``Fraction`` (the slow step this module defers)."""
    num, den = m.numer_denom()
    d = int(den)
    cols = m.ncols()
    flat = [Fraction(int(v), d) for v in num.entries()]
    return [flat[r * cols:(r + 1) * cols] for r in range(m.nrows())]


def _int_array(m):
    """An ``fmpz_mat`` as a numpy array: int64 where every entry fits, else Python ints."""
    import numpy as np
    ints = [int(v) for v in m.entries()]
    try:
        a = np.array(ints, dtype=np.int64)
        big = a.size and (int(a.max()) >= _INT64_SAFE or int(a.min()) <= -_INT64_SAFE)
    except OverflowError:
        big = True
    if big:
        a = np.array(ints, dtype=object)
    return a.reshape(m.nrows(), m.ncols())


def _abs_max(a) -> int:
    return int(abs(a).max()) if a.size else 0


def _exact_matmul(a, b):
    """The exact integer product ``a @ b`` (numpy arrays of integers).

    float64 BLAS when every product and partial sum is proved below 2^53
    (then each is an exactly representable integer, whatever the summation
    order); otherwise ``fmpz_mat``.  Returns int64 or Python-int (object) arrays.
    """
    import numpy as np
    from flint import fmpz_mat
    inner = a.shape[1]
    if _abs_max(a) * _abs_max(b) * inner < _EXACT_FLOAT:
        return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.int64)
    ma = fmpz_mat(a.shape[0], a.shape[1], [int(v) for v in a.ravel().tolist()])
    mb = fmpz_mat(b.shape[0], b.shape[1], [int(v) for v in b.ravel().tolist()])
    return _int_array(ma * mb)


def _exact_matmul_limbs(t, v, F: int):
    """``t @ v`` exactly for non-negative fixed-point ``t`` <= 2^F (uint64 or Python ints).

    Splits ``t`` into 16-bit limbs so that each float64 product stays exact
    (:func:`_exact_matmul` proves it or falls back to ``fmpz_mat``), then adds
    the limbs' products as Python integers.
    """
    import numpy as np
    if t.dtype == object:
        return _exact_matmul(t, v).astype(object)
    total = None
    for shift in range(0, F + 1, 16):
        limb = ((t >> np.uint64(shift)) & np.uint64(0xFFFF)).astype(np.int64)
        part = _exact_matmul(limb, v).astype(object) * (1 << shift)
        total = part if total is None else total + part
    return total


# --- the fixed-point exponential tables ------------------------------------------
class _ExpTables:
    """Integer enclosures ``lo <= 2^F exp(-u c) <= hi`` for integer gaps ``u >= 0``.

    ``c = 1 / (den sqrt(D))`` (``1/den`` without a divisor).  Gaps at or past
    ``cut`` (where ``2^F exp(-u c) < 1``) get ``[0, 1]``.  Small problems
    enclose each distinct gap directly; large ones write ``u`` in base
    ``2^bits`` and multiply the enclosures of the digits' powers
    ``2^F exp(-a 2^(bits l) c)``, rounding down for ``lo`` and up for ``hi``.
    ``F = 62`` runs in uint64 (each product split into 31-bit halves);
    larger ``F`` in Python integers.
    """

    def __init__(self, den: int, divisor_squared: Fraction | None, F: int):
        from flint import arb, ctx, fmpq
        self.F = F
        self.prec = 2 * F + 64
        saved = ctx.prec
        try:
            ctx.prec = self.prec
            step = arb(den)
            if divisor_squared is not None:
                step *= arb(fmpq(divisor_squared.numerator, divisor_squared.denominator)).sqrt()
            self.step = step
            # u >= F ln 2 / c  =>  2^F exp(-u c) <= 1
            bound = arb(F) * arb.const_log2() * step
            self.cut = int(bound.upper().floor().unique_fmpz()) + 2
        finally:
            ctx.prec = saved
        self.feasible = self.cut < _MAX_CUT
        if self.feasible:
            nbits = max(self.cut.bit_length(), 1)
            self.levels = -(-nbits // _TABLE_BITS)
            self.bits = -(-nbits // self.levels)

    def _enclose(self, gaps) -> tuple[list[int], list[int]]:
        """[lo], [hi] for each non-negative integer gap in ``gaps`` (below ``cut``)."""
        from flint import arb, ctx
        one = 1 << self.F
        lo, hi = [], []
        saved = ctx.prec
        try:
            ctx.prec = self.prec
            scale, step = arb(one), self.step
            for g in gaps:
                if g == 0:
                    lo.append(one)
                    hi.append(one)
                    continue
                v = (arb(-g) / step).exp() * scale
                lo.append(int(v.lower().floor().unique_fmpz()))
                hi.append(min(int(v.upper().ceil().unique_fmpz()), one))
        finally:
            ctx.prec = saved
        return lo, hi

    def bounds(self, u):
        """(lo, hi) arrays of the shape of ``u`` (int64 gaps, -1 where masked)."""
        import numpy as np
        F = self.F
        dtype = np.uint64 if F == 62 else object
        masked = u < 0
        past = u >= self.cut
        v = np.clip(u, 0, self.cut)
        table_size = self.levels << self.bits
        if u.size <= table_size:        # few entries: enclose each distinct gap once
            uniq, inverse = np.unique(v, return_inverse=True)
            lo, hi = self._enclose(int(g) for g in uniq.tolist())
            lo = np.array(lo, dtype=dtype)[inverse.reshape(u.shape)]
            hi = np.array(hi, dtype=dtype)[inverse.reshape(u.shape)]
        else:
            lo = hi = None
            mask = (1 << self.bits) - 1
            for level in range(self.levels):
                shift = self.bits * level
                size = min(1 << self.bits, (self.cut >> shift) + 1)
                tlo, thi = self._enclose(a << shift for a in range(size))
                digit = (v >> shift) & mask
                dlo = np.array(tlo, dtype=dtype)[digit]
                dhi = np.array(thi, dtype=dtype)[digit]
                if lo is None:
                    lo, hi = dlo, dhi
                else:
                    lo, hi = _mul_shift(lo, dlo, F, False), _mul_shift(hi, dhi, F, True)
        lo[past] = 0
        hi[past] = 1
        lo[masked] = 0
        hi[masked] = 0
        return lo, hi


def _mul_shift(a, b, F: int, up: bool):
    """floor (or ceil when ``up``) of ``a * b / 2^F``, elementwise and exactly.

    For uint64 arrays with F = 62 (entries <= 2^62) each factor is split into
    31-bit halves so that no partial product passes 2^64:
    ``a b / 2^62 = a1 b1 + (a1 b0 + a0 b1 + a0 b0 / 2^31) / 2^31``, and nested
    floors (ceilings) of exact quotients equal the floor (ceiling) of the whole.
    """
    import numpy as np
    if a.dtype == object:
        return -((-(a * b)) >> F) if up else (a * b) >> F
    h, m = np.uint64(31), np.uint64((1 << 31) - 1)
    r = np.uint64(m if up else 0)
    a1, a0, b1, b0 = a >> h, a & m, b >> h, b & m
    low = a0 * b0                       # in place from here: fewer 8 MB temporaries
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


# --- the trace ---------------------------------------------------------------------
class _LazyRows(Sequence):
    """``trace.rows[i]``: the exact :class:`SoftmaxRow` of row i, built on first use."""

    def __init__(self, trace: "FastTrace"):
        self._trace = trace
        self._rows: dict[int, SoftmaxRow] = {}

    def __len__(self) -> int:
        return self._trace.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        row = self._rows.get(i)
        if row is None:
            t = self._trace
            row = SoftmaxRow(t.raw_score_row(i), t.head.divisor_squared, t.empty_row)
            self._rows[i] = row
        return row


class FastTrace(Trace):
    """A :class:`~exactattn.head.Trace` whose matrices stay python-flint types until read.

    ``query_matrix``, ``key_matrix``, ``value_matrix`` (``fmpq_mat``, n x d_k,
    n x d_k, n x d_v) and ``score_matrix`` (n x n, computed on first use) hold
    the exact values; ``queries``, ``keys``, ``values``, ``raw_scores`` are the
    same as lists of ``Fraction`` (``None`` at masked pairs), converted once on
    first access.  ``macs`` and ``softmax_ops`` are None.
    """

    def __init__(self, head: Head, x: list[list], query_matrix, key_matrix, value_matrix,
                 empty_row: str = "zero"):
        self.head = head
        self.engine = "fast"
        self.x = x
        self.macs = None
        self.softmax_ops = None
        self.empty_row = empty_row
        self.query_matrix = query_matrix
        self.key_matrix = key_matrix
        self.value_matrix = value_matrix
        self._cache: dict[str, Any] = {}
        self._decimals: dict[tuple[str, int], list[list[str]]] = {}
        self._lazy_rows = _LazyRows(self)
        #: entries whose bulk enclosure touched a rounding boundary and were decided by
        #: the exact per-entry path instead (exact ties, or a value very near a boundary)
        self.fallbacks = 0

    def __repr__(self) -> str:
        return f"FastTrace(n={self.n}, {self.head!r})"

    def __eq__(self, other) -> bool:
        return self is other

    __hash__ = object.__hash__

    # exact matrices, converted lazily ------------------------------------------------
    def _cached(self, key: str, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    @property
    def score_matrix(self):
        """The raw scores ``queries keys^T`` as an ``fmpq_mat`` (masked pairs included)."""
        return self._cached("S", lambda: self.query_matrix * self.key_matrix.transpose())

    @property
    def queries(self) -> list[list[Fraction]]:
        return self._cached("queries", lambda: _to_fractions(self.query_matrix))

    @property
    def keys(self) -> list[list[Fraction]]:
        return self._cached("keys", lambda: _to_fractions(self.key_matrix))

    @property
    def values(self) -> list[list[Fraction]]:
        return self._cached("values", lambda: _to_fractions(self.value_matrix))

    def _masked(self, i: int, j: int) -> bool:
        return self.head.causal and j > i

    @property
    def raw_scores(self) -> list[list[Fraction | None]]:
        def make():
            rows = _to_fractions(self.score_matrix)
            if self.head.causal:
                for i, r in enumerate(rows):
                    r[i + 1:] = [None] * (len(r) - i - 1)
            return rows
        return self._cached("raw_scores", make)

    def raw_score_row(self, i: int) -> list[Fraction | None]:
        """Row i of the raw scores as ``Fraction`` (None where masked), without the rest."""
        if "raw_scores" in self._cache:
            return self._cache["raw_scores"][i]
        if "integer_scores" in self._cache:
            num, den = self._cache["integer_scores"]
            return [None if self._masked(i, j) else Fraction(int(v), den)
                    for j, v in enumerate(num[i].tolist())]
        S = self.score_matrix
        out: list[Fraction | None] = []
        for j in range(self.n):
            if self._masked(i, j):
                out.append(None)
            else:
                q = S[i, j]
                out.append(Fraction(int(q.p), int(q.q)))
        return out

    @property
    def rows(self) -> _LazyRows:
        return self._lazy_rows

    def output(self, i: int, c: int) -> ExpRatio:
        """Output column c of query i as an exact :class:`ExpRatio`."""
        if "values" in self._cache:
            column = [r[c] for r in self._cache["values"]]
        else:
            V = self.value_matrix
            column = [Fraction(int(q.p), int(q.q)) for q in (V[j, c] for j in range(self.n))]
        return self.rows[i].combine(column)

    @property
    def outputs(self) -> list[list]:
        return [[self.output(i, c).exact() for c in range(self.head.d_v)]
                for i in range(self.n)]

    # bulk certified decimals ---------------------------------------------------------
    def share_decimals(self, places: int) -> list[list[str]]:
        """Every share, correctly rounded to ``places`` decimals (n x n strings).

        The same strings as ``[[trace.share(i, j).decimal(places) ...]]``,
        decided in bulk from integer enclosures (see the module docstring).

        Raises:
            InputError: ``places`` is not an integer from 0 to 50.
        """
        check_places(places)
        key = ("shares", places)
        if key not in self._decimals:
            self._decimals[key] = self._bulk(places)[0]
        return [list(r) for r in self._decimals[key]]

    def output_decimals(self, places: int) -> list[list[str]]:
        """Every output, correctly rounded to ``places`` decimals (n x d_v strings).

        Raises:
            InputError: ``places`` is not an integer from 0 to 50.
        """
        check_places(places)
        key = ("outputs", places)
        if key not in self._decimals:
            self._decimals[key] = self._bulk(places)[1]
        return [list(r) for r in self._decimals[key]]

    def _integer_scores(self):
        """(numerators as a numpy array, common denominator) of the raw scores."""
        def make():
            qn, qd = self.query_matrix.numer_denom()
            kn, kd = self.key_matrix.numer_denom()
            return _exact_matmul(_int_array(qn), _int_array(kn).T), int(qd) * int(kd)
        return self._cached("integer_scores", make)

    def _bulk(self, places: int):
        result = self._bulk_integer(places)
        if result is None:  # denominators too large for the tables: row by row
            n, d_v = self.n, self.head.d_v
            result = ([[self.share(i, j).decimal(places) for j in range(n)] for i in range(n)],
                      [[self.output(i, c).decimal(places) for c in range(d_v)]
                       for i in range(n)])
        self._decimals[("shares", places)], self._decimals[("outputs", places)] = result
        return result

    def _bulk_integer(self, places: int):
        import numpy as np
        n = self.n
        F = 62 if places <= 6 else 4 * places + 40
        scale = 10 ** places
        num, den = self._integer_scores()
        tables = _ExpTables(den, self.head.divisor_squared, F)
        if not tables.feasible:
            return None

        # gaps u_ij = max_k N_ik - N_ij >= 0 (masked: -1), clipped to the tables' range
        if self.head.causal:
            visible = np.tri(n, dtype=bool)
            low = num.min() if num.dtype != object else min(num.ravel().tolist())
            row_max = np.where(visible, num, low).max(axis=1)
        else:
            visible = None
            row_max = num.max(axis=1)
        gaps = row_max[:, None] - num
        if gaps.dtype == object:
            gaps = np.minimum(gaps, tables.cut).astype(np.int64)
        if visible is not None:
            gaps = np.where(visible, gaps, -1)
        lo, hi = tables.bounds(gaps)       # e_ij in [lo, hi] / 2^F

        # row sums, exact (uint64 entries summed as two 31-bit halves)
        if lo.dtype == object:
            den_lo, den_hi = lo.sum(axis=1), hi.sum(axis=1)
        else:
            h, m = np.uint64(31), np.uint64((1 << 31) - 1)
            den_lo, den_hi = ((x >> h).sum(axis=1).astype(object) * (1 << 31)
                              + (x & m).sum(axis=1).astype(object) for x in (lo, hi))
        den_lo, den_hi = den_lo.astype(object)[:, None], den_hi.astype(object)[:, None]

        # shares: y = scale * e / sum_k e, rounded to nearest; decided when the whole
        # interval lies strictly inside (k - 1/2, k + 1/2)
        if lo.dtype == object or (2 * scale + 1) * n * (1 << 32) >= _INT64_SAFE:
            s_lo, s_hi, d_lo, d_hi = lo, hi, den_lo, den_hi
        else:  # 31 bits are plenty for the shares: int64 throughout
            shift = np.uint64(F - 31)
            s_lo = (lo >> shift).astype(np.int64)
            s_hi = ((hi + np.uint64((1 << (F - 31)) - 1)) >> shift).astype(np.int64)
            d_lo = s_lo.sum(axis=1)[:, None]
            d_hi = s_hi.sum(axis=1)[:, None]
        top = 2 * scale * s_lo
        k = (top + d_hi) // (2 * d_hi)
        decided = np.asarray((top > (2 * k - 1) * d_hi)
                             & (2 * scale * s_hi < (2 * k + 1) * d_lo), dtype=bool)
        shares = _strings(k, places).tolist()
        self.fallbacks += int((~decided).sum())
        for i, j in zip(*np.nonzero(~decided)):
            shares[i][j] = self.share(int(i), int(j)).decimal(places)

        # outputs: sum_j e_ij V_jc / (vd sum_j e_ij); the sum is lo @ V, within
        # (hi - lo) @ |V| either way
        vn_mat, vd = self.value_matrix.numer_denom()
        vn, vd = _int_array(vn_mat), int(vd)
        mid = _exact_matmul_limbs(lo, vn, F)
        width = hi - lo
        if width.dtype != object:
            width = width.astype(np.int64)
        rad = _exact_matmul(width, abs(vn)).astype(object)
        a_lo, a_hi = mid - rad, mid + rad
        dlo, dhi = den_lo * vd, den_hi * vd
        pos, neg = a_lo >= 0, a_hi <= 0
        b_lo = np.where(pos, dhi, dlo)          # y_lo = scale a_lo / b_lo
        b_hi = np.where(neg, dhi, dlo)          # y_hi = scale a_hi / b_hi
        top_lo, top_hi = 2 * scale * a_lo, 2 * scale * a_hi
        k = (top_lo + b_lo) // (2 * b_lo)
        decided = np.asarray((top_lo > (2 * k - 1) * b_lo)
                             & (top_hi < (2 * k + 1) * b_hi), dtype=bool)
        outputs = _strings(k, places).tolist()
        self.fallbacks += int((~decided).sum())
        for i, c in zip(*np.nonzero(~decided)):
            outputs[i][c] = self.output(int(i), int(c)).decimal(places)
        return shares, outputs


def _strings(k, places: int):
    """``k / 10**places`` formatted for every entry of the integer array k."""
    import numpy as np
    k = np.asarray(k)
    if k.dtype == object and k.size and max(-int(k.min()), int(k.max())) < _INT64_SAFE:
        k = k.astype(np.int64)
    if k.dtype != object and k.size:
        low, high = int(k.min()), int(k.max())
        if high - low <= k.size // 4 + 1024:     # a table of every value in range
            table = np.array([_format_scaled(v, places) for v in range(low, high + 1)],
                             dtype=object)
            return table[k - low]
        uniq, inverse = np.unique(k, return_inverse=True)
        table = np.array([_format_scaled(int(v), places) for v in uniq.tolist()], dtype=object)
        return table[inverse.reshape(k.shape)]
    out = np.empty(k.shape, dtype=object)
    flat = out.reshape(-1)
    for idx, v in enumerate(k.reshape(-1).tolist()):
        flat[idx] = _format_scaled(int(v), places)
    return out


def attend_fast(head: Head, xs: list[list[Fraction]], empty_row: str = "zero") -> FastTrace:
    """Run ``head`` over validated token rows ``xs`` with python-flint matrices.

    ``queries = xs W_Q^T`` etc. as ``fmpq_mat`` products (the head stores its
    weights in the slots layout); the raw scores ``queries keys^T`` are formed
    when first needed.  Shares and outputs are exact on demand
    (``trace.share(i, j)``) and certified in bulk (``trace.share_decimals``).

    Shapes: ``xs`` is n x d_model (``Fraction`` entries, as :func:`attend`
    validates them); queries, keys n x d_k; values n x d_v; scores n x n.

    Reference: Vaswani et al. 2017, sec. 3.2.1.

    >>> from exactattn.examples import chronicle
    >>> ex = chronicle()
    >>> t = attend_fast(ex.head, ex.x)
    >>> t.queries[1], t.share_decimals(4)[1]
    ([Fraction(0, 1), Fraction(3, 1), Fraction(1, 2), Fraction(0, 1)], ['0.5800', '0.1216', '0.1769', '0.1216'])
    """
    X = _to_fmpq_mat(xs)
    W_Q, W_K, W_V = (_to_fmpq_mat(m) for m in (head.W_Q, head.W_K, head.W_V))
    return FastTrace(head, xs, X * W_Q.transpose(), X * W_K.transpose(),
                     X * W_V.transpose(), empty_row)
