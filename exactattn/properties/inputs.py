"""One input of the property checks: a one-head :class:`~exactattn.call.Call`, built and read here.

An input is a :class:`~exactattn.call.Call` of one head (L x E): queries,
keys, values, an explicit :class:`~exactattn.call.policy.Mask`, a
:class:`~exactattn.call.policy.Policy` (the scale by its divisor squared ``D``,
the causal rule and its alignment, a window, soft-cap, sink, ALiBi, RoPE,
dropout, the empty-row answer) and the dropout keep-mask.  ``Call`` checks it,
once: shapes, entries, and ``inf``/``nan`` only where no query sees them
(:meth:`Call.check_nonfinite <exactattn.call.Call.check_nonfinite>`).
:func:`AttentionInput` builds one from the checks' arguments; the functions
below read one back as the checks use it.
"""

from __future__ import annotations

from ..call.inputs import Call, rectangular
from ..call.policy import DEFAULT_SCALE, Mask, Policy
from ..errors import InputError, ShapeError, shorten
from ..numbers.exact import is_symbolic
from ..engines.head import attend


def _matrix_shape(m, name: str, rows=None, cols=None) -> tuple:
    """``m``'s rows x columns, refused in the checks' words when they are not ``rows`` x ``cols``."""
    shape = rectangular(m, name).shape
    if len(shape) == 2 and (rows or shape[0], cols or shape[1]) != shape:
        raise ShapeError(f"{name} must be {rows or shape[0]} x {cols or shape[1]} "
                         f"(got {shape[0]} x {shape[1]})")
    return shape


def AttentionInput(queries, keys, values, mask: Mask | None = None, policy: Policy | None = None,
                   dropout_keep=None) -> Call:
    """One input to an attention function, as the one-head :class:`~exactattn.call.Call` it is.

    Shapes: ``queries`` n_q x d_k, ``keys`` n_k x d_k, ``values`` n_k x d_v,
    ``mask`` an n_q x n_k :class:`~exactattn.call.policy.Mask` or None,
    ``dropout_keep`` n_q x n_k booleans (True = kept; with ``policy.dropout``)
    or None.  Query i sees key j when the policy's ``visible_keys(i, n_q,
    n_k)`` holds j and the mask keeps (i, j).

    Raises:
        ShapeError: sizes that do not fit together; InputError: bad entries
        (symbols included: the checks are exact over rationals), a mask or
        policy of the wrong type.

    >>> inp = AttentionInput([[1, 0]], [[1, 0], [0, 1]], [["1/2"], [2]])
    >>> inp.shape["L"], inp.shape["S"], inp.policy.divisor_squared_for(inp.shape["E"])
    (1, 2, Fraction(2, 1))
    >>> AttentionInput([[1, 0]], [[1]], [[1]])
    Traceback (most recent call last):
    ...
    exactattn.errors.ShapeError: keys must be 1 x 2 (got 1 x 1)
    """
    if mask is not None and not isinstance(mask, Mask):
        raise InputError(f"mask must be an exactattn.call.policy.Mask or None "
                         f"(got {shorten(repr(mask))})")
    if policy is None:
        policy = Policy()
    elif not isinstance(policy, Policy):
        raise InputError(f"policy must be an exactattn.call.policy.Policy or None "
                         f"(got {shorten(repr(policy))})")
    n_q, d_k = _matrix_shape(queries, "queries")[:2]
    n_k = _matrix_shape(keys, "keys", cols=d_k)[0]
    _matrix_shape(values, "values", rows=n_k)
    if mask is not None and (mask.n_queries, mask.n_keys) != (n_q, n_k):
        raise ShapeError(f"mask must be {n_q} x {n_k} (got {mask.n_queries} x {mask.n_keys})")
    for name, m in (("queries", queries), ("keys", keys), ("values", values)):
        for i, r in enumerate(m):
            for j, e in enumerate(r):
                if is_symbolic(e):
                    raise InputError(
                        f"{name}[{i}][{j}] must be a rational number (got {shorten(str(e))}); "
                        "the properties' inputs and reference are exact over rationals: for "
                        "symbols, run a head with exactattn.attend(head, x, engine='symbolic')")
    call = Call(queries, keys, values, None if mask is None else mask.rows, policy=policy,
                mask_kind=None if mask is None else mask.kind, name="attention input",
                dropout_keep=dropout_keep, labels=("queries", "keys", "values"))
    call.check_nonfinite()
    if (policy.dropout is None) != (dropout_keep is None):
        from ..call.modifiers import dropout_factors
        dropout_factors(policy.dropout, dropout_keep and [True])
    return call


def matrices(call: Call) -> tuple[list, list, list]:
    """The queries, keys and values of a one-head call, as lists of rows."""
    return call.query[0, 0].tolist(), call.key[0, 0].tolist(), call.value[0, 0].tolist()


def sizes(call: Call) -> tuple[int, int, int, int]:
    """``(n_q, n_k, d_k, d_v)``."""
    sh = call.shape
    return sh["L"], sh["S"], sh["E"], sh["E_v"]


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
    """A copy of a one-head call with some of :func:`AttentionInput`'s arguments changed (checked again)."""
    q, k, v = matrices(call)
    fields = dict(queries=q, keys=k, values=v, mask=call.block_mask(0, 0), policy=call.policy,
                  dropout_keep=dropout_keep(call))
    fields.update(changes)
    return AttentionInput(**fields)


def input_from_head(head, x, *, floats: str | None = None) -> Call:
    """The attention input a head sees for tokens ``x``: its queries, keys, values and policy.

    The policy is the head's (causal top_left for a causal head), with the
    scale ``"default"`` when the divisor is the default sqrt(d_k).

    >>> from exactattn.examples import chronicle
    >>> ex = chronicle()
    >>> inp = input_from_head(ex.head, ex.x)
    >>> matrices(inp)[0][1], inp.policy.divisor_squared   # divisor 2 = sqrt(d_k)
    ([Fraction(0, 1), Fraction(3, 1), Fraction(1, 2), Fraction(0, 1)], 'default')
    """
    trace = attend(head, x, engine="pencil", floats=floats)
    policy = head.policy
    if head.divisor_squared == head.d_k:
        policy = policy.replace(divisor_squared=DEFAULT_SCALE)
    return AttentionInput(trace.queries, trace.keys, trace.values, None, policy)
