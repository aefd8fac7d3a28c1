"""The counted loops: projection and score over integers on common denominators.

The exact layer projects through these loops, so its projection MACs are counted
in the innermost loop, where they happen (the pencil engine's projections are
python-flint products, their MACs read from the operands' shapes)
(the mix's MACs are :meth:`Reference.counts
<exactattn.reference.reference.Reference.counts>`).  The loops run on integers over one common
denominator per matrix (the same sums of products as on ``Fraction`` entries,
without normalising a fraction at every step); they work unchanged over any
ring whose elements support ``+`` and ``*`` (sympy expressions in the
symbolic engine).

Conventions: one multiply-add (MAC) is one product added to an accumulator;
FLOPs are 2 per MAC.  Masked pairs cost nothing: the score loop runs only over
the keys ``visible(i)`` returns.

>>> W, x = [[1, 2], [3, 4]], [[1, 1], [0, 1]]
>>> project(W, x)
([[3, 7], [2, 4]], 8)
>>> score([[1, 0]], [[2, 5], [7, 1]], lambda i: range(2))
([[2, 7]], 4)
>>> from exactattn.numbers.exact import common_denominator
>>> common_denominator([[Fraction(1, 2), 3]])
([[1, 6]], 2)
"""

from __future__ import annotations

from fractions import Fraction
from typing import Callable, Iterable, Sequence


def to_fractions(m: Sequence[Sequence[int | None]], den: int) -> list[list]:
    """Integers over ``den`` back as ``Fraction`` entries (None stays None; each distinct
    integer converted once)."""
    cache: dict[int, Fraction] = {}
    return [[None if a is None else cache[a] if a in cache else
             cache.setdefault(a, Fraction(a, den)) for a in r] for r in m]


def project(W: Sequence[Sequence], x: Sequence[Sequence]) -> tuple[list[list], int]:
    """``out[i][s] = sum_m W[s][m] x[i][m]`` (slots layout); returns ``(out, MACs)``: the
    scores of the tokens against the weight rows, every pair seen (:func:`score`).

    Shapes: W is d_out x d_model, x is n x d_model, out is n x d_out.
    One MAC per product: n * d_out * d_model in all.
    """
    return score(x, W, lambda i: range(len(W)))


def score(queries: Sequence[Sequence], keys: Sequence[Sequence],
          visible: Callable[[int], Iterable[int]]) -> tuple[list[list], int]:
    """``raw[i][j] = queries[i] . keys[j]`` for j in ``visible(i)``, None elsewhere; ``(raw, MACs)``.

    Shapes: queries n_q x d_k, keys n_k x d_k, raw n_q x n_k.  One MAC per
    product over visible pairs only (a causal square costs n(n+1)/2 d_k).
    """
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

