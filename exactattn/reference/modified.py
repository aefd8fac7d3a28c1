"""The counted step of a head: score loop, softmax rows, mix; plain or under today's modifiers.

One step for every exact engine (the pencil engine, layers, the cost
module's counted runs): the counted score loop, the exact softmax rows
built by the one composition, :func:`exactattn.reference.logits.softmax_row`, and the
counted mix::

    raw[i][j]   = queries[i] . keys[j]                  counted score loop (visible pairs)
    [RoPE]        rotated[i][j] = rope_score(q_i, k_j, positions)   2 d_k products a pair
    rows[i]     = softmax_row(raw or rotated, D, policy, i)  (scale, soft-cap, ALiBi, sink)
    outputs[i]  = sum_j rows[i].share(j) * keep[i][j] / (1 - p) * values[j]   counted mix

Keys are grouped in the mix by their softmax term (their gap in the row),
not by their raw score: with ALiBi or RoPE two equal raw scores give
different logits.  A dropped key (``keep`` False) is skipped in the mix; the
kept keys' sums are multiplied by ``1/(1 - p)`` once per output entry.

Exactness: rational and algebraic logits (ALiBi slopes such as 2^(-1/2))
stay exact; soft-capped and rotated scores are certified (see
:mod:`exactattn.numbers.reals`).

Reference: Vaswani et al. 2017, sec. 3.2.1; the modifiers' sources are in
:mod:`exactattn.call.modifiers` and :mod:`exactattn.reference.logits`.

>>> from exactattn.call.policy import Policy
>>> step = counted_step([[1], [0]], [[1], [0]], [[3], [1]], lambda i: range(2), 1, 1, 1,
...                     None, Policy(scale=None, sink=Fraction(0)))
>>> step.rows[0].sink_share().text(), step.outputs[0][0].decimal(6)
('1/(2 + exp(1))', '1.940292')
>>> step.macs
{'scores': 4, 'mix': 4}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Iterable

from .kernels import mix, score, to_fractions
from .logits import rope_row, softmax_row
from ..call.modifiers import dropout_factors
from ..numbers.ratio import ExpRatio


@dataclass
class Step:
    """What :func:`counted_step` computed: every intermediate and the MACs by stage.

    ``raw`` n_q x n_k integers over ``q_den * k_den`` (None where hidden),
    ``raw_fractions`` the same as ``Fraction``, ``rotated`` the RoPE scores
    (None without RoPE), ``rows`` one :class:`~exactattn.numbers.softmax.SoftmaxRow`
    per query, ``outputs`` n_q x d_v :class:`~exactattn.numbers.ratio.ExpRatio`
    (after dropout), ``macs`` ``scores`` (+ ``rotation`` with RoPE) and ``mix``.
    """
    raw: list
    raw_fractions: list
    rotated: list | None
    rows: list
    outputs: list
    macs: dict


def outputs_of(rows: list, values: list[list], value_den: int, factors: list | None) -> tuple:
    """``sum_j share_ij * factor_ij * values[j]`` through the counted mix; ``(outputs, MACs)``.

    Keys are grouped by their gap in the row (equal softmax terms add their
    values first; an empty row under ``uniform`` has every gap 0: one group);
    ``factors`` (per row, from :func:`~exactattn.call.modifiers.dropout_factors`, or
    None) drops keys with factor 0 and scales the rest once per output entry.
    ``values`` are integers over ``value_den``.
    """
    groups = []
    for k, sm in enumerate(rows):
        f = None if factors is None else factors[k]
        groups.append([None if g is None or (f is not None and not f[j]) else g
                       for j, g in enumerate(sm.gaps[:sm.n_keys])])
    slots, sums, macs = mix(groups, values)

    def output_row(k: int) -> list:
        sm, f = rows[k], None if factors is None else factors[k]
        scale = None if f is None else next((x for x in f if x), Fraction(1))
        return [ExpRatio({g: Fraction(a, value_den) if scale is None else
                          Fraction(a, value_den) * scale
                          for g, a in zip(slots[k], acc)}, sm) for acc in sums[k]]
    return _Rows(output_row, len(rows)), macs


class _Rows(Sequence):
    """Rows built on first reading (a table that prints no output builds none)."""

    def __init__(self, build: Callable[[int], list], n: int):
        self._build, self._n, self._rows = build, n, {}

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(self._n))]
        k = range(self._n)[k]
        if k not in self._rows:
            self._rows[k] = self._build(k)
        return self._rows[k]


def counted_step(queries: list[list[int]], keys: list[list[int]], values: list[list[int]],
                 visible: Callable[[int], Iterable[int]], q_den: int, k_den: int,
                 value_den: int, divisor_squared: Fraction | None, policy,
                 keep: list[list[bool]] | None = None) -> Step:
    """The counted score loop, the softmax rows and the counted mix, on integers: THE step.

    Every exact engine (the pencil engine, layers, the cost module's counted
    runs) runs a head through this one step, with or without modifiers.
    Shapes: queries n_q x d_k, keys n_k x d_k, values n_k x d_v (integers over
    ``q_den``, ``k_den``, ``value_den``); ``keep`` n_q x n_k (dropout) or None.
    ``visible(i)``: the keys query i sees (the policy's rule, and a mask).
    ``policy``: the call (its modifiers and empty-row answer; the scale is
    ``divisor_squared``).  Two queries with the same scores share one row
    object when the row does not depend on the query's position (no ALiBi).
    """
    n_q, n_k = len(queries), len(keys)
    raw, score_macs = score(queries, keys, visible)
    raw_f = to_fractions(raw, q_den * k_den)
    macs = {"scores": score_macs}
    rotated = None
    if policy.rope is not None:
        qf, kf = to_fractions(queries, q_den), to_fractions(keys, k_den)
        seen = [[j for j, a in enumerate(r) if a is not None] for r in raw_f]
        rotated = [rope_row(qf[i], kf.__getitem__, seen[i], policy, i, n_q, n_k)
                   for i in range(n_q)]
        macs["rotation"] = 2 * len(qf[0] if qf else ()) * sum(map(len, seen))
    source = rotated if rotated is not None else raw_f
    shared: dict[tuple, object] = {}
    rows = []
    for i in range(n_q):
        key = tuple(source[i]) if policy.alibi is None else None
        row = shared.get(key) if key is not None else None
        if row is None:
            row = softmax_row(source[i], divisor_squared, policy, i, n_q, n_k)
            if key is not None:
                shared[key] = row
        rows.append(row)
    factors = None if keep is None else [dropout_factors(policy.dropout, r) for r in keep]
    outputs, macs["mix"] = outputs_of(rows, values, value_den, factors)
    return Step(raw, raw_f, rotated, rows, outputs, macs)
