"""One attention head, and ``attend``: tokens -> projections -> scores -> shares -> outputs.

Scaled dot-product attention (Vaswani et al. 2017, sec. 3.2.1), evaluated exactly:

    queries = x W_Q,  keys = x W_K,  values = x W_V          (n x d_k, n x d_k, n x d_v)
    raw scores[i][j] = queries[i] . keys[j]                   (n x n)
    scaled scores    = raw scores / divisor                   (divisor = sqrt(d_k) by default)
    shares[i]        = softmax(scaled scores[i])              (n x n, each row sums to 1)
    outputs[i]       = sum_j shares[i][j] values[j]           (n x d_v)

Two weight layouts give the same numbers: ``slots`` (each matrix is d_k lists
of d_model numbers, one per output slot, ``q = W_Q x``, as in the worked
example) and ``rows`` (d_model lists of d_k numbers, ``q = x @ W_Q``, as in
PyTorch and nanoGPT).

Three engines, agreeing exactly wherever two can run:

* ``pencil``: explicit loops; every multiply-add (MAC) is counted where it
  happens, inside the innermost loop.  The loops run on integers over one
  common denominator per matrix (the same sums of products as on the
  ``Fraction`` entries, without normalising a fraction at every step) and
  return ``Fraction``.  Tables and :mod:`exactattn.cost` read these counts.
* ``symbolic``: the same loops over sympy expressions; any entry of x or a
  weight may be a symbol.  Scores are polynomials, shares ``exp`` ratios.
* ``fast``: projections and scores as python-flint ``fmpq_mat`` products
  (exact rationals), shares and outputs certified through ``arb``.  No
  counters run (``trace.macs`` is None): nothing is counted that did not run.

>>> from exactattn.examples import chronicle
>>> trace = attend(chronicle().head, chronicle().x)
>>> trace.queries[1]
[Fraction(0, 1), Fraction(3, 1), Fraction(1, 2), Fraction(0, 1)]
>>> trace.raw_scores[1]
[Fraction(25, 8), Fraction(0, 1), Fraction(3, 4), Fraction(0, 1)]
>>> [trace.share(1, j).decimal(4) for j in range(4)]
['0.5800', '0.1216', '0.1769', '0.1216']
>>> trace.macs
{'projections': 192, 'scores': 64, 'mix': 64}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from math import lcm
from typing import Any, Sequence

from .errors import InputError, ShapeError
from .exact import is_symbolic, parse_divisor, to_matrix
from .softmax import ExpRatio, SoftmaxRow

__all__ = ["ENGINES", "LAYOUTS", "Head", "Trace", "attend"]

LAYOUTS = ("slots", "rows")
ENGINES = ("auto", "pencil", "symbolic", "fast")
_DEFAULT = object()


def _transpose(m: list[list]) -> list[list]:
    return [list(col) for col in zip(*m)]


class Head:
    """A single attention head: ``W_Q``, ``W_K``, ``W_V``, a divisor and a causal flag.

    Shapes:
        ``slots`` layout: W_Q, W_K are d_k x d_model, W_V is d_v x d_model.
        ``rows`` layout:  W_Q, W_K are d_model x d_k, W_V is d_model x d_v.

    Args:
        divisor: default ``sqrt(d_k)``; any positive exact number, ``"sqrt(q)"``,
            or ``None``/``"none"`` for no scaling.  Stored by its square
            (``divisor_squared``) so every divisor stays exact.
        causal: when True, query i sees keys 0..i only (top-left aligned).
        floats: how a binary float entry is read: None (refuse), ``"exact"``
            (its binary value) or ``"decimal"`` (its shortest repr).
        symbolic: allow sympy symbols and expressions as entries.

    Raises:
        ShapeError: a matrix of the wrong shape, ragged rows, empty matrices.
        InputError: an unknown layout, a bad entry or divisor.
        FloatInputError: a binary float with ``floats`` unset.

    >>> h = Head([[1, 0]], [[0, 1]], [[1, 1]], layout="slots")
    >>> (h.d_model, h.d_k, h.d_v, h.divisor_squared)
    (2, 1, 1, Fraction(1, 1))
    >>> Head([[1, 0]], [[0, 1, 2]], [[1, 1]])
    Traceback (most recent call last):
    ...
    exactattn.errors.ShapeError: W_K must be 1 x 2 in the slots layout (got 1 x 3)
    """

    def __init__(self, W_Q, W_K, W_V, *, layout: str = "slots", divisor: Any = _DEFAULT,
                 causal: bool = False, floats: str | None = None, symbolic: bool = False):
        if layout not in LAYOUTS:
            raise InputError(f"layout must be 'slots' or 'rows' (got {layout!r})")
        if not isinstance(causal, bool):
            raise InputError(f"causal must be true or false (got {causal!r})")
        self.layout = layout
        self.causal = causal
        hint = f" in the {layout} layout"
        q = to_matrix(W_Q, name="W_Q", floats=floats, symbolic=symbolic)
        if layout == "slots":
            d_k, d_model = len(q), len(q[0])
            k = to_matrix(W_K, name="W_K", shape=(d_k, d_model), floats=floats,
                          symbolic=symbolic, hint=hint)
            v = to_matrix(W_V, name="W_V", shape=(None, d_model), floats=floats,
                          symbolic=symbolic, hint=hint)
            slots = (q, k, v)
        else:
            d_model, d_k = len(q), len(q[0])
            k = to_matrix(W_K, name="W_K", shape=(d_model, d_k), floats=floats,
                          symbolic=symbolic, hint=hint)
            v = to_matrix(W_V, name="W_V", shape=(d_model, None), floats=floats,
                          symbolic=symbolic, hint=hint)
            slots = tuple(_transpose(m) for m in (q, k, v))
        self.d_model = d_model
        self.d_k = d_k
        self.d_v = len(slots[2])
        # Internally every matrix is kept in the slots layout: row s = output slot s.
        self.W_Q, self.W_K, self.W_V = slots
        self.symbolic = any(is_symbolic(e) for m in slots for r in m for e in r)
        self.divisor_squared = (Fraction(d_k) if divisor is _DEFAULT
                                else parse_divisor(divisor, floats=floats))

    def weights(self, name: str, layout: str | None = None) -> list[list]:
        """``W_Q``/``W_K``/``W_V`` in ``layout`` (default: the layout it was given in)."""
        layout = layout or self.layout
        if name not in ("W_Q", "W_K", "W_V"):
            raise InputError(f"name must be W_Q, W_K or W_V (got {name!r})")
        m = getattr(self, name)
        return [list(r) for r in m] if layout == "slots" else _transpose(m)

    @property
    def divisor(self):
        """The divisor, exactly: a ``Fraction`` when rational (``sqrt(4)`` -> 2),
        a sympy ``sqrt`` otherwise (``sqrt(2)``), None for no scaling."""
        if self.divisor_squared is None:
            return None
        d = self.divisor_squared
        root = _rational_sqrt(d)
        if root is not None:
            return root
        import sympy
        return sympy.sqrt(sympy.Rational(d.numerator, d.denominator))

    def scale(self, raw):
        """``raw / divisor`` exactly: a ``Fraction`` when both are rational, else sympy.

        >>> Head([[1]], [[1]], [[1]], divisor="2").scale(Fraction(3))
        Fraction(3, 2)
        >>> Head([[1]], [[1]], [[1]], divisor="sqrt(2)").scale(Fraction(1))
        sqrt(2)/2
        """
        d = self.divisor
        if d is None:
            return raw
        if isinstance(raw, Fraction) and isinstance(d, Fraction):
            return raw / d
        import sympy
        if isinstance(raw, Fraction):
            raw = sympy.Rational(raw.numerator, raw.denominator)
        return sympy.expand(raw / d)

    def __repr__(self) -> str:
        return (f"Head(d_model={self.d_model}, d_k={self.d_k}, d_v={self.d_v}, "
                f"layout={self.layout!r}, divisor={self.divisor}, causal={self.causal})")


@dataclass
class Trace:
    """Every intermediate of one run of ``attend``.

    Shapes: x n x d_model; queries, keys n x d_k; values n x d_v; raw_scores
    n x n (``None`` at masked pairs, which the engine never computes);
    shares n x n; outputs n x d_v.  ``macs`` counts multiply-adds by stage
    (``projections``, ``scores``, ``mix``), counted inside the loops by the
    pencil and symbolic engines; None for the fast engine.  ``softmax_ops``
    counts the softmax's exponentials, additions and divisions separately.
    """

    head: Head
    engine: str
    x: list[list]
    queries: list[list]
    keys: list[list]
    values: list[list]
    raw_scores: list[list]
    rows: list  # SoftmaxRow per query (numeric engines) or sympy rows (symbolic)
    macs: dict | None
    softmax_ops: dict | None = None
    _outputs: Any = field(default=None, repr=False)

    @property
    def n(self) -> int:
        return len(self.x)

    @property
    def divisor(self):
        return self.head.divisor

    @property
    def scaled_scores(self) -> list[list]:
        """raw / divisor: a ``Fraction`` when the divisor is rational, else sympy; None if masked."""
        return [[self.scaled_score(i, j) for j in range(self.n)] for i in range(self.n)]

    def scaled_score(self, i: int, j: int):
        r = self.raw_scores[i][j]
        return None if r is None else self.head.scale(r)

    def share(self, i: int, j: int):
        """The share of key j for query i: an :class:`ExpRatio` (numeric) or a sympy expression."""
        if self.engine == "symbolic":
            return self.rows[i][j]
        return self.rows[i].share(j)

    @property
    def shares(self) -> list[list]:
        """Exact shares: ``Fraction`` where rational, sympy closed forms elsewhere."""
        if self.engine == "symbolic":
            return [list(r) for r in self.rows]
        return [[self.rows[i].share(j).exact() for j in range(self.n)] for i in range(self.n)]

    def output(self, i: int, c: int):
        """Output column c of query i: an :class:`ExpRatio` (numeric) or sympy."""
        return self._outputs[i][c]

    @property
    def outputs(self) -> list[list]:
        if self.engine == "symbolic":
            return [list(r) for r in self._outputs]
        return [[o.exact() for o in row] for row in self._outputs]

    def row_sums_to_one(self, i: int) -> bool:
        if self.engine == "symbolic":
            import sympy
            return sympy.cancel(sympy.together(sum(self.rows[i]))) == 1
        return self.rows[i].sum_is_one()


def _rational_sqrt(q: Fraction) -> Fraction | None:
    from math import isqrt
    a, b = isqrt(q.numerator), isqrt(q.denominator)
    return Fraction(a, b) if a * a == q.numerator and b * b == q.denominator else None


def _check_x(head: Head, x, floats, symbolic) -> list[list]:
    if hasattr(x, "tolist") and not isinstance(x, (list, tuple)):
        x = x.tolist()
    if isinstance(x, (list, tuple)) and len(x) == 0:
        raise ShapeError("x must have at least one token (got none)")
    if isinstance(x, (list, tuple)):
        for i, r in enumerate(x):  # name the first token of the wrong width
            if isinstance(r, (list, tuple)) and len(r) != head.d_model:
                raise ShapeError(
                    f"token {i + 1} must have d_model = {head.d_model} numbers (got {len(r)})")
    return to_matrix(x, name="x", shape=(None, head.d_model), floats=floats,
                     symbolic=symbolic)


def _ints(m: list[list]) -> tuple[list[list[int]], int] | None:
    """``m`` as integers over one common denominator, or None if an entry is not rational.

    The pencil loops run on these integers: the same sums of products as on
    the ``Fraction`` entries, without normalising a fraction at every step.
    """
    den = 1
    for r in m:
        for e in r:
            if type(e) is not Fraction and type(e) is not int:
                return None
            den = lcm(den, e.denominator)
    return [[e.numerator * (den // e.denominator) for e in r] for r in m], den


def _project_ints(W: list[list[int]], x: list[list[int]]) -> tuple[list[list[int]], int]:
    """out[i][s] = sum_m W[s][m] x[i][m] over integers (or any ring); returns (out, MACs counted)."""
    macs = 0
    out = []
    for row in x:
        o = []
        for w in W:
            acc = 0
            for wm, xm in zip(w, row):
                acc += wm * xm
                macs += 1
            o.append(acc)
        out.append(o)
    return out, macs


def _score_ints(queries: list[list[int]], keys: list[list[int]],
                visible) -> tuple[list[list], int]:
    """raw[i][j] = queries[i] . keys[j] for j in ``visible(i)`` (None elsewhere); (raw, MACs)."""
    macs = 0
    m = len(keys)
    raw = []
    for i, q in enumerate(queries):
        row: list = [None] * m
        for j in visible(i):
            acc = 0
            for a, b in zip(q, keys[j]):
                acc += a * b
                macs += 1
            row[j] = acc
        raw.append(row)
    return raw, macs


def _softmax_rows(raw: list[list], den: int, divisor_squared, empty_row: str) -> tuple:
    """Each integer row over ``den`` as ``Fraction`` scores and its :class:`SoftmaxRow`.

    Equal rows of scores (two tokens with the same numbers) share one
    :class:`SoftmaxRow`: the same exact shares, built once.
    """
    cache: dict[int, Fraction] = {}
    seen: dict[tuple, tuple] = {}
    fractions, rows = [], []
    for r in raw:
        key = tuple(r)
        hit = seen.get(key)
        if hit is not None:
            fractions.append(list(hit[0]))
            rows.append(hit[1])
            continue
        fr = []
        for a in r:
            if a is None:
                fr.append(None)
                continue
            f = cache.get(a)
            if f is None:
                f = cache[a] = Fraction(a, den)
            fr.append(f)
        sm = SoftmaxRow(fr, divisor_squared, empty_row)
        seen[key] = (fr, sm)
        fractions.append(list(fr))
        rows.append(sm)
    return fractions, rows


def _mix_ints(rows: list, raw: list[list], values: list[list[int]], den: int,
              d_v: int) -> tuple[list[list], int]:
    """outputs[i][c] = sum_j shares[i][j] values[j][c], exactly; (outputs, MACs).

    The exact form of ``sum_j exp(g_j) values[j][c]`` adds each visible key's
    value to the coefficient of its gap g_j: one MAC per visible key.  Keys
    with equal raw scores share a gap, so they are grouped by their integer
    score before the loop (a masked row under the ``uniform`` policy has every
    gap 0: one group).
    """
    macs = 0
    outputs = []
    for sm, ri in zip(rows, raw):
        gaps = sm.gaps
        group: dict[int, int] = {}
        keys, slots, first_gaps = [], [], []
        for j, g in enumerate(gaps):
            if g is None:
                continue
            a = 0 if ri[j] is None else ri[j]
            k = group.get(a)
            if k is None:
                k = group[a] = len(first_gaps)
                first_gaps.append(g)
            keys.append(j)
            slots.append(k)
        pairs = list(zip(keys, slots))
        out_row = []
        for c in range(d_v):
            acc = [0] * len(first_gaps)
            for j, k in pairs:
                acc[k] += values[j][c]
                macs += 1
            out_row.append(ExpRatio({g: Fraction(a, den) for g, a in zip(first_gaps, acc)}, sm))
        outputs.append(out_row)
    return outputs, macs


def _fractions(m: list[list[int]], den: int) -> list[list[Fraction]]:
    return [[Fraction(a, den) for a in r] for r in m]


def _project(W: list[list], x: list[list], counter: list[int]) -> list[list]:
    """out[i][s] = sum_m W[s][m] x[i][m]; one MAC per product, added to ``counter[0]``."""
    wi, xi = _ints(W), _ints(x)
    if wi is not None and xi is not None:
        out, macs = _project_ints(wi[0], xi[0])
        counter[0] += macs
        return _fractions(out, wi[1] * xi[1])
    out, macs = _project_ints(W, x)  # the same loop over sympy entries (symbolic engine)
    counter[0] += macs
    return out


def _visible(causal: bool, n_queries: int, n_keys: int, alignment: str = "top-left"):
    """The keys query i sees: all, or j <= i (top-left) / j <= i + n_keys - n_queries
    (bottom-right) under a causal mask."""
    if not causal:
        every = range(n_keys)
        return lambda i: every
    shift = 0 if alignment == "top-left" else n_keys - n_queries
    return lambda i: range(max(0, min(i + shift + 1, n_keys)))


def _pencil_numeric(head: Head, x: list[list], empty_row: str) -> Trace | None:
    """The pencil engine on integers over common denominators (None if not all rational)."""
    xi = _ints(x)
    ws = [_ints(w) for w in (head.W_Q, head.W_K, head.W_V)]
    if xi is None or any(w is None for w in ws):
        return None
    (q, dq), (k, dk), (v, dv) = ((_project_ints(w, xi[0]), wd * xi[1]) for w, wd in ws)
    (q, mq), (k, mk), (v, mv) = q, k, v
    n = len(x)
    raw, score_macs = _score_ints(q, k, _visible(head.causal, n, n))
    raw_f, rows = _softmax_rows(raw, dq * dk, head.divisor_squared, empty_row)
    outputs, mix_macs = _mix_ints(rows, raw, v, dv, head.d_v)
    ops = {"exp": sum(r.exps for r in rows), "add": sum(r.adds for r in rows),
           "div": sum(r.divs for r in rows)}
    trace = Trace(head=head, engine="pencil", x=x, queries=_fractions(q, dq),
                  keys=_fractions(k, dk), values=_fractions(v, dv), raw_scores=raw_f,
                  rows=rows, macs={"projections": mq + mk + mv, "scores": score_macs,
                                   "mix": mix_macs}, softmax_ops=ops)
    trace._outputs = outputs
    return trace


def _pencil(head: Head, x: list[list], symbolic: bool, empty_row: str) -> Trace:
    if not symbolic:
        trace = _pencil_numeric(head, x, empty_row)
        if trace is not None:
            return trace
    counter = [0]
    queries = _project(head.W_Q, x, counter)
    keys = _project(head.W_K, x, counter)
    values = _project(head.W_V, x, counter)
    proj = counter[0]
    n = len(x)
    counter[0] = 0
    raw: list[list] = []
    for i in range(n):
        row = []
        for j in range(n):
            if head.causal and j > i:
                row.append(None)
                continue
            acc = 0
            for a, b in zip(queries[i], keys[j]):
                acc += a * b
                counter[0] += 1
            row.append(acc)
        raw.append(row)
    score_macs = counter[0]
    counter[0] = 0
    if symbolic:
        import sympy
        raw = [[None if r is None else sympy.expand(r) for r in row] for row in raw]
        queries, keys, values = ([[sympy.expand(e) for e in r] for r in m]
                                 for m in (queries, keys, values))
        div = head.divisor
        rows, outputs = [], []
        for i in range(n):
            ex = [sympy.Integer(0) if r is None else
                  sympy.exp(r if div is None else r / div) for r in raw[i]]
            den = sympy.Add(*[e for r, e in zip(raw[i], ex) if r is not None])
            rows.append([e / den for e in ex])
            out_row = []
            for c in range(head.d_v):
                acc = 0
                for j in range(n):
                    if raw[i][j] is None:
                        continue
                    acc += ex[j] * values[j][c]
                    counter[0] += 1
                out_row.append(acc / den)
            outputs.append(out_row)
        ops = None
    else:
        rows = [SoftmaxRow(r, head.divisor_squared, empty_row) for r in raw]
        outputs = []
        for i in range(n):
            sm = rows[i]
            out_row = []
            for c in range(head.d_v):
                # the exact form of sum_j exp(g_j) * values[j][c]: one MAC per visible key
                num: dict = {}
                for j in range(n):
                    g = sm.gaps[j]
                    if g is None:
                        continue
                    num[g] = num.get(g, 0) + values[j][c]
                    counter[0] += 1
                out_row.append(ExpRatio(num, sm))
            outputs.append(out_row)
        ops = {"exp": sum(r.exps for r in rows), "add": sum(r.adds for r in rows),
               "div": sum(r.divs for r in rows)}
    trace = Trace(head=head, engine="symbolic" if symbolic else "pencil", x=x,
                  queries=queries, keys=keys, values=values, raw_scores=raw, rows=rows,
                  macs={"projections": proj, "scores": score_macs, "mix": counter[0]},
                  softmax_ops=ops)
    trace._outputs = outputs
    return trace


def attend(head: Head, x: Sequence[Sequence[Any]], *, engine: str = "auto",
           floats: str | None = None, empty_row: str = "zero") -> Trace:
    """Run ``head`` over the token rows ``x`` and record every intermediate.

    Shapes: ``x`` is n x d_model (one row of numbers per token).

    Args:
        engine: ``"auto"`` (symbolic when any entry is a sympy symbol or
            expression, pencil up to 64 tokens, fast above), ``"pencil"``,
            ``"symbolic"`` or ``"fast"``.
        floats: how binary floats in ``x`` are read (see :mod:`exactattn.exact`).

    Raises:
        ShapeError: no tokens, ragged rows, a token of the wrong width.
        FloatInputError: a binary float with ``floats`` unset.
        InputError: an unknown engine; symbols with a numeric engine.

    Reference: Vaswani et al. 2017, sec. 3.2.1; the worked example (SPEC sec. 2).

    >>> h = Head([[1]], [[1]], [[1]], divisor=None)
    >>> t = attend(h, [[0], [1]])
    >>> t.raw_scores
    [[Fraction(0, 1), Fraction(0, 1)], [Fraction(0, 1), Fraction(1, 1)]]
    >>> t.shares[0]
    [Fraction(1, 2), Fraction(1, 2)]
    >>> t.shares[1][1]
    E/(1 + E)
    """
    if engine not in ENGINES:
        raise InputError(f"engine must be one of {', '.join(ENGINES)} (got {engine!r})")
    want_symbolic = engine == "symbolic" or (engine == "auto" and head.symbolic)
    xs = _check_x(head, x, floats, symbolic=True)
    x_symbolic = any(is_symbolic(e) for r in xs for e in r)
    if engine == "auto":
        want_symbolic = head.symbolic or x_symbolic
        engine = "symbolic" if want_symbolic else ("pencil" if len(xs) <= 64 else "fast")
    elif engine != "symbolic" and (head.symbolic or x_symbolic):
        raise InputError(
            f"engine must be 'symbolic' or 'auto' for symbolic entries (got {engine!r})")
    if engine == "symbolic":
        import sympy

        def s(e):
            return sympy.Rational(e.numerator, e.denominator) if isinstance(e, Fraction) else e
        sym_head = Head.__new__(Head)
        sym_head.__dict__.update(head.__dict__)
        sym_head.W_Q, sym_head.W_K, sym_head.W_V = (
            [[s(e) for e in r] for r in m] for m in (head.W_Q, head.W_K, head.W_V))
        trace = _pencil(sym_head, [[s(e) for e in r] for r in xs], True, empty_row)
        trace.head = head
        return trace
    if engine == "fast":
        from .fast import attend_fast
        return attend_fast(head, xs, empty_row)
    return _pencil(head, xs, False, empty_row)
