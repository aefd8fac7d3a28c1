"""The fast engine: exact projections and scores through python-flint, certified shares in bulk.

The same head as the pencil engine (Vaswani et al. 2017, sec. 3.2.1), evaluated
for large n::

    queries = x W_Q^T, keys = x W_K^T, values = x W_V^T     fmpq_mat products (exact)
    raw scores = queries keys^T                             fmpq_mat product (exact)

The projections are handed to the :class:`~exactattn.engines.trace.Trace` as integer
numerators over one denominator each, and the raw scores are their integer product:
``trace.queries``, ``trace.raw_scores`` ... turn them into lists of ``Fraction`` on
first access (for a 1024 x 1024 score matrix that alone costs seconds).  ``trace.share(i, j)`` builds the exact softmax row of query i on
demand, and ``trace.share_decimals(places)`` certifies every share at once
from integer enclosures (:mod:`exactattn.numbers.bulk`).  No multiply-adds are counted
(``trace.macs`` is None): nothing is counted that did not run.

Modifiers (:class:`~exactattn.call.policy.Policy`): windows and query offsets hide
keys here as in every engine; a sink, ALiBi and soft-capping are applied
exactly by the trace's rows (:func:`exactattn.reference.logits.softmax_row`), whose
decimals are then certified entry by entry, not in bulk.  RoPE and dropout
have no fast path: :func:`~exactattn.engines.head.attend` refuses them on this
engine and runs them on the pencil engine under ``engine="auto"``.

>>> from exactattn import Head
>>> h = Head([[1, 0], [0, 1]], [[1, 0], [0, 1]], [[1, 0], [0, 1]], divisor="none")
>>> t = attend_fast(h, [[Fraction(0), Fraction(0)], [Fraction(1), Fraction(0)]])
>>> t.raw_scores
[[Fraction(0, 1), Fraction(0, 1)], [Fraction(0, 1), Fraction(1, 1)]]
>>> t.share_decimals(4)         # row 1: exactly 1/2 each; row 2: 1/(1+e), e/(1+e)
[['0.5000', '0.5000'], ['0.2689', '0.7311']]
>>> t.output_decimals(4)
[['0.5000', '0.0000'], ['0.7311', '0.0000']]
>>> t.share(1, 1).text(), t.macs
('exp(1)/(1 + exp(1))', None)
"""

from __future__ import annotations

from fractions import Fraction

from ..numbers.bulk import mat_ints
from ..numbers.exact import fmpq_mat_of
from .trace import Trace


def _biased(m, b):
    """``m`` plus the bias b on every row (``m`` itself without a bias)."""
    return m if b is None else m + fmpq_mat_of([b] * m.nrows())


def attend_fast(head, xs: list[list[Fraction]]) -> Trace:
    """Run ``head`` over validated token rows ``xs`` with python-flint matrices.

    Shapes: ``xs`` is n x d_model (``Fraction`` entries, as
    :func:`~exactattn.engines.head.attend` validates them); queries, keys n x d_k;
    values n x d_v; scores n x n.

    Reference: Vaswani et al. 2017, sec. 3.2.1.

    >>> from exactattn.examples import chronicle
    >>> ex = chronicle()
    >>> t = attend_fast(ex.head, ex.x)
    >>> t.queries[1], t.share_decimals(4)[1]
    ([Fraction(0, 1), Fraction(3, 1), Fraction(1, 2), Fraction(0, 1)], ['0.5800', '0.1216', '0.1769', '0.1216'])
    """
    X = fmpq_mat_of(xs)
    Q, K, V = (mat_ints(_biased(X * fmpq_mat_of(w).transpose(), b))
               for w, b in ((head.W_Q, head.b_Q), (head.W_K, head.b_K), (head.W_V, head.b_V)))
    return Trace(head, "fast", xs, queries=Q, keys=K, values=V)
