"""From the one call model to a block of exact gradients: visibility, offsets, sink, dropout.

:func:`block_inputs` reads a :class:`~exactattn.call.policy.Policy` (and an explicit
:class:`~exactattn.call.policy.Mask`, and a dropout keep-mask) into what
:class:`~exactattn.gradients.backward.Gradients` takes: which keys each query
sees (``Policy.keep``: causal rule, windows, query offset), the offsets added
to the scaled scores (an additive mask's rationals plus the ALiBi bias
``slope * distance``, :meth:`Alibi.bias <exactattn.call.modifiers.Alibi.bias>`:
a rational, or an exact algebraic :class:`~exactattn.numbers.reals.Surd` for slopes
such as ``2^(-1/2)``), the sink logit, and the dropout factors ``keep / (1 -
p)`` (:func:`exactattn.call.modifiers.dropout_factors`).

What gradients cover (:func:`check_policy`): every scale, the causal rule, windows
and query offsets, empty rows, masks (additive ones included), GQA, sinks, ALiBi
(every form, rational and irrational slopes) and dropout, exactly; soft-capping and
RoPE (any layout, partial rotary), whose logits are transcendental functions of the
scores (tanh, cos/sin), certified: decimals and comparisons from enclosures, a
bounded refusal where they cannot decide (:class:`~exactattn.gradients.Gradients`).

>>> from exactattn.call.policy import Policy
>>> from exactattn.call.modifiers import Alibi
>>> b = block_inputs(Policy(scale="none", alibi=Alibi(2), query_offset=1), 1, 2)
>>> b["offsets"], b["sink"]
([[Fraction(-1, 16), Fraction(0, 1)]], None)
"""

from __future__ import annotations

from fractions import Fraction

from ..call.policy import Policy
from ..errors import InputError, ShapeError, shorten
from ..numbers.exact import to_matrix
from .backward import Gradients


def check_policy(policy: Policy) -> Policy:
    """``policy`` when the gradients cover it (a field named in ``UNSUPPORTED["gradients"]``,
    none today, is refused with one line).

    >>> check_policy(Policy(causal=True, sink=Fraction(0))).causal
    True
    """
    for name in policy.unsupported("gradients"):
        value = getattr(policy, name)
        if value is not None:
            raise InputError(f"policy {name} must be unset for gradients (got "
                             f"{shorten(str(value))}); the gradients do not take it")
    return policy


def block_inputs(policy: Policy, n_queries: int, n_keys: int, mask=None,
                 dropout_keep=None) -> dict:
    """``keep``, ``offsets``, ``sink``, ``factors`` of one head's call, for :class:`Gradients`.

    ``mask`` an explicit n_queries x n_keys Mask or None; ``dropout_keep``
    n_queries x n_keys booleans (True = kept) when ``policy.dropout`` is set.

    Raises:
        InputError: dropout without a keep-mask or a keep-mask without dropout.
        ShapeError: a keep-mask of the wrong shape.
    """
    from ..call.modifiers import check_keep, dropout_factors, row_offsets
    check_policy(policy)
    L, S = n_queries, n_keys
    keep = policy.keep(L, S, mask)
    offsets = None
    if mask is not None and mask.kind == "additive":
        offsets = [mask.offsets(i) for i in range(L)]
    if policy.alibi is not None:
        offsets = [row_offsets(policy, i, L, S, None if offsets is None else offsets[i])
                   for i in range(L)]
    rows = check_keep(dropout_keep, policy, L, S, name="dropout_keep", argument="dropout_keep")
    factors = None if rows is None else [dropout_factors(policy.dropout, r) for r in rows]
    return {"keep": keep, "offsets": offsets, "sink": policy.sink, "factors": factors}


def gradients(queries, keys, values, d_out, policy: Policy | None = None, mask=None, *,
              dropout_keep=None, floats: str | None = None, d_lse=None) -> Gradients:
    """The exact gradients of one head's call ``softmax(scale Q K^T + mask) V`` given ``dO``.

    Shapes: queries L x E, keys S x E, values S x E_v, d_out L x E_v (any
    exact numbers :func:`~exactattn.numbers.exact.to_matrix` reads); ``mask`` an
    L x S :class:`~exactattn.call.policy.Mask` (an additive one adds its offsets);
    ``dropout_keep`` L x S booleans (True = kept) with ``policy.dropout``.
    ``policy`` gives the scale, the causal rule and windows, the empty-row
    answer, the sink, ALiBi (with ``policy.head``), dropout, the soft-cap and RoPE;
    ``d_lse`` (L exact numbers) the upstream gradient of each row's natural log-sum-exp.

    Raises:
        ShapeError: shapes that do not match.
        InputError, FloatInputError: entries that are not exact numbers; a policy
            with soft-capping or RoPE (their gradients need the forward's rows: use
            :meth:`Reference.gradients <exactattn.verify.Reference.gradients>`); dropout
            without its keep-mask.

    >>> g = gradients([[1, 0]], [[1, 0], [0, 1]], [[1], [0]], [[1]], Policy(scale="1"))
    >>> g.dV[0][0].text()
    'exp(1)/(1 + exp(1))'
    >>> s = gradients([[0]], [[0]], [[1]], [[1]], Policy(scale="none", sink=Fraction(0)))
    >>> s.dsink.text(), s.dsink.decimal(4)                 # -P_sink D = -(1/2)(1/2)
    ('-1/4', '-0.2500')
    """
    from ..call.masks import Mask
    if policy is not None and not isinstance(policy, Policy):
        raise InputError(f"policy must be a Policy or None (got {shorten(repr(policy))}); "
                         "e.g. Policy(scale='none', causal=True)")
    if mask is not None and not isinstance(mask, Mask):
        raise InputError(f"mask must be a Mask or None (got {shorten(repr(mask))}); "
                         "e.g. Mask('bool_keep', rows)")
    Q = to_matrix(queries, name="queries", floats=floats)
    E = len(Q[0])
    K = to_matrix(keys, name="keys", shape=(None, E), floats=floats)
    V = to_matrix(values, name="values", shape=(len(K), None), floats=floats)
    dO = to_matrix(d_out, name="d_out", shape=(len(Q), len(V[0])), floats=floats)
    policy = check_policy(policy or Policy())
    L, S = len(Q), len(K)
    if mask is not None and (mask.n_queries, mask.n_keys) != (L, S):
        raise ShapeError(f"mask must be {L} x {S} like queries x keys "
                         f"(got {mask.n_queries} x {mask.n_keys})")
    block = block_inputs(policy, L, S, mask, dropout_keep)
    lse = None if d_lse is None else \
        to_matrix([d_lse], name="d_lse", shape=(1, L), floats=floats)[0]
    return Gradients(Q, K, V, dO, divisor_squared=policy.divisor_squared_for(E),
                     empty_row=policy.empty_row, policy=policy, d_lse=lse, **block)
