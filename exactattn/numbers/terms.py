"""The exponents of one attention block as monomials in a few transcendental numbers.

Write the raw scores of a block over one common denominator, ``S_ij = N_ij /
den``, the scale as ``1/sqrt(D)`` and each visible pair's offset ``m_ij`` (an
additive mask or bias, an ALiBi bias ``slope * distance``, the sink's logit):
rationals, or exact algebraic numbers (:class:`~exactattn.numbers.reals.Surd`, such as
an ALiBi slope ``2^(-1/2)``).  Every visible logit ``x_ij = S_ij / sqrt(D) +
m_ij`` is then ``r_0 + sum_k r_k b_k`` with rationals r and the basis
``b_k`` of :func:`exactattn.numbers.reals.align`: the irrational atoms ``1/sqrt(D')``
and ``2^f`` that occur, kept linearly independent over the rationals.  One
*coordinate* per basis element (and one for the rational part ``r_0``) is
written over its own common denominator ``E_k``, so every exponential is a
monomial ``t_1^(a_1) t_2^(a_2) ...`` in the *generators* ``t_k = exp(b_k / E_k)``
(``exp(1/E_0)`` for the rational part), with whole exponents.  The common cases:

* a rational (or no) scale and rational offsets: one ``t = exp(1/E)``;
* an irrational ``sqrt(D)`` and no offsets that differ within a row (a
  constant offset cancels in the softmax): ``t = exp(1/(den sqrt(D)))``;
* an irrational ``sqrt(D)`` and offsets that differ: ``t`` and ``u = exp(1/E)``;
* an ALiBi slope ``2^f``: one more generator ``exp(2^f / E)`` (unless the
  atom is the scale's, as ``2^(-1/2)`` under ``D = 2``, which shares ``t``).

The exponents ``b_k / E_k`` are linearly independent over the rationals, so by
the Lindemann-Weierstrass theorem the generators are algebraically independent:
a polynomial in them is zero exactly when its coefficients are.  The values
themselves are decided over the forward's rows (:class:`~exactattn.reference.backward.Gradients`);
the generators give their printed view ``text(style="generators")`` and the classes
of rows that share a normaliser.

Each row's exponents are shifted by their minimum in every coordinate (a
common factor of a row cancels in its shares), and each coordinate is divided
by its greatest common divisor (the generator grows by that factor).  Rows
whose exponent multisets agree share one normaliser ``Z = sum_j t^(a_ij)``: a
*class*.

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
from functools import cached_property
from collections import Counter
from fractions import Fraction
from typing import Sequence

from .digits import arb_to_fraction, working_precision
from .exponents import ExpPoly, exp_polys, exponent_text, sum_text
from .exact import fmpq_of, fraction_of, rational_sqrt
from .reals import Pow2, Surd, align, real_ball


#: the names of the generators in texts and polynomials, in order
GENERATOR_NAMES = ("t", "u", "v", "w", "x", "y")


def _plain(v):
    """A Surd without irrational terms as its ``Fraction`` (so that 0 is falsy)."""
    return v.p if isinstance(v, Surd) and not v.terms else v


def row_kinds(keep, empty_row: str) -> list[str]:
    """Each row's kind: ``ok`` when it sees a key (a sink's column counts: a row with a sink is
    never empty), else the empty-row answer (``zero``, ``uniform``, ``nan``): the one place
    the backward reads it from."""
    import numpy as np
    return ["ok" if seen else empty_row for seen in np.asarray(keep, dtype=bool).any(axis=-1)]


def _term(atom, x):
    """``x * atom`` as an exact value (``x`` itself for the atom None, the number 1)."""
    return Fraction(x) if atom is None else Surd(0, ((atom, Fraction(x)),))


class Terms:
    """The exponent structure of a block of query rows against one set of keys.

    Args:
        num: R x S integer raw-score numerators (numpy int64 or object array).
        den: their common denominator.
        keep: R x S booleans, True where a query sees a key.
        offsets: None, or per row None or S numbers (``Fraction`` or
            :class:`~exactattn.numbers.reals.Surd`) added to the scaled scores (an
            additive mask, an ALiBi bias, a sink's logit; entries at hidden keys
            ignored).
        divisor_squared: D (the scores are divided by sqrt(D)); None for no scale.
        empty_row: ``zero``, ``uniform`` or ``nan`` for a row that sees no key.

    Attributes:
        generators: ``(c, atom)`` per generator: ``exp(c * atom)`` with atom
            None (the number 1), a ``Fraction`` D' (``1/sqrt(D')``) or a
            :class:`~exactattn.numbers.reals.Pow2` (``2^f``).
        kinds: per row, what it is: ``ok`` (sees keys), or an empty row under each empty-row
            answer (``zero``, ``uniform``, ``nan``).
        paired: True with more than one generator.

    Under ``uniform`` an empty row has every key at exponent 0 (shares 1/S).
    """

    def __init__(self, num, den: int, keep, offsets: Sequence | None, divisor_squared,
                 empty_row: str):
        import numpy as np
        self.kinds = kinds = row_kinds(keep, empty_row)
        self._visible = visible = [
            list(range(keep.shape[1])) if k == "uniform" else np.flatnonzero(row).tolist()
            for k, row in zip(kinds, np.asarray(keep, dtype=bool))]
        self._positions: dict = {}
        # each row's shift starts at its first visible key's offset; ``rel`` holds the offsets
        # relative to it (None when none differs)
        shifts, rel = [Fraction(0)] * len(kinds), [None] * len(kinds)
        for i, row in enumerate(offsets or ()):
            if row is not None and kinds[i] == "ok":
                base = row[visible[i][0]] or 0
                shifts[i] = _plain(base or Fraction(0))
                rel[i] = [_plain((row[j] or 0) - base) for j in visible[i]]
                rel[i] = rel[i] if any(rel[i]) else None
        # coordinates over the aligned basis: the scale's atom first when the scale is
        # irrational (coordinate 1, its score factor 1/den), else the rational part (0)
        root = Fraction(1) if divisor_squared is None else rational_sqrt(divisor_squared)
        seeds = [] if root is not None else [Surd(0, ((Fraction(divisor_squared), 1),))]
        basis, keys = align(seeds + [v for r in rel if r for v in r])
        keys = iter(keys[len(seeds):])
        rel = [r and [next(keys) for _ in r] for r in rel]
        sc, factor = (0, Fraction(1, den) / root) if root is not None else (1, Fraction(1, den))
        atoms, ints = [None] + list(basis), num.tolist()
        gens, coords = [], []
        for k in [sc] + [k for k in range(len(atoms)) if k != sc]:
            f = factor if k == sc else Fraction(0)
            if not f and not any(r and any(key[k] for key in r) for r in rel):
                continue
            E = math.lcm(f.denominator, *[key[k].denominator for r in rel if r for key in r])
            fE = int(f * E)      # a whole number
            rows = [[int(ints[i][j]) * fE for j in vis] if kinds[i] == "ok" else [0] * len(vis)
                    for i, vis in enumerate(visible)]
            rows = [row if r is None else [a + int(key[k] * E) for a, key in zip(row, r)]
                    for row, r in zip(rows, rel)]
            # every row's exponents from 0 (its shift kept: texts print absolute exponents),
            # then divided by their common divisor
            lows = [min(row, default=0) for row in rows]
            for i, low in enumerate(lows):
                if low:
                    shifts[i] = shifts[i] + _term(atoms[k], low * Fraction(1, E))
            rows = [[a - low for a in row] for row, low in zip(rows, lows)]
            g = math.gcd(*(a for row in rows for a in row))
            coords.append([[a // g for a in row] for row in rows] if g > 1 else rows)
            gens.append((Fraction(max(g, 1), E), atoms[k]))
        if len(gens) > len(GENERATOR_NAMES):
            from ..errors import InputError
            raise InputError(f"a call must need at most {len(GENERATOR_NAMES)} independent "
                             f"exponentials for exact gradients (got {len(gens)}); use fewer "
                             "distinct ALiBi slopes in one block")
        self.generators, self.paired, self._shifts = gens, len(gens) > 1, shifts
        self._exps = [list(zip(*rows)) for rows in zip(*coords)]
        self._class_of = [tuple(sorted(e)) if k in ("ok", "uniform") else None
                          for e, k in zip(self._exps, kinds)]
        self._classes: dict = {}
        self._squares: dict = {}

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

    @cached_property
    def context(self):
        """The python-flint ``fmpq_mpoly`` context: variables ``t`` (and ``u``)."""
        from flint import fmpq_mpoly_ctx
        return fmpq_mpoly_ctx.get(GENERATOR_NAMES[:len(self.generators)], "lex")

    @cached_property
    def _first(self) -> dict:
        """The first row of each class (whose shift the class's texts use)."""
        return {key: i for i, key in reversed(list(enumerate(self._class_of)))}

    def normaliser(self, key):
        """The normaliser polynomial ``Z = sum_j t^(a_j)`` of a class (cached)."""
        z = self._classes.get(key)
        if z is None:
            z = self._classes[key] = self.context.from_dict(Counter(key))
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
        return self.context.from_dict({e: fmpq_of(c)
                                       for e, c in terms.items() if c})

    def part_text(self, key, num) -> str:
        """``N / Z^2`` of class ``key`` in the forward's ``exp(...)`` form, every exponent
        absolute (the row's shift put back): ``M/(Z)`` when Z divides N, as the forward writes
        a share or an output, else ``N/(Z)^2`` with the squared normaliser kept factored.

        >>> import numpy as np
        >>> terms = Terms(np.array([[2, 1]]), 1, np.ones((1, 2), dtype=bool), None, None, "zero")
        >>> key = terms.class_of(0)
        >>> terms.part_text(key, terms.poly({(1,): 2})), terms.part_text(key, terms.normaliser(key) * terms.poly({(1,): 1}))
        ('2*exp(3)/(exp(1) + exp(2))^2', 'exp(2)/(exp(1) + exp(2))')
        """
        z = self.normaliser(key)
        m, r = divmod(num, z)
        i = self._first.get(key)
        num, shifts, power = (m, 1, "") if r.is_zero() else (num, 2, "^2")
        top = self._sum_text(i, num, shifts)
        return f"{f'({top})' if len(num) > 1 else top}/({self._sum_text(i, z, 1)}){power}"

    def logit(self, i, exps, shifts: int = 1):
        """The exact exponent of the monomial ``exps`` in row i (a ``Fraction`` or a
        :class:`~exactattn.numbers.reals.Surd`), the row's shift counted ``shifts`` times."""
        x = Fraction(0) if i is None else self._shifts[i] * shifts
        for (f, atom), a in zip(self.generators, exps):
            if a:
                x = x + _term(atom, int(a) * f)
        return _plain(x)

    def _sum_text(self, i, poly, shifts: int) -> str:
        """``sum c t^e`` as ``sum c exp(x)``: x the exact exponent of the monomial in row i,
        the row's shift counted ``shifts`` times (``N`` over ``Z^2`` is of degree 2 in it)."""
        items = []
        for exps, c in poly.terms():
            x = self.logit(i, exps, shifts)
            if isinstance(x, Surd):
                basis, (e,) = align([x])
                with working_precision(128):
                    order = arb_to_fraction(real_ball(x, 128).mid())
            else:
                basis, e, order = (), (x,), x
            items.append((order, exponent_text(basis, e), fraction_of(c)))
        return sum_text(items)

    def exp_poly(self, poly) -> ExpPoly:
        """A polynomial in the generators as an :class:`~exactattn.numbers.exponents.ExpPoly`
        (each monomial ``t^a`` is ``exp(a c atom)``): the form every exact value shares."""
        return exp_polys([([self.logit(None, e) for e in poly.monoms()],
                           map(fraction_of, poly.coeffs()))])[0]

    def generator_text(self) -> str:
        """``t = exp(1/16)`` (and ``u = ...``): what the polynomials' variables stand for.

        >>> import numpy as np
        >>> Terms(np.array([[0, 1]]), 3, np.ones((1, 2), dtype=bool), None, Fraction(2),
        ...       "zero").generator_text()
        't = exp(1/(3 sqrt(2)))'
        """
        parts = []
        for name, (c, atom) in zip(GENERATOR_NAMES, self.generators):
            if atom is None:
                parts.append(f"{name} = exp({c})")
            elif isinstance(atom, Pow2):
                lead = "" if c == 1 else f"{c}*"
                parts.append(f"{name} = exp({lead}2^({atom.f}))")
            else:
                under = f"sqrt({atom})" if c.denominator == 1 else \
                    f"({c.denominator} sqrt({atom}))"
                parts.append(f"{name} = exp({c.numerator}/{under})")
        return ", ".join(parts)
