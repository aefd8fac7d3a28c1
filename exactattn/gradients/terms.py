"""The exponents of one attention block as powers of one (or two) transcendental numbers.

Write the raw scores of a block over one common denominator, ``S_ij = N_ij /
den`` (integers N), the scale as ``1/sqrt(D)`` and an additive mask (or bias)
as rationals ``m_ij``.  Every visible logit ``x_ij = S_ij / sqrt(D) + m_ij`` is
then

* ``M_ij / E`` for integers M and one E when ``sqrt(D)`` is rational (or there
  is no scale): every exponential is a power of ``t = exp(1/E)``;
* ``N_ij / (den sqrt(D))`` when ``sqrt(D)`` is irrational and no row's
  offsets differ across its keys (a constant offset cancels in the softmax):
  powers of ``t = exp(1/(den sqrt(D)))``;
* ``a_ij / (den sqrt(D)) + b_ij / E`` for integers a, b when ``sqrt(D)`` is
  irrational and some row's offsets differ: monomials ``t^a u^b`` of two
  numbers, ``u = exp(1/E)``.

In the third case ``1/(den sqrt(D))`` and ``1/E`` are linearly independent
over the rationals, so by the Lindemann-Weierstrass theorem t and u are
algebraically independent: a polynomial in them is zero exactly when its
coefficients are.  In every case a polynomial identity in t (and u) is the
exact test of a value (:mod:`exactattn.gradients.values`).

Each row's exponents are shifted by their minimum (so they are whole numbers
from 0), and all of them are divided by their greatest common divisor (the
generator grows by that factor).  Rows whose exponent multisets agree share one
normaliser ``Z = sum_j t^(a_ij)``: a *class*.

Reference: Vaswani et al. 2017, sec. 3.2.1 (the call); Baker, *Transcendental
Number Theory* (1975), Theorem 1.4 (Lindemann-Weierstrass).

>>> import numpy as np
>>> terms = Terms(np.array([[0, 2], [2, 0]]), 4, np.ones((2, 2), dtype=bool), None, None, "zero")
>>> terms.generators, terms.exponents(0), terms.exponents(1)
([(Fraction(1, 2), None)], [(0,), (1,)], [(1,), (0,)])
>>> terms.class_of(0) == terms.class_of(1), terms.normaliser(terms.class_of(0))
(True, t + 1)
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Sequence

from ..call import EMPTY_ROWS
from ..digits import working_precision
from ..exact import rational_sqrt
from ..exponents import fmpq_of, inv_sqrt_ball
from ..options import check_choice

__all__ = ["ROW_KINDS", "Terms"]

#: what a row is: ``ok`` (sees keys), or an empty row under each empty-row answer
ROW_KINDS = ("ok", "zero", "uniform", "nan")


def _gcd_all(values) -> int:
    g = 0
    for v in values:
        g = math.gcd(g, int(v))
        if g == 1:
            break
    return g


class Terms:
    """The exponent structure of a block of query rows against one set of keys.

    Args:
        num: R x S integer raw-score numerators (numpy int64 or object array).
        den: their common denominator.
        keep: R x S booleans, True where a query sees a key.
        offsets: None, or per row None or S rationals added to the scaled
            scores (an additive mask or bias; entries at hidden keys ignored).
        divisor_squared: D (the scores are divided by sqrt(D)); None for no scale.
        empty_row: ``zero``, ``uniform`` or ``nan`` for a row that sees no key.

    Attributes:
        generators: one or two ``(c, D)``: the generator is ``exp(c / sqrt(D))``
            (``exp(c)`` when D is None).
        kinds: per row, one of :data:`ROW_KINDS`.
        paired: True with two generators.

    Under ``uniform`` an empty row has every key at exponent 0 (shares 1/S).
    """

    def __init__(self, num, den: int, keep, offsets: Sequence | None, divisor_squared,
                 empty_row: str):
        import numpy as np
        check_choice(empty_row, "empty_row", EMPTY_ROWS)
        R, S = keep.shape
        self.n_rows, self.n_keys = R, S
        self.empty_row = empty_row
        D = divisor_squared
        root = Fraction(1) if D is None else rational_sqrt(D)
        kinds, visible = [], []
        for i in range(R):
            vis = np.flatnonzero(keep[i])
            if len(vis):
                kinds.append("ok")
            else:
                kinds.append(empty_row)
                vis = np.arange(S) if empty_row == "uniform" else vis
            visible.append([int(j) for j in vis])
        self.kinds, self._visible = kinds, visible
        self._positions: dict = {}
        # offsets relative to each row's first visible key (a constant per row cancels)
        rel = [None] * R
        for i in range(R):
            row = None if offsets is None else offsets[i]
            if row is None or kinds[i] != "ok":
                continue
            base = row[visible[i][0]]
            r = [Fraction(row[j]) - base for j in visible[i]]
            if any(r):
                rel[i] = r
        has_offsets = any(r is not None for r in rel)
        self.paired = root is None and has_offsets
        ints = [[int(num[i, j]) for j in visible[i]] if kinds[i] == "ok" else [0] * len(visible[i])
                for i in range(R)]
        if root is None:            # t = exp(1/(den sqrt D)) (and u = exp(1/E) for offsets)
            first = ints
            gens = [(Fraction(1, den), D)]
            second = None
            if self.paired:
                E = math.lcm(*[m.denominator for r in rel if r is not None for m in r])
                second = [[0] * len(v) if r is None else [int(m * E) for m in r]
                          for v, r in zip(visible, rel)]
                gens.append((Fraction(1, E), None))
        else:                       # rational exponents: one t = exp(1/E)
            base = den * root.numerator
            E = math.lcm(base, *[m.denominator for r in rel if r is not None for m in r]) \
                if has_offsets else base
            f = root.denominator * (E // base)
            first = [[a * f + (0 if r is None else int(r[k] * E)) for k, a in enumerate(row)]
                     for row, r in zip(ints, rel)]
            gens = [(Fraction(1, E), None)]
            second = None
        coords = [first] if second is None else [first, second]
        # shift every row to exponents from 0, then divide by the common divisor
        shifted = []
        for rows in coords:
            out = []
            for row in rows:
                low = min(row) if row else 0
                out.append([a - low for a in row])
            shifted.append(out)
        for k, rows in enumerate(shifted):
            g = _gcd_all(a for row in rows for a in row)
            if g > 1:
                shifted[k] = [[a // g for a in row] for row in rows]
                c, d2 = gens[k]
                gens[k] = (c * g, d2)
        self.generators = gens
        self._exps = [list(zip(*[shifted[k][i] for k in range(len(shifted))]))
                      for i in range(R)]
        self._classes: dict = {}
        self._squares: dict = {}
        self._class_of: list = []
        for i in range(R):
            key = tuple(sorted(self._exps[i])) if kinds[i] in ("ok", "uniform") else None
            self._class_of.append(key)
        self._ctx = None
        self._balls: dict = {}

    # -- structure ---------------------------------------------------------------
    def visible(self, i: int):
        """The keys row i's shares run over (every key for a ``uniform`` empty row)."""
        return self._visible[i]

    def position(self, i: int, j: int) -> int | None:
        """Where key j sits in row i's :meth:`visible` keys (None when the row skips it)."""
        pos = self._positions.get(i)
        if pos is None:
            pos = self._positions[i] = {j: k for k, j in enumerate(self._visible[i])}
        return pos.get(j)

    def exponents(self, i: int) -> list[tuple]:
        """Row i's exponent tuples, one per key of :meth:`visible` (whole numbers from 0)."""
        return self._exps[i]

    def class_of(self, i: int):
        """Row i's normaliser class: the sorted exponent tuples (None for a zero or NaN row)."""
        return self._class_of[i]

    @property
    def one(self) -> tuple:
        """The class of the normaliser 1 (a row with one key): where rational constants live."""
        return ((0,) * len(self.generators),)

    @property
    def context(self):
        """The python-flint ``fmpq_mpoly`` context: variables ``t`` (and ``u``)."""
        if self._ctx is None:
            from flint import fmpq_mpoly_ctx
            names = ("t", "u")[:len(self.generators)]
            self._ctx = fmpq_mpoly_ctx.get(names, "lex")
        return self._ctx

    def normaliser(self, key):
        """The normaliser polynomial ``Z = sum_j t^(a_j)`` of a class (cached)."""
        z = self._classes.get(key)
        if z is None:
            counts: dict = {}
            for e in key:
                counts[e] = counts.get(e, 0) + 1
            z = self._classes[key] = self.context.from_dict(counts)
        return z

    def normaliser_squared(self, key):
        """``Z^2`` of a class (cached): every gradient entry's denominator."""
        hit = self._squares.get(key)
        if hit is None:
            z = self.normaliser(key)
            hit = self._squares[key] = z * z
        return hit

    def poly(self, terms: dict):
        """``{exponent tuple: Fraction}`` as an ``fmpq_mpoly`` of this block."""
        from flint import fmpq
        return self.context.from_dict({e: fmpq(c.numerator, c.denominator)
                                       for e, c in terms.items() if c})

    def generator_balls(self) -> list:
        """``arb`` balls of the generators' exponents c / sqrt(D) at the current precision."""
        from flint import arb
        return [arb(fmpq_of(c)) * (1 if d2 is None else inv_sqrt_ball(d2))
                for c, d2 in self.generators]

    # -- numeric -------------------------------------------------------------------
    def shares(self, prec: int) -> list:
        """Per row, the ``arb`` balls of its shares over :meth:`visible` (None for zero/NaN
        rows), at ``prec`` bits (cached for the last few precisions)."""
        hit = self._balls.get(prec)
        if hit is not None:
            return hit
        from flint import arb
        with working_precision(prec):
            cb = self.generator_balls()
            K = prec + 64
            tiny = arb(0, arb(2) ** -K)
            limit = arb(-K) * arb.const_log2()     # below exp(limit): enclosed by [0, 2^-K]
            cache: dict = {}
            out = []
            for i in range(self.n_rows):
                if self.kinds[i] in ("zero", "nan"):
                    out.append(None)
                    continue
                exps = self._exps[i]
                if len(cb) == 1:
                    top = max(exps)
                    gaps = [(e[0] - top[0],) for e in exps]
                else:
                    xs = [e[0] * cb[0] + e[1] * cb[1] for e in exps]
                    k = max(range(len(xs)), key=lambda j: float(xs[j].mid()))
                    gaps = [(e[0] - exps[k][0], e[1] - exps[k][1]) for e in exps]
                vals = []
                for g in gaps:
                    v = cache.get(g)
                    if v is None:
                        x = sum((a * c for a, c in zip(g, cb)), arb(0))
                        v = cache[g] = tiny if x < limit else x.exp()
                    vals.append(v)
                z = sum(vals, arb(0))
                out.append([v / z for v in vals])
        if len(self._balls) >= 4:
            self._balls.pop(min(self._balls))
        self._balls[prec] = out
        return out

    def generator_text(self) -> str:
        """``t = exp(1/16)`` (and ``u = ...``): what the polynomials' variables stand for.

        >>> import numpy as np
        >>> Terms(np.array([[0, 1]]), 3, np.ones((1, 2), dtype=bool), None, Fraction(2),
        ...       "zero").generator_text()
        't = exp(1/(3 sqrt(2)))'
        """
        parts = []
        for name, (c, d2) in zip(("t", "u"), self.generators):
            if d2 is None:
                parts.append(f"{name} = exp({c})")
                continue
            under = f"sqrt({d2})" if c.denominator == 1 else f"({c.denominator} sqrt({d2}))"
            parts.append(f"{name} = exp({c.numerator}/{under})")
        return ", ".join(parts)
