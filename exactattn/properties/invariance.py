"""The invariance checks: a change to the input that must leave the outputs alone, or move them exactly.

Each ``check_*(fn, inp, ...)`` runs ``fn`` on ``inp`` and on a changed copy
(scores shifted, keys or queries permuted, a bias added, hidden entries
changed) and compares the two runs row by row: exactly for an exact
function, within twice the tolerance for a float one
(:class:`~exactattn.properties.implementation.Result`).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from ..errors import InputError, ShapeError
from ..numbers.exact import to_exact
from ..call.inputs import Call, empty_rows, keys_read
from .implementation import Result, column_scales, property_check
from .inputs import dropout_keep, effective_mask, keep, matrices, replace, sizes, visible
from .report import fail, value_text
from .rules import PROPERTIES

# what each check's failure says: the property's one statement (rules.PROPERTIES)
SHIFT = PROPERTIES["shift invariance"].statement
KEY_PERMUTATION = PROPERTIES["key permutation"].statement
QUERY_PERMUTATION = PROPERTIES["query permutation"].statement
KEY_BIAS = PROPERTIES["key bias cancels"].statement
VALUE_BIAS = PROPERTIES["value bias shifts"].statement
MASKED = PROPERTIES["masked entries ignored"].statement
NONFINITE = PROPERTIES["masked inf/nan ignored"].statement


def _compare_outputs(prop, impl, inp, base: Result, other: Result, rows_map, shift=None):
    """Rows ``other[i]`` against ``base[src]`` (+ ``shift``) for ``(i, src)`` in ``rows_map``.

    Rows of ``inp`` (the base input) that see no key are skipped.
    """
    bad = []
    scales = column_scales(matrices(inp)[2])
    seen = visible(inp)
    for i, src in rows_map:
        if not seen[src]:
            continue
        for c, M in enumerate(scales):
            want, got = base.rows[src][c], other.rows[i][c]
            if shift is not None:
                want = base.plus(want, shift[c])
                M = M + abs(shift[c])
            if not other.same(got, want, M):
                bad.append(f"outputs[{i}][{c}] = {value_text(got)}, want {value_text(want)}")
    if bad:
        fail(prop, impl.describe(other), inp, bad)


def _in_order(n: int) -> list[tuple[int, int]]:
    return [(i, i) for i in range(n)]


@property_check(SHIFT)
def check_shift_invariance(impl, inp: Call, shifts: Sequence | None = None) -> None:
    """Adding a constant to a row of scores changes nothing: softmax(s + c) = softmax(s).

    The constant ``shifts[i]`` (default ``i + 1``) is added to every raw score
    of query i by appending ``shifts[i]`` to the query and 1 to every key; the
    scale is then passed explicitly, so the widened input keeps the original
    one.  Outputs must be unchanged.

    Raises:
        PropertyFailure: an output that moved.
        ShapeError: ``shifts`` of the wrong length.
    """
    queries, keys, _ = matrices(inp)
    n_q, _, d_k, _ = sizes(inp)
    if shifts is None:
        shifts = [Fraction(i + 1) for i in range(n_q)]
    shifts = [to_exact(s, name=f"shifts[{i}]") for i, s in enumerate(shifts)]
    if len(shifts) != n_q:
        raise ShapeError(f"shifts must have one entry per query, {n_q} (got {len(shifts)})")
    wide = replace(inp, queries=[q + [s] for q, s in zip(queries, shifts)],
                   keys=[k + [Fraction(1)] for k in keys],
                   policy=inp.policy.replace(divisor_squared=inp.policy.divisor_squared_for(d_k)))
    _compare_outputs(f"{SHIFT} (shifts {[str(s) for s in shifts]})", impl, inp, impl(inp), impl(wide),
                     _in_order(n_q))


def _permutation(permutation, n: int) -> list[int]:
    if permutation is None:
        return list(reversed(range(n)))
    perm = list(permutation)
    if sorted(perm) != list(range(n)):
        raise InputError(f"permutation must be a permutation of 0..{n - 1} (got {permutation!r})")
    return perm


def _permuted(inp: Call, rows, cols, **changes) -> Call:
    """``inp`` with ``changes``, its mask (the causal rule carried by the mask it stands for)
    and dropout keep-mask cut to ``rows`` x ``cols``."""
    policy, mask = inp.policy, inp.block_mask(0, 0)
    if policy.causal:
        policy, mask = policy.replace(causal=False), effective_mask(inp)
    keep = dropout_keep(inp)
    return replace(inp, policy=policy, mask=None if mask is None else mask.select(rows, cols),
                   dropout_keep=None if keep is None else [[keep[i][j] for j in cols]
                                                           for i in rows], **changes)


@property_check(KEY_PERMUTATION)
def check_key_permutation(impl, inp: Call,
                          permutation: Sequence[int] | None = None) -> None:
    """Permuting keys and values together (and the mask's columns) leaves every output unchanged.

    ``permutation`` lists the new order of the keys (default: reversed).  The
    causal rule is carried along as the boolean mask it stands for.

    Raises:
        PropertyFailure: an output that changed.
    """
    n_q, n_k = sizes(inp)[:2]
    perm = _permutation(permutation, n_k)
    _, keys, values = matrices(inp)
    moved = _permuted(inp, range(n_q), perm, keys=[keys[p] for p in perm],
                      values=[values[p] for p in perm])
    _compare_outputs(f"{KEY_PERMUTATION} (keys in the order {perm})", impl, inp, impl(inp), impl(moved),
                     _in_order(n_q))


@property_check(QUERY_PERMUTATION)
def check_query_permutation(impl, inp: Call,
                            permutation: Sequence[int] | None = None) -> None:
    """Permuting the queries (and the mask's rows) permutes the outputs the same way.

    Raises:
        PropertyFailure: ``outputs'[i] != outputs[permutation[i]]``.
    """
    n_q, n_k = sizes(inp)[:2]
    perm = _permutation(permutation, n_q)
    queries = matrices(inp)[0]
    moved = _permuted(inp, perm, range(n_k), queries=[queries[p] for p in perm])
    _compare_outputs(f"{QUERY_PERMUTATION} (queries in the order {perm})",
                     impl, inp, impl(inp), impl(moved), list(enumerate(perm)))


def read_bias(bias, width: int, name: str) -> list[Fraction]:
    """A bias vector read exactly (default: all ones)."""
    if bias is None:
        return [Fraction(1)] * width
    b = [to_exact(e, name=f"{name}[{i}]") for i, e in enumerate(bias)]
    if len(b) != width:
        raise ShapeError(f"{name} must have {width} numbers (got {len(b)})")
    return b


@property_check(KEY_BIAS)
def check_key_bias_cancels(impl, inp: Call, bias: Sequence | None = None) -> None:
    """A bias on the keys cancels: ``k_j + b`` adds ``q_i . b`` to every score of row i, a constant.

    (A bias on the queries adds ``b . k_j``, which varies with j, so it does
    *not* cancel in general.)  Default bias: all ones.

    Raises:
        PropertyFailure: an output that changed.

    >>> from exactattn.properties import AttentionInput, reference
    >>> check_key_bias_cancels(reference, AttentionInput([[1, 2]], [[0, 1], [1, 0]], [[1], [3]]),
    ...                        bias=[5, -1])
    """
    n_q, _, d_k, _ = sizes(inp)
    b = read_bias(bias, d_k, "bias")
    moved = replace(inp, keys=[[a + e for a, e in zip(k, b)] for k in matrices(inp)[1]])
    _compare_outputs(f"{KEY_BIAS} (bias {[str(e) for e in b]})",
                     impl, inp, impl(inp), impl(moved), _in_order(n_q))


@property_check(VALUE_BIAS)
def check_value_bias_shifts(impl, inp: Call, bias: Sequence | None = None) -> None:
    """A bias on the values shifts every output by exactly that bias (the shares sum to 1).

    Raises:
        PropertyFailure: ``outputs'[i] != outputs[i] + bias`` for a row that sees a key.

    >>> from exactattn.properties import AttentionInput, reference
    >>> check_value_bias_shifts(reference, AttentionInput([[1]], [[1], [2]], [[0], [3]]), ["1/2"])
    """
    n_q, _, _, d_v = sizes(inp)
    b = read_bias(bias, d_v, "bias")
    moved = replace(inp, values=[[a + e for a, e in zip(v, b)] for v in matrices(inp)[2]])
    _compare_outputs(f"{VALUE_BIAS} (bias {[str(e) for e in b]})", impl, inp, impl(inp), impl(moved),
                     _in_order(n_q), shift=b)


@property_check(MASKED)
def check_masked_entries_ignored(impl, inp: Call, change: Fraction | int = 7) -> None:
    """Changing a key or value that query i cannot see leaves output i unchanged.

    For each query with a hidden key, every entry of the keys and values it
    cannot see has ``change`` added, and its output row is compared.  (For
    ``inf`` and ``nan`` there, see :func:`check_masked_nonfinite_ignored`.)

    Raises:
        PropertyFailure: an output that moved when only hidden entries changed.
    """
    delta = to_exact(change, name="change")
    base = res = None
    _, keys, values = matrices(inp)
    bad = []
    for i, seen in enumerate(visible(inp)):
        hidden = [j for j in range(len(keys)) if j not in seen]
        if not hidden or not seen:
            continue
        if base is None:
            base = impl(inp)
        moved_values = [[e + delta for e in v] if j in hidden else v for j, v in enumerate(values)]
        moved = replace(inp, values=moved_values, keys=[[e + delta for e in k] if j in hidden
                                                        else k for j, k in enumerate(keys)])
        res = impl(moved)
        scales = [max(a, b) for a, b in zip(column_scales(values), column_scales(moved_values))]
        for c, M in enumerate(scales):
            if not res.same(res.rows[i][c], base.rows[i][c], M):
                bad.append(f"outputs[{i}][{c}] moved from {value_text(base.rows[i][c])} to "
                           f"{value_text(res.rows[i][c])} when hidden keys {hidden} changed")
    if bad:
        fail(MASKED, impl.describe(res), inp, bad)


@property_check(NONFINITE)
def check_masked_nonfinite_ignored(impl, inp: Call) -> int:
    """Values of keys no query sees set to ``inf``, then ``nan``, leave every output unchanged.

    Padding often holds inf or NaN; a masked key's weight is 0 and ``0 * inf``
    is NaN, so a kernel that mixes every value with its weight fails this.
    Not run by :func:`check_all` (PyTorch's SDPA itself returns NaN here);
    the exact answer ignores such entries.

    Returns:
        the number of keys no query sees (0: nothing to check).

    Raises:
        PropertyFailure: an output that moved.

    >>> from exactattn.call.policy import Mask
    >>> from exactattn.properties import AttentionInput, reference
    >>> check_masked_nonfinite_ignored(reference, AttentionInput([[0]], [[0], [0]], [[1], [2]],
    ...                                                          Mask("bool_keep", [[True, False]])))
    1
    """
    bad, res, base = [], None, None
    seen = keep(inp)
    unseen = (~keys_read(inp.policy, seen).any(axis=0)).nonzero()[0].tolist()
    empty = empty_rows(inp.policy, seen)
    values = matrices(inp)[2]
    scales = column_scales(values)
    for fill in (() if bad or not unseen else ("inf", "nan")):
        if base is None:
            base = impl(inp)
        moved = replace(inp, values=[[fill] * len(v) if j in unseen else v
                                     for j, v in enumerate(values)])
        res = impl(moved)
        for i in range(len(empty)):
            if empty[i] and inp.policy.empty_row == "nan":
                continue
            for c, M in enumerate(scales):
                if not res.same(res.rows[i][c], base.rows[i][c], M):
                    bad.append(f"outputs[{i}][{c}] moved from {value_text(base.rows[i][c])} to "
                               f"{value_text(res.rows[i][c])} when the values of keys {unseen}, "
                               f"which no query sees, were {fill}")
        if bad:
            break
    if bad:
        fail(NONFINITE, impl.describe(res), inp, bad)
    return len(unseen)
