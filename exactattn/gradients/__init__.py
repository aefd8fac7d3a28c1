"""Exact gradients of attention: dQ, dK, dV of a call, and dW/db of a head, certified.

The backward pass of ``O = softmax(scale Q K^T + m) V`` given an upstream
gradient ``dO`` (Vaswani et al. 2017, sec. 3.2.1; Dao et al. 2022, Algorithm 4)::

    dV = P^T dO,  dP = dO V^T,  D_i = sum_c dO_ic O_ic,  dS = P * (dP - D),
    dQ = scale dS K,  dK = scale dS^T Q

Every entry is a constant plus a sum over the rows' normalisers ``Z`` of ``N / Z^2``
(times the scale), over the forward's own softmax rows: one exact value type with the
shares, :class:`~exactattn.numbers.ratio.ExpRatio` (exact zero, equality, sign and
rationality tests, and every certified rounding ends).

* :mod:`~exactattn.gradients.terms`: :class:`Terms`, the exponents as powers of a few
  generators ``t, u, ...`` (the printed view ``text(style="generators")``);
* :mod:`~exactattn.gradients.backward`: :class:`Gradients`;
* :mod:`~exactattn.gradients.inputs`: :func:`gradients` (from the one call model:
  masks, windows, sinks, ALiBi, dropout), :func:`check_policy`;
* :mod:`~exactattn.gradients.floats`: certified float64 enclosures (bulk rounding);
* :mod:`~exactattn.gradients.checks`: the exact properties of a call's gradients;
* :mod:`~exactattn.gradients.weights`: :func:`head_gradients`, :class:`HeadGradients`.

>>> from exactattn.call.policy import Policy
>>> g = gradients([[0], [0]], [[1], [2]], [[1], [3]], [[1], [1]], Policy(scale="none"))
>>> g.dV[0][0].rational(), g.dQ[0][0].rational()      # equal scores: rational gradients
(Fraction(1, 1), Fraction(1, 2))
"""

from .backward import Gradients, certified
from .inputs import block_inputs, check_policy, gradients
from .weights import head_gradients

__all__ = ["gradients", "head_gradients"]
