"""A trace's raw scores as integer rows, read once, for the tables of large heads.

The tables read each row of raw scores several times (raw and scaled cells,
their exact data, the closed forms, the ties of the largest share).
:class:`ScoreRows` reads row i from the trace once
(:meth:`~exactattn.engines.trace.Trace.raw_score_row`) and keeps it as integers over
the row's common denominator: a numpy ``int64`` row when every entry fits,
else Python integers.  A head of 4096 tokens keeps 128 MB of integers, not 16
million ``Fraction`` objects, and a table that shows 8 rows reads 8.

:func:`fraction_texts` writes a row of such integers as exact fractions, with
their decimals when asked (:func:`with_rounded`): one gcd per entry, decimals
correctly rounded (ties to even, :func:`~exactattn.numbers.digits.round_fraction`;
rows of 32 or more small entries in numpy int64, exactly), exact where they
terminate.

>>> from fractions import Fraction as F
>>> fraction_texts([3, -1, 8, None], 8, 4)
['3/8 = 0.375', '-1/8 = -0.125', '1', None]
>>> fraction_texts([1, 2], 3, 4), fraction_texts([1, 2], 3, None)
(['1/3 ~ 0.3333', '2/3 ~ 0.6667'], ['1/3', '2/3'])
"""

from __future__ import annotations

import weakref
from fractions import Fraction
from math import gcd

from ..numbers.digits import format_scaled, round_fraction, terminating_places

_INT64 = 1 << 62
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


def magnitude(ints: list) -> int:
    """The largest ``|v|`` of the integers (None skipped; 0 for none)."""
    seen = [v for v in ints if v is not None]
    return max(max(seen), -min(seen)) if seen else 0


def fraction_texts(ints: list, den: int, places: int | None, top: int | None = None) -> list:
    """``ints[j] / den`` as exact texts (``3/8``, ``1``), with ``= 0.375`` / ``~ 0.3333``
    decimals when ``places`` is given; None stays None.  Entries must be short enough
    to print (see :func:`exactattn.present.cells.is_long`).

    A row whose integers (times ``10**places``) fit in 62 bits is reduced and
    rounded with numpy, exactly; others entry by entry in Python integers.
    """
    scale = 1 if places is None else 10 ** places
    top = magnitude(ints) if top is None else top
    if len(ints) >= 32 and den < _INT64 and top * scale < _INT64 // 4:
        return _vector_texts(ints, den, places)
    return [None if v is None else _text(v, den, places) for v in ints]


def with_rounded(text: str, num: int, den: int, places: int = 0, *, rounded: str | None = None,
                 exact: bool = True) -> str:
    """The one spelling of an exact fraction with its decimal: ``text = 0.375`` or ``text ~ 0.3333``.

    ``num/den`` in lowest terms: ``=`` and its exact decimal when that
    terminates (and ``exact``), else ``~`` and ``rounded`` (a certified decimal
    at hand) or ``num/den`` rounded to ``places``, ties to even
    (:func:`~exactattn.numbers.digits.round_fraction`).

    >>> with_rounded("3/8", 3, 8), with_rounded("2/3", 2, 3, 4)
    ('3/8 = 0.375', '2/3 ~ 0.6667')
    """
    t = terminating_places(den) if exact else None
    if t is not None:
        return f"{text} = {format_scaled(num * (10 ** t // den), t)}"
    return f"{text} ~ {round_fraction(Fraction(num, den), places) if rounded is None else rounded}"


def _text(v: int, den: int, places: int | None) -> str:
    g = gcd(v, den)
    p, q = v // g, den // g
    if q == 1:
        return str(p)
    if places is None:
        return f"{p}/{q}"
    return with_rounded(f"{p}/{q}", p, q, places)


def _vector_texts(ints: list, den: int, places: int | None) -> list:
    """:func:`fraction_texts` of a row in int64 (every product proved below 2^62)."""
    import numpy as np
    a = np.array([0 if v is None else v for v in ints], dtype=np.int64)
    g = np.gcd(a, np.int64(den))
    p, q = a // g, np.int64(den) // g
    ps, qs = p.tolist(), q.tolist()
    if places is None:
        out = [str(x) if y == 1 else f"{x}/{y}" for x, y in zip(ps, qs)]
    else:
        scale = 10 ** places
        num = p * scale
        k = num // q                                     # floor
        r = num - k * q
        k += (2 * r > q) | ((2 * r == q) & (k % 2 == 1))  # to nearest, ties to even
        sign = np.where(k < 0, "-", "").tolist()
        whole, frac = np.divmod(np.abs(k), scale)
        exact = [u for u in np.unique(q).tolist() if u == 1 or terminating_places(u) is not None]
        special = np.isin(q, exact).tolist() if exact else [False] * len(ps)
        if places:
            out = [f"{x}/{y} ~ {s}{w}.{f:0{places}d}" for x, y, s, w, f in
                   zip(ps, qs, sign, whole.tolist(), frac.tolist())]
        else:
            out = [f"{x}/{y} ~ {s}{w}" for x, y, s, w in zip(ps, qs, sign, whole.tolist())]
        for j, hit in enumerate(special):
            if hit:
                out[j] = _text(ps[j], qs[j], places)
    for j, v in enumerate(ints):
        if v is None:
            out[j] = None
    return out
