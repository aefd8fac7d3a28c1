"""Gradients with respect to a head's weights: dW_Q, dW_K, dW_V and the bias gradients.

For a head given as tokens ``x`` (n x d_model) and projections (slots
layout, :mod:`exactattn.engines.head`): ``q_i = W_Q x_i + b_Q``, ``k_i = W_K x_i +
b_K``, ``v_i = W_V x_i + b_V``, and an upstream gradient ``dO``, the chain
rule through the projections gives, with dQ, dK, dV of the call
(:mod:`exactattn.reference.backward`)::

    dW_Q[s][m] = sum_i dQ_is x_im        db_Q[s] = sum_i dQ_is
    dW_K[s][m] = sum_j dK_js x_jm        db_K[s] = sum_j dK_js  (= 0 exactly)
    dW_V[s][m] = sum_j dV_js x_jm        db_V[s] = sum_j dV_js

In the ``rows`` layout (``q = x @ W_Q``) each dW is the transpose.  ``db_K``
is 0 exactly: a key bias adds ``q_i . b_K`` to every score of row i, which the
softmax cancels; and ``db_V = sum_i dO_i`` over rows that see a key (each row
of shares sums to 1), a rational vector.

>>> from exactattn.engines.head import Head
>>> h = Head([[1]], [[1]], [[1]], b_K=[5], divisor="none")
>>> g = head_gradients(h, [[0], [1]], [[1], [1]])
>>> g.decimals("dW_Q", 4), g.db_K[0].rational(), g.db_V[0].rational()
([['0.1966']], Fraction(0, 1), Fraction(2, 1))
"""

from __future__ import annotations

from fractions import Fraction

from ..errors import InputError
from ..options import check_choice
from ..numbers.exact import fmpq_mat_of, to_matrix
from ..numbers.ratio import ExpRatio
from ..reference.backward import BULK_PREC, Gradients, certified
from ..reference.reference import Reference


#: name -> (the call gradient it comes from, True for a bias)
WEIGHT_GRADIENTS = {"dW_Q": ("dQ", False), "dW_K": ("dK", False), "dW_V": ("dV", False),
                    "db_Q": ("dQ", True), "db_K": ("dK", True), "db_V": ("dV", True)}


class HeadGradients:
    """The exact gradients of a head's weights and biases (and of its call: ``.call``).

    ``dW_Q``, ``dW_K``, ``dW_V``: in the head's layout (slots: d_out x
    d_model; rows: d_model x d_out); ``db_Q``, ``db_K``, ``db_V``: one value
    per output slot.  Every entry is an :class:`~exactattn.numbers.ratio.ExpRatio`.
    """

    def __init__(self, head, x: list[list[Fraction]], call: Gradients):
        self.head = head
        self.x = x
        self.call = call
        self.layout = head.layout

    def matrix(self, name: str) -> list:
        """One weight gradient as values (a list for a bias)."""
        check_choice(name, "name", tuple(WEIGHT_GRADIENTS))
        source, bias = WEIGHT_GRADIENTS[name]
        n, d_model = len(self.x), self.head.d_model
        width = self.head.d_v if source == "dV" else self.head.d_k
        scaled = source in ("dQ", "dK") and self.call.irrational_scale is not None
        if bias:
            return [ExpRatio({(source, i, s): 1 for i in range(n)}, self.call, scaled)
                    for s in range(width)]
        slots = [[ExpRatio({(source, i, s): self.x[i][m] for i in range(n)}, self.call,
                           scaled) for m in range(d_model)] for s in range(width)]
        return slots if self.layout == "slots" else [list(c) for c in zip(*slots)]

    dW_Q = property(lambda self: self.matrix("dW_Q"), doc="dL/dW_Q in the head's layout")
    dW_K = property(lambda self: self.matrix("dW_K"), doc="dL/dW_K in the head's layout")
    dW_V = property(lambda self: self.matrix("dW_V"), doc="dL/dW_V in the head's layout")
    db_Q = property(lambda self: self.matrix("db_Q"), doc="dL/db_Q")
    db_K = property(lambda self: self.matrix("db_K"), doc="dL/db_K (0 exactly)")
    db_V = property(lambda self: self.matrix("db_V"), doc="dL/db_V")

    def balls(self, name: str, prec: int = BULK_PREC):
        """``arb_mat`` enclosures of one weight gradient at ``prec`` bits (one row for a bias)."""
        from flint import arb_mat
        source, bias = WEIGHT_GRADIENTS[name]
        G = self.call.balls(prec)[source]           # n x width (and the sink's row last)
        n = len(self.x)
        if G.nrows() != n:
            G = arb_mat(n, G.ncols(), [G[i, j] for i in range(n) for j in range(G.ncols())])
        from ..numbers.digits import working_precision
        with working_precision(prec):
            if bias:
                return arb_mat(1, n, [1] * n) * G
            X = arb_mat(fmpq_mat_of(self.x))
            slots = G.transpose() * X
        return slots if self.layout == "slots" else slots.transpose()

    def decimals(self, name: str, places: int) -> list:
        """One weight gradient correctly rounded to ``places`` decimals, in bulk."""
        bias, values, B = WEIGHT_GRADIENTS[name][1], self.matrix(name), self.balls(name)
        got = certified([[B[i, j] for j in range(B.ncols())] for i in range(B.nrows())], places,
                        lambda i, j: (values[j] if bias else values[i][j]),
                        nan=lambda i, j: (values[j] if bias else values[i][j]).nan)
        return got[0] if bias else got


def head_gradients(head, x, d_out, *, empty_row: str | None = None, dropout_keep=None,
                   floats: str | None = None) -> HeadGradients:
    """The exact gradients of ``head``'s weights and biases at tokens ``x``, given ``dO``.

    Shapes: ``x`` n x d_model, ``d_out`` n x d_v.  The head's policy gives the
    divisor, the causal rule and any sink, ALiBi, soft-cap, RoPE or dropout (``dropout_keep``
    n x n booleans with it); ``empty_row`` what a query that sees no key gets (default:
    the head policy's, as :func:`~exactattn.engines.head.attend` reads it).

    Raises:
        InputError: a symbolic head or symbolic tokens (gradients need numbers).
        ShapeError: ``d_out`` of the wrong shape.

    Reference: Vaswani et al. 2017, sec. 3.2.1; the chain rule through the
    projections (Goodfellow et al. 2016, sec. 6.5).
    """
    from ..call.inputs import Call, head_tokens
    if head.symbolic:
        raise InputError("head must have numeric weights for exact gradients (got symbols); "
                         "substitute numbers first")
    empty_row = head.policy.empty_row if empty_row is None else empty_row
    plain = head.with_policy(head.policy.replace(empty_row=empty_row))    # checks empty_row
    xs = head_tokens(head, x, floats)
    dO = to_matrix(d_out, name="d_out", shape=(len(xs), head.d_v), floats=floats)
    call = Call.of_head(plain, xs, dropout_keep=dropout_keep)
    return HeadGradients(head, xs, Reference(call).gradients(dO).blocks[(0, 0)])
