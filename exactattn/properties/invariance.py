"""The invariance checks: a change to the input that must leave the outputs alone, or move them exactly.

Each ``check_*(fn, inp, ...)`` runs ``fn`` on ``inp`` and on a changed copy
(scores shifted, keys or queries permuted, a bias added, hidden entries
changed) and compares the two runs row by row with
:mod:`exactattn.properties.compare`: exactly for an exact function, within
twice the tolerance for a float one.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from ..errors import InputError, ShapeError
from ..numbers.exact import to_exact
from ..call.inputs import empty_rows, keys_read
from .compare import column_scales, plus, same
from .implementation import Result, property_check
from .inputs import AttentionInput
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
    scales = column_scales(inp.values)
    for i, src in rows_map:
        if not inp.visible_keys(src):
            continue
        for c in range(inp.d_v):
            M = scales[c]
            want, got = base.rows[src][c], other.rows[i][c]
            if shift is not None:
                want = plus(base, want, shift[c])
                M = M + abs(shift[c])
            if not same(other, got, want, M):
                bad.append(f"outputs[{i}][{c}] = {value_text(got)}, want {value_text(want)}")
    if bad:
        fail(prop, impl.describe(other), inp, bad)


def _in_order(n: int) -> list[tuple[int, int]]:
    return [(i, i) for i in range(n)]


@property_check(SHIFT)
def check_shift_invariance(impl, inp: AttentionInput, shifts: Sequence | None = None) -> None:
    """Adding a constant to a row of scores changes nothing: softmax(s + c) = softmax(s).

    The constant ``shifts[i]`` (default ``i + 1``) is added to every raw score
    of query i by appending ``shifts[i]`` to the query and 1 to every key; the
    scale is then passed explicitly, so the widened input keeps the original
    one.  Outputs must be unchanged.

    Raises:
        PropertyFailure: an output that moved.
        ShapeError: ``shifts`` of the wrong length.
    """
    if shifts is None:
        shifts = [Fraction(i + 1) for i in range(inp.n_queries)]
    shifts = [to_exact(s, name=f"shifts[{i}]") for i, s in enumerate(shifts)]
    if len(shifts) != inp.n_queries:
        raise ShapeError(f"shifts must have one entry per query, {inp.n_queries} "
                         f"(got {len(shifts)})")
    wide = inp.replace(queries=[list(q) + [s] for q, s in zip(inp.queries, shifts)],
                       keys=[list(k) + [Fraction(1)] for k in inp.keys],
                       policy=inp.policy.replace(divisor_squared=inp.divisor_squared))
    _compare_outputs(f"{SHIFT} (shifts {[str(s) for s in shifts]})", impl, inp, impl(inp), impl(wide),
                     _in_order(inp.n_queries))


def _permutation(permutation, n: int) -> list[int]:
    if permutation is None:
        return list(reversed(range(n)))
    perm = list(permutation)
    if sorted(perm) != list(range(n)):
        raise InputError(f"permutation must be a permutation of 0..{n - 1} (got {permutation!r})")
    return perm


def _positions_as_mask(inp: AttentionInput) -> AttentionInput:
    """``inp`` with the causal rule carried by the mask it stands for (to be permuted)."""
    if not inp.policy.causal:
        return inp
    return inp.replace(mask=inp.effective_mask(), policy=inp.policy.replace(causal=False))


@property_check(KEY_PERMUTATION)
def check_key_permutation(impl, inp: AttentionInput,
                          permutation: Sequence[int] | None = None) -> None:
    """Permuting keys and values together (and the mask's columns) leaves every output unchanged.

    ``permutation`` lists the new order of the keys (default: reversed).  The
    causal rule is carried along as the boolean mask it stands for.

    Raises:
        PropertyFailure: an output that changed.
    """
    perm = _permutation(permutation, inp.n_keys)
    flat = _positions_as_mask(inp)
    moved = flat.replace(keys=[inp.keys[p] for p in perm], values=[inp.values[p] for p in perm],
                         mask=None if flat.mask is None else
                         flat.mask.select(range(inp.n_queries), perm),
                         dropout_keep=None if inp.dropout_keep is None else
                         [[r[p] for p in perm] for r in inp.dropout_keep])
    _compare_outputs(f"{KEY_PERMUTATION} (keys in the order {perm})", impl, inp, impl(inp), impl(moved),
                     _in_order(inp.n_queries))


@property_check(QUERY_PERMUTATION)
def check_query_permutation(impl, inp: AttentionInput,
                            permutation: Sequence[int] | None = None) -> None:
    """Permuting the queries (and the mask's rows) permutes the outputs the same way.

    Raises:
        PropertyFailure: ``outputs'[i] != outputs[permutation[i]]``.
    """
    perm = _permutation(permutation, inp.n_queries)
    flat = _positions_as_mask(inp)
    moved = flat.replace(queries=[inp.queries[p] for p in perm],
                         mask=None if flat.mask is None else
                         flat.mask.select(perm, range(inp.n_keys)),
                         dropout_keep=None if inp.dropout_keep is None else
                         [inp.dropout_keep[p] for p in perm])
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
def check_key_bias_cancels(impl, inp: AttentionInput, bias: Sequence | None = None) -> None:
    """A bias on the keys cancels: ``k_j + b`` adds ``q_i . b`` to every score of row i, a constant.

    (A bias on the queries adds ``b . k_j``, which varies with j, so it does
    *not* cancel in general.)  Default bias: all ones.

    Raises:
        PropertyFailure: an output that changed.

    >>> from exactattn.properties import reference
    >>> check_key_bias_cancels(reference, AttentionInput([[1, 2]], [[0, 1], [1, 0]], [[1], [3]]),
    ...                        bias=[5, -1])
    """
    b = read_bias(bias, inp.d_k, "bias")
    moved = inp.replace(keys=[[a + e for a, e in zip(k, b)] for k in inp.keys])
    _compare_outputs(f"{KEY_BIAS} (bias {[str(e) for e in b]})",
                     impl, inp, impl(inp), impl(moved), _in_order(inp.n_queries))


@property_check(VALUE_BIAS)
def check_value_bias_shifts(impl, inp: AttentionInput, bias: Sequence | None = None) -> None:
    """A bias on the values shifts every output by exactly that bias (the shares sum to 1).

    Raises:
        PropertyFailure: ``outputs'[i] != outputs[i] + bias`` for a row that sees a key.

    >>> from exactattn.properties import reference
    >>> check_value_bias_shifts(reference, AttentionInput([[1]], [[1], [2]], [[0], [3]]), ["1/2"])
    """
    b = read_bias(bias, inp.d_v, "bias")
    moved = inp.replace(values=[[a + e for a, e in zip(v, b)] for v in inp.values])
    _compare_outputs(f"{VALUE_BIAS} (bias {[str(e) for e in b]})", impl, inp, impl(inp), impl(moved),
                     _in_order(inp.n_queries), shift=b)


@property_check(MASKED)
def check_masked_entries_ignored(impl, inp: AttentionInput, change: Fraction | int = 7) -> None:
    """Changing a key or value that query i cannot see leaves output i unchanged.

    For each query with a hidden key, every entry of the keys and values it
    cannot see has ``change`` added, and its output row is compared.  (For
    ``inf`` and ``nan`` there, see :func:`check_masked_nonfinite_ignored`.)

    Raises:
        PropertyFailure: an output that moved when only hidden entries changed.
    """
    delta = to_exact(change, name="change")
    base = res = None
    bad = []
    for i in range(inp.n_queries):
        seen = inp.visible_keys(i)
        hidden = [j for j in range(inp.n_keys) if j not in seen]
        if not hidden or not seen:
            continue
        if base is None:
            base = impl(inp)
        moved = inp.replace(
            keys=[[e + delta for e in k] if j in hidden else k for j, k in enumerate(inp.keys)],
            values=[[e + delta for e in v] if j in hidden else v
                    for j, v in enumerate(inp.values)])
        res = impl(moved)
        scales = [max(a, b) for a, b in zip(column_scales(inp.values),
                                            column_scales(moved.values))]
        for c in range(inp.d_v):
            if not same(res, res.rows[i][c], base.rows[i][c], scales[c]):
                bad.append(f"outputs[{i}][{c}] moved from {value_text(base.rows[i][c])} to "
                           f"{value_text(res.rows[i][c])} when hidden keys {hidden} changed")
    if bad:
        fail(MASKED, impl.describe(res), inp, bad)


@property_check(NONFINITE)
def check_masked_nonfinite_ignored(impl, inp: AttentionInput) -> int:
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
    >>> from exactattn.properties import reference
    >>> check_masked_nonfinite_ignored(reference, AttentionInput([[0]], [[0], [0]], [[1], [2]],
    ...                                                          Mask("bool_keep", [[True, False]])))
    1
    """
    bad, res, base = [], None, None
    unseen = (~keys_read(inp.policy, inp.keep).any(axis=0)).nonzero()[0].tolist()
    empty = empty_rows(inp.policy, inp.keep)
    for fill in (() if bad or not unseen else ("inf", "nan")):
        if base is None:
            base = impl(inp)
        moved = inp.replace(values=[[fill] * inp.d_v if j in unseen else v
                                    for j, v in enumerate(inp.values)])
        res = impl(moved)
        scales = column_scales(inp.values)
        for i in range(inp.n_queries):
            if empty[i] and inp.policy.empty_row == "nan":
                continue
            for c in range(inp.d_v):
                if not same(res, res.rows[i][c], base.rows[i][c], scales[c]):
                    bad.append(f"outputs[{i}][{c}] moved from {value_text(base.rows[i][c])} to "
                               f"{value_text(res.rows[i][c])} when the values of keys {unseen}, "
                               f"which no query sees, were {fill}")
        if bad:
            break
    if bad:
        fail(NONFINITE, impl.describe(res), inp, bad)
    return len(unseen)
