"""Solved: where the pairs pass the projections (the crossover), and cost(2n)/cost(n).

Both read the derived formula (:mod:`exactattn.cost.derivation`); nothing is
retyped.  No mask, one head, d_v = d_k: ``2 n^2 d_k > 3 n D d_k``, i.e.
``n > 3D/2`` (n = 7 at D = 4, and at n = 6 the two are equal, 288 and 288).

>>> c = crossover(4)
>>> c.first, c.equal_at, c.at(6)
(7, 6, (288, 288))
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import sympy

from ..errors import InputError
from .derivation import EXTENSION_SYMBOLS, SYMBOLS, derive, split
from .sizes import size, size_or_expr
from ..numbers.exact import fraction_of


def _d_v(d_k, d_v):
    """What the symbol d_v becomes: the symbol d_k when d_v is not given or equals d_k (so the
    crossover's condition reads n > 3*D/2), else the size d_v."""
    return SYMBOLS.d_k if d_v is None or (d_k is not None and d_v == d_k) else \
        size_or_expr(d_v, "d_v")


def _sizes(D, d_k, heads, layers) -> dict:
    """The symbols D and d_k at the sizes given, h and L at the heads and layers given as
    whole numbers (the others left symbols)."""
    return {**{s: size_or_expr(v, name) for s, v, name in ((SYMBOLS.D, D, "D"),
                                                           (SYMBOLS.d_k, d_k, "d_k"))
               if v is not None},
            **{s: v for s, v in ((EXTENSION_SYMBOLS.h, heads), (EXTENSION_SYMBOLS.L, layers))
               if isinstance(v, int)}}


@dataclass(frozen=True)
class Crossover:
    """Where the pairs (scores + mixing) pass the linear stages (projections, W_O).

    ``condition`` is the solved inequality (e.g. ``n > 3*D/2``), ``threshold``
    its right side at the given sizes, ``first`` the first whole n (or t when
    decoding) with more pair MACs than linear ones, ``equal_at`` the n where
    the two are equal (None if no whole n), ``pairs``/``linear`` the two
    expressions in the variable; ``with_out_projection``: the linear stages
    include W_O (heads).
    """

    variable: sympy.Symbol
    condition: Any
    threshold: Any
    first: Any
    equal_at: int | None
    pairs: Any
    linear: Any
    with_out_projection: bool = False

    def at(self, value: int) -> tuple[int, int]:
        """(pair MACs, linear MACs) at ``value`` of the variable."""
        return (int(self.pairs.subs(self.variable, value)),
                int(self.linear.subs(self.variable, value)))


def crossover(D=None, d_k=None, *, d_v=None, causal: bool = False,
              alignment: str = "top_left", heads=None, layers=1,
              decode: bool = False) -> Crossover:
    """Solve symbolically where pair MACs pass the projections: the first n with pairs > linear.

    No mask, one head, d_v = d_k: ``2 n^2 d_k > 3 n D d_k``, i.e. ``n > 3D/2``:
    n = 7 at D = 4 (n = 6 gives 288 and 288), n = 6145 at D = 4096.  A causal
    mask: ``n(n+1) d_k > 3 n D d_k``, i.e. ``n > 3D - 1``.  Heads with W_O:
    ``n > 2D`` (when d_v = d_k).  Decoding: the first token t whose own pairs
    pass its own projections.  Layers cancel.

    Args:
        D: d_model (int or sympy expression; default the symbol D).
        d_k: key width (default: equal to D when D is given, as in the example
            head; else the symbol d_k).  It cancels from the condition when
            d_v = d_k; it sets the figures at equality (288 and 288 at D = 4).
        d_v: value width (default equal to d_k).

    Raises:
        InputError: bad sizes; no crossover (pairs never pass).

    >>> crossover(4096).first
    6145
    >>> crossover(4, causal=True).first
    12
    >>> crossover().condition
    n > 3*D/2
    """
    var = EXTENSION_SYMBOLS.t if decode else SYMBOLS.n
    pairs, linear = split(derive(causal, d_v=_d_v(d_k, d_v), alignment=alignment, heads=heads,
                                 layers=layers, decode=decode))
    root = sympy.solve(sympy.cancel((pairs - linear) / var), var)
    if len(root) != 1:
        raise InputError(f"the pairs must pass the projections at one point (got {root})")
    general = sympy.factor(root[0])
    condition = sympy.StrictGreaterThan(var, general)
    vals = _sizes(D, D if d_k is None else d_k, heads, layers)
    threshold = sympy.nsimplify(general.subs(vals))
    pairs, linear = pairs.subs(vals), linear.subs(vals)
    if threshold.is_number:
        first = int(sympy.floor(threshold)) + 1
        equal_at = int(threshold) if threshold.is_Integer and threshold > 0 else None
        if first >= 1:
            p, q = (pairs.subs(var, first), linear.subs(var, first))
            if not p > q:
                raise InputError(f"the pairs must pass the projections above {threshold} "
                                 f"(got {p} <= {q} at {var} = {first})")
    else:
        first, equal_at = sympy.floor(threshold) + 1, None
    return Crossover(var, condition, threshold, first, equal_at, pairs, linear,
                     heads is not None)


@dataclass(frozen=True)
class DoublingRatio:
    """cost(2n)/cost(n) as a closed form in n (and D, d_k, d_v), with its limit."""

    expr: Any
    limit: Any

    def at(self, n: int, D=None) -> Fraction:
        """The exact ratio at n tokens (and width D if the form still has the symbol)."""
        e = self.expr.subs(SYMBOLS.n, size(n, "n"))
        if D is not None:
            e = e.subs(SYMBOLS.D, size(D, "D"))
        e = sympy.nsimplify(e)
        if not e.is_Rational:
            raise InputError(f"D must be given to evaluate {self.expr} (got {e})")
        return fraction_of(e)


def doubling_ratio(D=None, *, d_k=None, d_v=None, causal: bool = False, heads=None,
                   layers=1) -> DoublingRatio:
    """cost(2n) / cost(n) in closed form, and its limit as n grows (4: the n^2 term wins).

    At d_v = d_k the key width cancels: ``(8n + 6D)/(2n + 3D)``.  At D = 4 it
    is 2.80, 3.14, 3.45 from 4 to 8, 8 to 16, 16 to 32 tokens; a 4096-wide
    model going from 1000 to 2000 tokens costs 2.28 times as much, not "close
    to four times": the ratio is 3.5 only at n = 9D/2 (18432 tokens).

    >>> from exactattn.numbers.digits import round_fraction
    >>> r = doubling_ratio()
    >>> r.expr, r.limit
    (2*(3*D + 4*n)/(3*D + 2*n), 4)
    >>> [round_fraction(r.at(k, 4), 2) for k in (4, 8, 16)]
    ['2.80', '3.14', '3.45']
    >>> round_fraction(r.at(1000, 4096), 2), sympy.solve(r.expr - sympy.Rational(7, 2), SYMBOLS.n)
    ('2.28', [9*D/2])
    """
    n = SYMBOLS.n
    total = derive(causal, d_v=_d_v(d_k, d_v), heads=heads, layers=layers)["total"].subs(
        _sizes(D, d_k, heads, layers))
    expr = sympy.factor(sympy.cancel(total.subs(n, 2 * n) / total))
    return DoublingRatio(expr, sympy.limit(expr, n, sympy.oo))
