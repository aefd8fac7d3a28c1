"""The two exact attention functions exactattn ships.

:func:`reference` presents :class:`exactattn.verify.Reference` (the one exact
reference, which the checks read too) and :func:`attend_as_function` the head
engine through the attention-function interface ``fn(queries, keys, values,
*, mask=None, scale=None)``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from ..call.policy import DEFAULT_SCALE, Mask, Policy, divisor_text, parse_scale
from ..errors import InputError, ShapeError
from ..numbers.exact import to_matrix
from ..engines.head import Head, attend
from ..numbers.softmax import ExpRatio
from ..reference.reference import Reference
from .inputs import AttentionInput


def policy_scale(scale: Any) -> Fraction | None | str:
    """The interface's ``scale`` (what the scores are multiplied by) as a policy's scale.

    None (the default 1/sqrt(d_k)) is ``"default"``; anything else is read by
    :func:`~exactattn.call.policy.parse_scale` into the divisor squared ``D``.
    """
    return DEFAULT_SCALE if scale is None else parse_scale(scale)


def reference(queries, keys, values, *, mask: Mask | None = None, scale=None,
              causal: bool = False, alignment: str = "top_left",
              empty_row: str = "zero", policy: Policy | None = None,
              dropout_keep=None) -> list[list[ExpRatio]]:
    """Exact attention: ``outputs[i] = sum_j softmax_j(scale * queries[i] . keys[j] + mask[i][j]) values[j]``.

    The softmax is :class:`exactattn.numbers.softmax.SoftmaxRow` (closed forms, row
    maximum subtracted on the rationals); an additive mask's finite entries
    are its ``offsets``.  Queries and keys may differ in number.

    Shapes: queries n_q x d_k, keys n_k x d_k, values n_k x d_v -> n_q x d_v.

    Args:
        mask: an explicit :class:`~exactattn.call.policy.Mask` or None.
        scale: None (1/sqrt(d_k)), a positive exact number, ``"1/sqrt(q)"``
            or a sympy ``1/sqrt(q)``.
        causal, alignment: the causal rule (:class:`~exactattn.call.policy.Policy`).
        empty_row: what a query that sees no key gets (``zero``, ``uniform``, ``nan``).
        policy: a whole :class:`~exactattn.call.policy.Policy` with modifiers (soft-cap,
            sink, ALiBi, RoPE, window, dropout): replaces ``causal``,
            ``alignment`` and ``empty_row`` (``scale`` still applies).
        dropout_keep: n_q x n_k booleans (True = kept) with ``policy.dropout``.

    Returns:
        n_q x d_v :class:`~exactattn.numbers.softmax.ExpRatio` entries.

    Raises:
        ShapeError, InputError: as :class:`~exactattn.properties.AttentionInput`
        and :class:`~exactattn.call.policy.Policy`; FloatInputError: a binary float scale.

    Reference: Vaswani et al. 2017, sec. 3.2.1.

    >>> out = reference([[0]], [[0], [0]], [[1], [3]])
    >>> out[0][0].exact()
    Fraction(2, 1)
    >>> reference([[1]], [[0], [1]], [[0], [1]], scale=1)[0][0].text()
    'exp(1)/(1 + exp(1))'
    >>> [r[0].exact() for r in reference([[0], [0]], [[0]] * 3, [[1], [2], [3]], causal=True,
    ...                                  alignment="bottom_right")]
    [Fraction(3, 2), Fraction(2, 1)]
    """
    if policy is None:
        policy = Policy(divisor_squared=policy_scale(scale), causal=causal, alignment=alignment,
                        empty_row=empty_row)
    else:
        policy = policy.replace(divisor_squared=policy_scale(scale))
    return Reference(AttentionInput(queries, keys, values, mask, policy, dropout_keep)).outputs()


def selector_head(queries, keys, values, *, causal: bool, scale: Any = DEFAULT_SCALE,
                  symbolic: bool = False) -> tuple[Head, list[list]]:
    """A head whose projections pick queries, keys and values out of ``x[i] = q_i ++ k_i ++ v_i``.

    ``scale`` is a policy's scale (``"default"``, ``D`` or None).
    """
    d_k, d_v = len(queries[0]), len(values[0])
    width = 2 * d_k + d_v

    def pick(offset: int, count: int) -> list[list[int]]:
        return [[int(m == offset + s) for m in range(width)] for s in range(count)]
    kwargs = {} if scale == DEFAULT_SCALE else {"divisor": divisor_text(scale)}
    head = Head(pick(0, d_k), pick(d_k, d_k), pick(2 * d_k, d_v), layout="slots",
                causal=causal, symbolic=symbolic, **kwargs)
    x = [list(a) + list(b) + list(c) for a, b, c in zip(queries, keys, values)]
    return head, x


def _causal_mask(mask: Mask | None, n: int) -> bool:
    """Whether ``mask`` is the causal square mask (False: it hides nothing)."""
    if mask is None:
        return False
    if not isinstance(mask, Mask):
        raise InputError(f"mask must be an exactattn.call.policy.Mask or None (got {mask!r})")
    if not mask.has_offsets:
        keep = mask.as_form("bool_keep")
        if all(all(r) for r in keep):
            return False
        if keep == Policy(causal=True).keep(n, n).tolist():
            return True
    raise InputError(f"mask must be None or the causal mask for exactattn.attend (got {mask!r}); "
                     "use reference for any other mask")


def attend_as_function(queries, keys, values, *, mask: Mask | None = None, scale=None,
                       causal: bool = False) -> list[list[ExpRatio]]:
    """:func:`exactattn.attend` (pencil engine) as an attention function of queries, keys and values.

    Builds a head whose projections pick ``queries``, ``keys`` and
    ``values`` out of the token rows ``x[i] = queries[i] ++ keys[i] ++
    values[i]`` and runs it, so the checks exercise the head engine itself.
    Self-attention only (as many keys as queries); the head knows one rule,
    the causal one (with equal lengths the two alignments coincide), given as
    ``causal=True`` or as the causal mask itself (how checks pass it).

    Raises:
        ShapeError: different numbers of queries and keys.
        InputError: any other mask.

    >>> attend_as_function([[0], [0]], [[0], [0]], [[1], [3]])[1][0].exact()
    Fraction(2, 1)
    >>> attend_as_function([[0], [0]], [[0], [0]], [[1], [3]], causal=True)[0][0].exact()
    Fraction(1, 1)
    """
    q, k, v = (to_matrix(m, name=name) for m, name in
               ((queries, "queries"), (keys, "keys"), (values, "values")))
    if len(q) != len(k):
        raise ShapeError(f"keys must number as many as queries for exactattn.attend, {len(q)} "
                         f"(got {len(k)})")
    if not isinstance(causal, bool):
        raise InputError(f"causal must be True or False (got {causal!r})")
    causal = _causal_mask(mask, len(q)) or causal
    head, x = selector_head(q, k, v, causal=causal, scale=policy_scale(scale))
    trace = attend(head, x, engine="pencil")
    return [[trace.output(i, c) for c in range(head.d_v)] for i in range(trace.n)]
