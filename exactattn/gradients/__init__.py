"""Exact gradients of attention: dQ, dK, dV of a call, and dW/db of a head, certified.

The backward pass of ``O = softmax(scale Q K^T + m) V`` given an upstream
gradient ``dO`` (Vaswani et al. 2017, sec. 3.2.1; Dao et al. 2022, Algorithm 4)::

    dV = P^T dO,  dP = dO V^T,  D_i = sum_c dO_ic O_ic,  dS = P * (dP - D),
    dQ = scale dS K,  dK = scale dS^T Q

Every entry is a constant plus a sum over the rows' normalisers ``Z`` of ``N / Z^2``
(times the scale), over the forward's own softmax rows: one exact value type with the
shares, :class:`~exactattn.numbers.ratio.ExpRatio` (exact zero, equality, sign and
rationality tests, and every certified rounding ends).

This package is the entry point without a :class:`~exactattn.call.Call`: :func:`gradients`
builds one and returns :meth:`Reference(call).gradients <exactattn.verify.Reference.gradients>`'s
block (:class:`~exactattn.reference.backward.Gradients`: every modifier, soft-cap and RoPE
certified through the forward's rows); :func:`head_gradients` (:mod:`.weights`) the gradients of
a head's weights; :mod:`exactattn.properties` checks the exact properties of a call's gradients
(:func:`~exactattn.properties.gradients.check_gradients`).

>>> from exactattn.call.policy import Policy
>>> g = gradients([[0], [0]], [[1], [2]], [[1], [3]], [[1], [1]], Policy(scale="none"))
>>> g.dV[0][0].rational(), g.dQ[0][0].rational()      # equal scores: rational gradients
(Fraction(1, 1), Fraction(1, 2))
"""

from ..call.inputs import Call
from ..call.masks import Mask
from ..call.policy import Policy
from ..reference.backward import Gradients
from ..reference.reference import Reference
from .weights import head_gradients

__all__ = ["gradients", "head_gradients"]


def gradients(queries, keys, values, d_out, policy: Policy | None = None, mask=None, *,
              dropout_keep=None, floats: str | None = None, d_lse=None) -> Gradients:
    """The exact gradients of one head's call ``softmax(scale Q K^T + mask) V`` given ``dO``.

    Shapes: queries L x E, keys S x E, values S x E_v, d_out L x E_v (any exact numbers
    :class:`~exactattn.call.Call` reads, ``floats`` as there); ``mask`` an L x S
    :class:`~exactattn.call.policy.Mask` (an additive one adds its offsets) or its rows, read
    under ``policy.mask_kind``; ``dropout_keep`` L x S booleans (True = kept) with
    ``policy.dropout``.  ``policy`` gives the scale, the causal rule and windows, the
    empty-row answer, the sink, ALiBi (with ``policy.head``), dropout, the soft-cap and RoPE;
    ``d_lse`` (L exact numbers) the upstream gradient of each row's natural log-sum-exp.

    Raises:
        ShapeError: shapes that do not match.
        InputError, FloatInputError: entries that are not exact numbers; dropout without
            its keep-mask.

    >>> g = gradients([[1, 0]], [[1, 0], [0, 1]], [[1], [0]], [[1]], Policy(scale="1"))
    >>> g.dV[0][0].text()
    'exp(1)/(1 + exp(1))'
    >>> s = gradients([[0]], [[0]], [[1]], [[1]], Policy(scale="none", sink=0))
    >>> s.dsink.text(), s.dsink.decimal(4)                 # -P_sink D = -(1/2)(1/2)
    ('-1/4', '-0.2500')
    """
    call = Call(queries, keys, values, getattr(mask, "rows", mask), policy=policy,
                mask_kind=mask.kind if isinstance(mask, Mask) else None, floats=floats,
                dropout_keep=dropout_keep)
    return Reference(call).gradients(d_out, d_lse).blocks[(0, 0)]
