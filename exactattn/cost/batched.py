"""Batched calls (``B x H x L x E`` shapes, broadcast batches, GQA groups): the names that
used to live here, now those of the one description and its API.

A call of any shape is one :class:`~exactattn.cost.sizes.CallShape`; it is
derived by :func:`~exactattn.cost.derivation.call_formula` and
:func:`~exactattn.cost.derivation.derive_call`, and counted by
:func:`~exactattn.cost.counting.count_call`.  This module only keeps the old
import path of those names; import them from :mod:`exactattn.cost`.

>>> from exactattn.call.policy import Policy
>>> s = CallShape((1, 1, 4, 8), (1, 1, 10, 8), (1, 1, 10, 16),
...               Policy(causal=True, alignment="bottom_right"))
>>> derive_call(s) == count_call(s).macs == {'scores': 272, 'mix': 544, 'total': 816}
True
"""

from .counting import count_call
from .derivation import BATCH, call_formula, call_nests, derive_call
from .sizes import CallShape, broadcast_batch

__all__ = ["BATCH", "CallShape", "broadcast_batch", "call_formula", "call_nests", "count_call",
           "derive_call"]
