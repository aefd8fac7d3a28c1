"""A trace's raw scores as integer rows, read once, for the tables of large heads.

The tables read each row of raw scores several times (raw and scaled cells,
their exact data, the closed forms, the ties of the largest share).
:class:`ScoreRows` reads row i from the trace once
(:meth:`~exactattn.engines.trace.Trace.raw_score_row`) and keeps it as integers over
the row's common denominator: a numpy ``int64`` row when every entry fits,
else Python integers.  A head of 4096 tokens keeps 128 MB of integers, not 16
million ``Fraction`` objects, and a table that shows 8 rows reads 8.  Their
text is :func:`exactattn.present.cells.fraction_texts`.
"""

from __future__ import annotations

import weakref

from .cells import INT64 as _INT64

_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class ScoreRows:
    """Row i of a numeric trace's raw scores as ``(integers, den)``, None where hidden."""

    def __init__(self, trace):
        self.trace = trace
        self._rows: dict[int, tuple[list, int]] = {}

    def row(self, i: int) -> tuple[list, int]:
        """``(ints, den)``: raw score j is ``ints[j] / den`` (``None`` where hidden)."""
        hit = self._rows.get(i)
        if hit is not None:
            return self._store(hit)
        ints, den = self.trace.raw_score_ints(i)
        self._rows[i] = self._pack(ints, den)
        return ints, den

    @staticmethod
    def _pack(ints: list, den: int):
        """A compact copy: numpy int64 (hidden entries flagged) when every entry fits."""
        import numpy as np
        hidden = [v is None for v in ints]
        values = [0 if v is None else v for v in ints]
        if values and max(values) < _INT64 and min(values) > -_INT64:
            return np.array(values, dtype=np.int64), np.array(hidden, dtype=bool), den
        return values, hidden, den

    @staticmethod
    def _store(packed) -> tuple[list, int]:
        values, hidden, den = packed
        if hasattr(values, "tolist"):
            values, hidden = values.tolist(), hidden.tolist()
        return [None if h else v for v, h in zip(values, hidden)], den


def score_rows(trace) -> ScoreRows:
    """The one :class:`ScoreRows` of ``trace`` (shared by every table built from it)."""
    rows = _CACHE.get(trace)
    if rows is None:
        rows = _CACHE[trace] = ScoreRows(trace)
    return rows
