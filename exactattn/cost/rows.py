"""The figures of the ``cost`` table: each row length derived, and counted when small enough.

Three routes to one number, which must agree: each row is one call
(:meth:`CallShape.of_sizes <exactattn.cost.sizes.CallShape.of_sizes>`),
**derived** (:func:`~exactattn.cost.derivation.derive_call`) and, when its
derived total is at most the count limit, **counted** by running the head
(:func:`~exactattn.cost.counting.count_call`); the last counted row is checked
against the formula, and the **solved** crossover and doubling ratio close
the table.  ``exactattn cost`` puts them in words (:mod:`exactattn.commands.cost_tables`).

>>> c = cost_rows([4, 8])
>>> [(r.tokens, r.figures["total"], r.counted) for r in c.rows], c.check.same
([(4, 320, True), (8, 896, True)], True)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import sympy

from ..call.policy import Policy
from ..errors import InputError, shorten
from .counting import count_call, estimate_seconds
from .derivation import (EXTENSION_SYMBOLS, SYMBOLS, branch, derive, derive_call, split,
                         symbol_values, whole_generation)
from .sizes import CallShape, size
from .solve import Crossover, DoublingRatio, crossover, doubling_ratio


@dataclass(frozen=True)
class RowCost:
    """One row length: ``figures`` per stage (counted if ``counted``, else derived) and
    the ``derived`` figures."""

    tokens: int
    figures: dict
    derived: dict
    counted: bool


@dataclass(frozen=True)
class FormulaCheck:
    """The derived formula at the last counted row, against the count.

    ``linear`` (projections, W_O) and ``pairs`` (scores, mixing) are factored
    expressions in the symbols, ``values`` the symbols' sizes.  Decoding adds
    ``step_total`` (one token's MACs, factored, in t) and ``prefill_total``
    (the causal prefill counted by running the head)."""

    n: int
    values: dict
    linear: Any
    pairs: Any
    linear_value: int
    pairs_value: int
    counted_total: int
    derived_total: int
    step_total: Any = None
    prefill_total: int | None = None

    @property
    def total(self) -> int:
        return self.linear_value + self.pairs_value

    @property
    def same(self) -> bool:
        return self.total == self.counted_total == self.derived_total


@dataclass(frozen=True)
class CostRows:
    """Everything the ``cost`` table shows (see :func:`cost_rows`): ``shape`` is the call
    of the first row (the rows differ only in n), ``keys`` the key length asked for
    (None: each row's own)."""

    shape: CallShape
    keys: int | None
    count_limit: int
    rows: list            # RowCost per row length
    check: FormulaCheck | None   # None: no row was small enough to run
    crossover: Crossover | None  # None with a key length
    doubling: DoublingRatio | None    # None with a key length or decoding


def _shapes(rows, d_model, d_k, d_v, count_limit, options) -> tuple[list, int]:
    """The call of each row (:meth:`CallShape.of_sizes`) with its derived figures, and the
    count limit, checked."""
    if isinstance(rows, (str, bytes)) or not rows:
        raise InputError(f"rows must be a non-empty list of token counts "
                         f"(got {shorten(repr(rows))})")
    rows = [size(r, "each row") for r in rows]
    shapes = [CallShape.of_sizes(n, d_model, d_k, d_v, **options) for n in rows]
    limit = size(count_limit, "count_limit")
    return [(s, derive_call(s)) for s in shapes], limit


def counting_work(rows=(4, 8, 16, 32), d_model=4, d_k=4, d_v=None, *,
                  count_limit: int = 10_000_000, **options) -> list[tuple[int, float]]:
    """What :func:`cost_rows` would run, known before any of it runs: ``(MACs, seconds)``
    per row it would count (derived total at most ``count_limit``), the seconds
    estimated by :func:`~exactattn.cost.counting.estimate_seconds` (with the
    check's causal prefill added to the last row when decoding).

    >>> [macs for macs, seconds in counting_work([4, 8, 64], count_limit=1000)]
    [320, 896]
    """
    shapes, limit = _shapes(rows, d_model, d_k, d_v, count_limit, options)
    counted = [(shape, derived) for shape, derived in shapes if derived["total"] <= limit]
    work = [(derived["total"], estimate_seconds(derived, shape)) for shape, derived in counted]
    if counted and counted[-1][0].decode:   # the check also counts the causal prefill
        prefill = _prefill(counted[-1][0])
        causal, (macs, seconds) = derive_call(prefill), work[-1]
        work[-1] = (macs + causal["total"], seconds + estimate_seconds(causal, prefill))
    return work


def _prefill(shape: CallShape) -> CallShape:
    """The causal prefill of the tokens a decoding call generates."""
    return replace(shape, policy=Policy(causal=True), decode=False)


def _check(shape: CallShape, row: RowCost, keys) -> FormulaCheck:
    """The formula of the table's call in the symbols (m where a key length was asked for,
    h with heads, L with layers) at the sizes of ``shape``, the last counted row."""
    m, _, h, L = EXTENSION_SYMBOLS
    sym = derive(shape.policy.causal, alignment=shape.policy.alignment,
                 keys=None if keys is None else m, heads=h if shape.out_projection else None,
                 layers=1 if shape.layers == 1 else L, decode=shape.decode,
                 d_v=SYMBOLS.d_k if shape.d_v == shape.d_k else None)
    vals, step_total, prefill = symbol_values(shape), None, None
    if shape.decode:     # one token's figures (in t alone), then the whole generation
        step_total = sympy.factor(sym["total"].subs(vals))
        sym = {k: sympy.expand(v) for k, v in whole_generation(sym).items()}
        prefill = count_call(_prefill(shape)).macs["total"]
    pairs, linear = split({k: branch(v, vals) for k, v in sym.items()})
    return FormulaCheck(shape.queries, vals, sympy.factor(linear), sympy.factor(pairs),
                        int(linear.subs(vals)), int(pairs.subs(vals)), row.figures["total"],
                        row.derived["total"], step_total, prefill)


def cost_rows(rows=(4, 8, 16, 32), d_model=4, d_k=4, d_v=None, *, causal: bool = False,
              alignment: str = "top_left", keys=None, heads=None, layers=1,
              decode: bool = False, count_limit: int = 10_000_000,
              solve: bool = True) -> CostRows:
    """The same head at several row lengths: derived, counted up to ``count_limit`` MACs.

    Each row's figures are counted by running the head when its derived total
    is at most ``count_limit``, else only derived.  The check compares the
    formula with the count at the last counted row; without a key length the
    crossover is solved and, unless decoding, the doubling ratio (``solve=False``: neither,
    a third of a second of sympy saved).

    Units: MACs (FLOPs = 2 x MACs).

    Raises:
        InputError: an empty list of rows, a size that is not a positive whole
            number, a bad option.
    """
    shapes, limit = _shapes(rows, d_model, d_k, d_v, count_limit,
                            dict(causal=causal, alignment=alignment, keys=keys, heads=heads,
                                 layers=layers, decode=decode))
    first = shapes[0][0]
    d_model, d_k, d_v = first.d_model, first.d_k, first.d_v
    out, last = [], None
    for shape, derived in shapes:
        counted = derived["total"] <= limit
        out.append(RowCost(shape.queries, count_call(shape).macs if counted else derived,
                           derived, counted))
        last = (shape, out[-1]) if counted else last
    check = None if last is None else _check(*last, keys)
    cross = doubling = None
    if keys is None and solve:
        cross = crossover(d_model, d_k, d_v=d_v, causal=causal, alignment=alignment,
                          heads=heads, layers=layers, decode=decode)
        if not decode:
            doubling = doubling_ratio(d_k=d_k, d_v=d_v, causal=causal, heads=heads,
                                      layers=layers)
    return CostRows(first, None if keys is None else first.keys, limit, out, check, cross,
                    doubling)
