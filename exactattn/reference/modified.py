"""The counted step of a head given as integers: its MACs and softmax rows, read from its
:class:`~exactattn.reference.reference.Reference` (the cost module's runs without projections).

>>> from exactattn.call.policy import Policy
>>> step = counted_step([[1], [0]], [[1], [0]], [[3], [1]], lambda i: range(2), 1, 1, 1,
...                     None, Policy(scale=None, sink=Fraction(0)))
>>> step.rows[0].sink_share().text(), step.macs
('1/(2 + exp(1))', {'scores': 4, 'mix': 4})
"""

from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace
from typing import Callable, Iterable

from .kernels import to_fractions


def counted_step(queries: list[list[int]], keys: list[list[int]], values: list[list[int]],
                 visible: Callable[[int], Iterable[int]], q_den: int, k_den: int,
                 value_den: int, divisor_squared: Fraction | None, policy,
                 keep: list[list[bool]] | None = None) -> SimpleNamespace:
    """``macs`` (:meth:`Reference.counts <exactattn.reference.reference.Reference.counts>`) and
    ``rows`` (one softmax row per query) of queries n_q x d_k, keys n_k x d_k and values
    n_k x d_v (integers over ``q_den``, ``k_den``, ``value_den``) under ``policy`` with the
    scale ``divisor_squared``; query i sees the keys ``visible(i)``; ``keep``: dropout."""
    from ..call.inputs import Call
    from ..call.limits import lifted
    from .reference import Reference
    seen = [[False] * len(keys) for _ in queries]
    for i, r in enumerate(seen):
        for j in visible(i):
            r[j] = True
    with lifted():                  # exact already, however many: no input limit
        ref = Reference(Call(*(to_fractions(t, d) for t, d in ((queries, q_den), (keys, k_den),
                                                                (values, value_den))), seen,
                             policy=policy.replace(divisor_squared=divisor_squared),
                             mask_kind="bool_keep", dropout_keep=keep))
    return SimpleNamespace(macs=ref.counts()[0], rows=[ref.row(0, 0, i) for i in range(len(seen))])
