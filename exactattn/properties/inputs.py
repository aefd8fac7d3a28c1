"""One input of the property checks, the exact functions that answer it, and how a failure reads.

An input is a :class:`~exactattn.call.Call` of one head (L x E): queries,
keys, values, an explicit :class:`~exactattn.call.policy.Mask`, a
:class:`~exactattn.call.policy.Policy` (the scale by its divisor squared ``D``,
the causal rule and its alignment, a window, soft-cap, sink, ALiBi, RoPE,
dropout, the empty-row answer) and the dropout keep-mask.  ``Call`` checks it,
once: shapes, entries, and ``inf``/``nan`` only where no query sees them
(:meth:`Call.check_nonfinite <exactattn.call.Call.check_nonfinite>`, run by
every check).  :func:`one_head` builds one from the checks' parts (a
:class:`~exactattn.call.policy.Mask` object); the functions below read one
back as the checks use it.

The two exact attention functions exactattn ships: :func:`reference` presents
:class:`exactattn.verify.Reference` (the one exact reference, which the checks
read too) and :func:`attend_as_function` the head engine, through the
attention-function interface ``fn(queries, keys, values, *, mask=None,
scale=None)``.

How a property failure reads (:class:`PropertyFailure`): the property, the
function (and its tolerance), the input (typed back as Python) and one line per
entry that broke the property.  An exact value prints as itself when it is
rational and otherwise as its float followed by its closed form
(``0.73105857863 (exactly exp(1)/(1 + exp(1)))``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Sequence

from ..call.inputs import Call
from ..call.masks import entry_text
from ..call.policy import DEFAULT_SCALE, Mask, Policy, divisor_text, parse_scale
from ..engines.head import Head, attend
from ..errors import InputError, ShapeError
from ..numbers.digits import fraction_text
from ..numbers.exact import to_matrix
from ..numbers.softmax import ExpRatio
from ..reference.reference import Reference


def one_head(queries, keys, values, mask: Mask | None = None, policy: Policy | None = None,
             dropout_keep=None) -> Call:
    """The one-head :class:`~exactattn.call.Call` of the checks' parts (``mask`` a
    :class:`~exactattn.call.policy.Mask` or None), checked by ``Call``.

    >>> one_head([[1, 0]], [[1]], [[1]])
    Traceback (most recent call last):
    ...
    exactattn.errors.ShapeError: key must be 1 x H_kv x S x 2 like the query (got 1 x 1 x 1 x 1)
    """
    return Call(queries, keys, values, None if mask is None else mask.rows, policy=policy,
                mask_kind=None if mask is None else mask.kind, dropout_keep=dropout_keep)


def matrices(call: Call) -> tuple[list, list, list]:
    """The queries, keys and values of a one-head call, as lists of rows."""
    return call.query[0, 0].tolist(), call.key[0, 0].tolist(), call.value[0, 0].tolist()


def sizes(call: Call) -> tuple[int, int, int, int]:
    """``(n_q, n_k, d_k, d_v)``."""
    return tuple(call.shape[k] for k in ("L", "S", "E", "E_v"))


def dropout_keep(call: Call) -> list | None:
    """The dropout keep-mask as n_q x n_k lists of booleans, or None."""
    return None if call.dropout_keep is None else call.dropout_keep[0, 0].tolist()


def keep(call: Call):
    """n_q x n_k numpy booleans, True where query i sees key j: ``Policy.keep`` with the mask."""
    n_q, n_k = sizes(call)[:2]
    return call.policy.keep(n_q, n_k, call.block_mask(0, 0))


def visible(call: Call) -> list[list[int]]:
    """The keys each query sees: the policy's visible keys that the mask keeps."""
    return [r.nonzero()[0].tolist() for r in keep(call)]


def effective_mask(call: Call) -> Mask | None:
    """The explicit mask with the causal rule folded in (None: every key visible).

    An additive mask stays additive (its offsets kept, ``-inf`` where the
    causal rule hides); otherwise the result is a ``bool_keep`` mask.  This
    is what reaches a function, which is told nothing else about visibility.
    """
    return call.policy.fold(call.block_mask(0, 0), *sizes(call)[:2])


def replace(call: Call, **changes) -> Call:
    """A copy of a one-head call with some of :func:`one_head`'s arguments changed (checked again)."""
    return one_head(**dict(zip(("queries", "keys", "values"), matrices(call)),
                           mask=call.block_mask(0, 0), policy=call.policy,
                           dropout_keep=dropout_keep(call)) | changes)


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
        ShapeError, InputError: as :class:`~exactattn.call.Call`
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
    D = policy_scale(scale)
    policy = Policy(divisor_squared=D, causal=causal, alignment=alignment, empty_row=empty_row) \
        if policy is None else policy.replace(divisor_squared=D)
    return Reference(one_head(queries, keys, values, mask, policy, dropout_keep)).outputs()


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


@dataclass
class Check:
    """One property checked once: its name, its statement, whether it holds, one line per finding.

    The one result of the property checks: the gradient checks return it, a function check
    raises it as a :class:`PropertyFailure` when it does not hold."""
    name: str
    statement: str
    holds: bool
    lines: list[str] = field(default_factory=list)


class PropertyFailure(AssertionError):
    """A property of attention does not hold: ``check`` (a :class:`Check`) says which, the
    report names where (the function and its input, or exactattn's head) and what broke."""

    def __init__(self, check: Check, *where: str):
        self.check = check
        super().__init__("\n".join([f"property failed: {check.statement}",
                                     *(f"  {x}" for x in (*where, *check.lines))]))


PropertyFailure.__module__ = "exactattn.properties"   # where users import it from


def matrix_text(m: Sequence[Sequence]) -> str:
    return "[" + ", ".join("[" + ", ".join(entry_text(e) for e in r) + "]" for r in m) + "]"


def policy_text(policy: Policy) -> str:
    """``Policy(...)`` with the fields that differ from the defaults, as Python that builds it.

    The scale as text (``scale='1/8'``), exact numbers as text (``sink='1/2'``,
    after the other fields), every other field as its ``repr``.

    >>> from exactattn.call.policy import Alibi
    >>> policy_text(Policy(scale="1/8", causal=True, sink="1/2", alibi=Alibi(8), head=3))
    "Policy(scale='1/8', causal=True, alibi=Alibi(heads=8, form='relative'), head=3, sink='1/2')"
    """
    scale = [f"scale={policy.scale_text()!r}"] if policy.divisor_squared != DEFAULT_SCALE else []
    changed = [(f.name, getattr(policy, f.name)) for f in dataclasses.fields(policy) if
               f.name != "divisor_squared" and getattr(policy, f.name) != f.default]
    return "Policy(" + ", ".join(scale + [f"{k}={v!r}" for k, v in changed if not isinstance(
        v, Fraction)] + [f"{k}={str(v)!r}" for k, v in changed if isinstance(v, Fraction)]) + ")"


def input_text(inp: Call) -> str:
    """A one-head :class:`~exactattn.call.Call` as the Python that builds it again (the mask's
    kind is the policy's ``mask_kind``).

    >>> input_text(Call([[1]], [[1], [2]], [[0], [3]], [["0", "-inf"]], mask_kind="additive"))
    "Call([[1]], [[1], [2]], [[0], [3]], [[0, '-inf']], policy=Policy(mask_kind='additive'))"
    """
    mask, keep = inp.block_mask(0, 0), dropout_keep(inp)
    parts = [matrix_text(m) for m in matrices(inp) + (() if mask is None else (mask.rows,))]
    keep = "" if keep is None else f", dropout_keep={keep!r}"
    return f"Call({', '.join(parts)}, policy={policy_text(inp.policy)}{keep})"


def value_text(x) -> str:
    """A result entry: an exact rational as itself, an irrational with its closed form, a float's repr."""
    if isinstance(x, ExpRatio):
        if x.row.nan:
            return "nan"
        q = x.rational()
        return fraction_text(q) if q is not None else f"{float(x):.12g} (exactly {x.text()})"
    if isinstance(x, Fraction):
        return fraction_text(x)
    return repr(x)


def row_text(row: Sequence) -> str:
    return "[" + ", ".join(value_text(x) for x in row) + "]"


def failure(name: str, prop: str, function: str, inp, lines: list[str]) -> PropertyFailure:
    """The :class:`PropertyFailure` of a function check: the property, the function, the input, the lines."""
    return PropertyFailure(Check(name, prop, False, lines), f"function: {function}",
                           f"input: {input_text(inp)}")
