"""What the gradient proofs share: a few concrete calls, exact, every modifier the gradients take.

Not a proof itself (the leading underscore keeps it out of ``exactattn prove``).

* ``plain``: three tokens, d_k = 2, the default scale 1/sqrt(2) (irrational), causal;
* ``sink + ALiBi``: the same with a sink logit 1/2 and ALiBi of a 12-head model at head 8
  (slope 2^(-1/2) = 1/sqrt(2), the scale's own irrational);
* ``dropout + mask``: scale 1/2, dropout 1/3 with a keep-mask, an additive mask.

Reference: Vaswani et al. 2017, sec. 3.2.1 (the call); Press et al. 2022 (ALiBi).
"""

from __future__ import annotations

from fractions import Fraction

import exactattn  # noqa: F401  (sets sympy's ground types before sympy is imported)
from exactattn.call.policy import Mask, Policy
from exactattn.gradients import gradients
from exactattn.call.modifiers import Alibi

__all__ = ["CALLS", "calls"]

F = Fraction
Q = [[1, 0], [0, 2], [1, 1]]
K = [[1, 1], [2, 0], [0, 1]]
V = [[1, F(1, 2)], [3, 0], [-2, 1]]
D_OUT = [[1, 0], [-1, 2], [2, F(-1, 2)]]

#: label -> (policy, mask, dropout keep-mask)
CALLS = {
    "plain": (Policy(causal=True), None, None),
    "sink + ALiBi": (Policy(causal=True, sink=F(1, 2), alibi=Alibi(12), head=8), None, None),
    "dropout + mask": (Policy(scale="1/2", dropout=F(1, 3)),
                       Mask("additive", [["0", "1/2", "-inf"], ["1", "0", "-1/3"],
                                         ["0", "0", "0"]]),
                       [[True, True, True], [False, True, True], [True, True, False]]),
}


def calls(make=gradients):
    """``(label, Gradients)`` for every call in :data:`CALLS` (``make`` builds them)."""
    return [(label, make(Q, K, V, D_OUT, policy, mask, dropout_keep=keep))
            for label, (policy, mask, keep) in CALLS.items()]
