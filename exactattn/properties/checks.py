"""The function checks: properties of any attention function, on one input.

Each ``check_*(fn, inp)`` runs ``fn`` (wrapped in an
:class:`~exactattn.properties.Implementation`) as often as the property
needs, compares with :mod:`exactattn.properties.compare` and returns quietly
or raises :class:`~exactattn.properties.PropertyFailure`.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Sequence

from ..errors import InputError, ShapeError
from ..exact import to_exact
from .compare import (at_least, at_most, column_scales, equals, identity, is_nan, plus, same,
                      sign, total)
from .implementation import Implementation, Result, as_implementation
from .inputs import AttentionInput
from .reference import exact_outputs, exact_shares
from .report import fail, row_text, value_text

__all__ = ["check_all", "check_causal_first_output", "check_identical_queries",
           "check_key_bias_cancels", "check_key_permutation", "check_masked_entries_ignored",
           "check_matches_reference", "check_outputs_within_values", "check_query_permutation",
           "check_rows_sum_to_one", "check_share_support", "check_shift_invariance",
           "check_value_bias_shifts", "read_bias"]


def _shares(impl: Implementation, inp: AttentionInput) -> Result:
    return impl(inp.replace(values=identity(inp.n_keys)))


def check_rows_sum_to_one(fn, inp: AttentionInput) -> None:
    """Every row of shares sums to exactly 1 (a row that sees no key follows ``empty_row``).

    The shares are the outputs for values = the n_k x n_k identity.

    Raises:
        PropertyFailure: a row whose shares do not sum to 1 (or, for an empty
            row, do not follow the ``empty_row`` policy).
    """
    impl = as_implementation(fn)
    res = _shares(impl, inp)
    empty_row = impl.empty_row_for(inp)
    bad = []
    for i, row in enumerate(res.rows):
        if inp.visible_keys(i):
            t = total(res, row)
            if not equals(res, t, Fraction(1), Fraction(1)):
                bad.append(f"row {i}: shares {row_text(row)} sum to {value_text(t)}, want 1")
        elif empty_row == "nan":
            if not all(is_nan(res, x) for x in row):
                bad.append(f"row {i} sees no key: shares {row_text(row)}, want nan "
                           "(empty_row=nan)")
        else:
            want = Fraction(0) if empty_row == "zero" else Fraction(1, inp.n_keys)
            if not all(equals(res, x, want, Fraction(1)) for x in row):
                bad.append(f"row {i} sees no key: shares {row_text(row)}, want {want} each "
                           f"(empty_row={empty_row})")
    if bad:
        fail("every row of shares sums to exactly 1", impl.describe(res), inp, bad)


def check_matches_reference(fn, inp: AttentionInput) -> None:
    """The outputs equal the exact reference's (under the function's ``empty_row``).

    Exactly for an exact function; within the stated tolerance for a float one.

    Raises:
        PropertyFailure: an output that differs from the exact one.
    """
    impl = as_implementation(fn)
    res = impl(inp)
    want = exact_outputs(inp, impl.empty_row_for(inp))
    scales = column_scales(inp.values)
    bad = []
    for i, row in enumerate(res.rows):
        for c, got in enumerate(row):
            w = want[i][c]
            if w.row.nan:
                ok = is_nan(res, got)
            else:
                ok = equals(res, got, w, scales[c])
            if not ok:
                bad.append(f"outputs[{i}][{c}] = {value_text(got)}, exact {value_text(w)}")
    if bad:
        fail("the outputs equal the exact attention", impl.describe(res), inp, bad)


def check_share_support(fn, inp: AttentionInput) -> None:
    """Every share is positive where the key is visible and exactly 0 where it is masked.

    Rows that see no key are left to :func:`check_rows_sum_to_one`.  A float
    share may underflow to 0.0 where the exact share is below ``atol``
    (``exp(-800)`` is 0 in float64); anywhere else a visible share must be > 0.

    Raises:
        PropertyFailure: a visible share that is not > 0, or a masked one that is not 0.

    >>> from exactattn.call import Mask
    >>> from exactattn.properties import reference
    >>> keep = Mask("bool_keep", [[True, False]])
    >>> check_share_support(reference, AttentionInput([[1]], [[1], [1]], [[0], [0]], keep))
    >>> def ignores_mask(queries, keys, values, *, mask=None, scale=None):
    ...     return reference(queries, keys, values, scale=scale)
    >>> check_share_support(Implementation(ignores_mask, exact=True),
    ...                     AttentionInput([[1]], [[1], [1]], [[0], [0]], keep))
    Traceback (most recent call last):
    ...
    exactattn.properties.PropertyFailure: property failed: shares are positive on visible keys and exactly 0 on masked ones
      function: ignores_mask (exact)
      input: AttentionInput(queries=[[1]], keys=[[1], [1]], values=[[0], [0]], mask=Mask('bool_keep', [[True, False]]), policy=Policy())
      shares[0][1] = 1/2 for a masked key, want exactly 0
    """
    impl = as_implementation(fn)
    res = _shares(impl, inp)
    exact = None
    bad = []
    for i, row in enumerate(res.rows):
        seen = inp.visible_keys(i)
        if not seen:
            continue
        for j, x in enumerate(row):
            if j in seen:
                if res.exact:
                    ok = not is_nan(res, x) and sign(x) > 0
                else:
                    ok = math.isfinite(x) and x > 0
                    if x == 0.0:  # underflow is no fault when the exact share is below atol
                        if exact is None:
                            exact = exact_shares(inp)
                        ok = float(exact[i][j]) <= res.atol
                if not ok:
                    bad.append(f"shares[{i}][{j}] = {value_text(x)} for a visible key, want > 0")
            else:
                ok = (not is_nan(res, x) and sign(x) == 0) if res.exact else x == 0.0
                if not ok:
                    bad.append(f"shares[{i}][{j}] = {value_text(x)} for a masked key, "
                               "want exactly 0")
    if bad:
        fail("shares are positive on visible keys and exactly 0 on masked ones",
             impl.describe(res), inp, bad)


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


def check_shift_invariance(fn, inp: AttentionInput, shifts: Sequence | None = None) -> None:
    """Adding a constant to a row of scores changes nothing: softmax(s + c) = softmax(s).

    The constant ``shifts[i]`` (default ``i + 1``) is added to every raw score
    of query i by appending ``shifts[i]`` to the query and 1 to every key; the
    scale is then passed explicitly, so the widened input keeps the original
    one.  Outputs must be unchanged.

    Raises:
        PropertyFailure: an output that moved.
        ShapeError: ``shifts`` of the wrong length.
    """
    impl = as_implementation(fn)
    if shifts is None:
        shifts = [Fraction(i + 1) for i in range(inp.n_queries)]
    shifts = [to_exact(s, name=f"shifts[{i}]") for i, s in enumerate(shifts)]
    if len(shifts) != inp.n_queries:
        raise ShapeError(f"shifts must have one entry per query, {inp.n_queries} "
                         f"(got {len(shifts)})")
    wide = inp.replace(queries=[list(q) + [s] for q, s in zip(inp.queries, shifts)],
                       keys=[list(k) + [Fraction(1)] for k in inp.keys],
                       policy=inp.policy.replace(scale=inp.divisor_squared))
    _compare_outputs(f"adding a constant to a row of scores changes nothing (shifts "
                     f"{[str(s) for s in shifts]})", impl, inp, impl(inp), impl(wide),
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


def check_key_permutation(fn, inp: AttentionInput,
                          permutation: Sequence[int] | None = None) -> None:
    """Permuting keys and values together (and the mask's columns) leaves every output unchanged.

    ``permutation`` lists the new order of the keys (default: reversed).  The
    causal rule is carried along as the boolean mask it stands for.

    Raises:
        PropertyFailure: an output that changed.
    """
    impl = as_implementation(fn)
    perm = _permutation(permutation, inp.n_keys)
    flat = _positions_as_mask(inp)
    moved = flat.replace(keys=[inp.keys[p] for p in perm], values=[inp.values[p] for p in perm],
                         mask=None if flat.mask is None else
                         flat.mask.select(range(inp.n_queries), perm))
    _compare_outputs(f"permuting keys and values together leaves the outputs unchanged "
                     f"(keys in the order {perm})", impl, inp, impl(inp), impl(moved),
                     _in_order(inp.n_queries))


def check_query_permutation(fn, inp: AttentionInput,
                            permutation: Sequence[int] | None = None) -> None:
    """Permuting the queries (and the mask's rows) permutes the outputs the same way.

    Raises:
        PropertyFailure: ``outputs'[i] != outputs[permutation[i]]``.
    """
    impl = as_implementation(fn)
    perm = _permutation(permutation, inp.n_queries)
    flat = _positions_as_mask(inp)
    moved = flat.replace(queries=[inp.queries[p] for p in perm],
                         mask=None if flat.mask is None else
                         flat.mask.select(perm, range(inp.n_keys)))
    _compare_outputs(f"permuting the queries permutes the outputs (queries in the order {perm})",
                     impl, inp, impl(inp), impl(moved), list(enumerate(perm)))


def _view(inp: AttentionInput, i: int) -> tuple:
    """Query i's view of the keys: (visible, additive offset) per key."""
    seen = set(inp.visible_keys(i))
    return tuple((j in seen, Fraction(0) if inp.mask is None else inp.mask.offset(i, j))
                 for j in range(inp.n_keys))


def check_identical_queries(fn, inp: AttentionInput) -> int:
    """Two queries with the same numbers (and the same view of the keys) get the same output row.

    Returns:
        the number of pairs of identical queries compared (0: nothing to check).

    Raises:
        PropertyFailure: two identical queries with different outputs.
    """
    impl = as_implementation(fn)
    pairs = [(a, b) for a in range(inp.n_queries) for b in range(a + 1, inp.n_queries)
             if inp.queries[a] == inp.queries[b] and _view(inp, a) == _view(inp, b)]
    if not pairs:
        return 0
    res = impl(inp)
    scales = column_scales(inp.values)
    bad = []
    for a, b in pairs:
        for c in range(inp.d_v):
            if not same(res, res.rows[a][c], res.rows[b][c], scales[c]):
                bad.append(f"queries {a} and {b} are identical but outputs[{a}][{c}] = "
                           f"{value_text(res.rows[a][c])} and outputs[{b}][{c}] = "
                           f"{value_text(res.rows[b][c])}")
    if bad:
        fail("identical queries get identical rows", impl.describe(res), inp, bad)
    return len(pairs)


def read_bias(bias, width: int, name: str) -> list[Fraction]:
    """A bias vector read exactly (default: all ones)."""
    if bias is None:
        return [Fraction(1)] * width
    b = [to_exact(e, name=f"{name}[{i}]") for i, e in enumerate(bias)]
    if len(b) != width:
        raise ShapeError(f"{name} must have {width} numbers (got {len(b)})")
    return b


def check_key_bias_cancels(fn, inp: AttentionInput, bias: Sequence | None = None) -> None:
    """A bias on the keys cancels: ``k_j + b`` adds ``q_i . b`` to every score of row i, a constant.

    (A bias on the queries adds ``b . k_j``, which varies with j, so it does
    *not* cancel in general.)  Default bias: all ones.

    Raises:
        PropertyFailure: an output that changed.

    >>> from exactattn.properties import reference
    >>> check_key_bias_cancels(reference, AttentionInput([[1, 2]], [[0, 1], [1, 0]], [[1], [3]]),
    ...                        bias=[5, -1])
    """
    impl = as_implementation(fn)
    b = read_bias(bias, inp.d_k, "bias")
    moved = inp.replace(keys=[[a + e for a, e in zip(k, b)] for k in inp.keys])
    _compare_outputs(f"a bias on the keys cancels out of the shares (bias {[str(e) for e in b]})",
                     impl, inp, impl(inp), impl(moved), _in_order(inp.n_queries))


def check_value_bias_shifts(fn, inp: AttentionInput, bias: Sequence | None = None) -> None:
    """A bias on the values shifts every output by exactly that bias (the shares sum to 1).

    Raises:
        PropertyFailure: ``outputs'[i] != outputs[i] + bias`` for a row that sees a key.

    >>> from exactattn.properties import reference
    >>> check_value_bias_shifts(reference, AttentionInput([[1]], [[1], [2]], [[0], [3]]), ["1/2"])
    """
    impl = as_implementation(fn)
    b = read_bias(bias, inp.d_v, "bias")
    moved = inp.replace(values=[[a + e for a, e in zip(v, b)] for v in inp.values])
    _compare_outputs(f"a bias on the values shifts every output by that bias "
                     f"(bias {[str(e) for e in b]})", impl, inp, impl(inp), impl(moved),
                     _in_order(inp.n_queries), shift=b)


def check_outputs_within_values(fn, inp: AttentionInput) -> None:
    """Each output lies between the smallest and largest visible value in its column.

    ``min_j values[j][c] <= outputs[i][c] <= max_j values[j][c]`` over the keys
    query i sees: an output is a weighted average with positive weights adding to 1.

    Raises:
        PropertyFailure: an output outside that range.
    """
    impl = as_implementation(fn)
    res = impl(inp)
    scales = column_scales(inp.values)
    bad = []
    for i, row in enumerate(res.rows):
        seen = inp.visible_keys(i)
        if not seen:
            continue
        for c, got in enumerate(row):
            col = [inp.values[j][c] for j in seen]
            lo, hi = min(col), max(col)
            if not (at_least(res, got, lo, scales[c]) and at_most(res, got, hi, scales[c])):
                bad.append(f"outputs[{i}][{c}] = {value_text(got)} lies outside [{lo}, {hi}], "
                           f"the visible values of column {c}")
    if bad:
        fail("each output lies between the smallest and largest visible value",
             impl.describe(res), inp, bad)


def _first_sees_first(inp: AttentionInput) -> bool:
    return inp.policy.causal and inp.visible_keys(0) == [0]


def check_causal_first_output(fn, inp: AttentionInput) -> None:
    """With the causal rule the first query sees only the first key, so its output is exactly ``values[0]``.

    Raises:
        InputError: the input is not causal with query 0 seeing key 0 alone
            (``top_left``, or ``bottom_right`` with as many keys as queries).
        PropertyFailure: ``outputs[0] != values[0]``.

    >>> from exactattn.call import Policy
    >>> from exactattn.properties import attend_as_function, reference
    >>> check_causal_first_output(attend_as_function,
    ...     AttentionInput([[1], [2]], [[3], [4]], [[5], [6]], policy=Policy(causal=True)))
    >>> check_causal_first_output(reference, AttentionInput([[1]], [[1]], [[1]]))
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: inp must be causal with query 0 seeing key 0 alone for this check (top_left, or bottom_right with as many keys as queries) (got causal=off, query 0 sees keys [0])
    """
    impl = as_implementation(fn)
    if not _first_sees_first(inp):
        raise InputError(
            f"inp must be causal with query 0 seeing key 0 alone for this check (top_left, or "
            f"bottom_right with as many keys as queries) (got causal="
            f"{'on' if inp.policy.causal else 'off'}, query 0 sees keys {inp.visible_keys(0)})")
    res = impl(inp)
    scales = column_scales(inp.values)
    bad = []
    for c in range(inp.d_v):
        got, want = res.rows[0][c], inp.values[0][c]
        if not equals(res, got, want, scales[c]):
            bad.append(f"outputs[0][{c}] = {value_text(got)}, want values[0][{c}] = {want}")
    if bad:
        fail("with a causal mask the first output is its own value", impl.describe(res), inp, bad)


def check_masked_entries_ignored(fn, inp: AttentionInput, change: Fraction | int = 7) -> None:
    """Changing a key or value that query i cannot see leaves output i unchanged.

    For each query with a hidden key, every entry of the keys and values it
    cannot see has ``change`` added, and its output row is compared.

    Raises:
        PropertyFailure: an output that moved when only hidden entries changed.
    """
    impl = as_implementation(fn)
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
        fail("keys and values at masked positions do not reach the outputs", impl.describe(res),
             inp, bad)


_FUNCTION_CHECKS = (
    ("matches reference", check_matches_reference),
    ("rows sum to one", check_rows_sum_to_one),
    ("share support", check_share_support),
    ("shift invariance", check_shift_invariance),
    ("key permutation", check_key_permutation),
    ("query permutation", check_query_permutation),
    ("identical queries", check_identical_queries),
    ("key bias cancels", check_key_bias_cancels),
    ("value bias shifts", check_value_bias_shifts),
    ("outputs within values", check_outputs_within_values),
    ("masked entries ignored", check_masked_entries_ignored),
)


def check_all(fn, inp: AttentionInput) -> list[str]:
    """Run every function check that applies to ``inp``; return the names of those run.

    The permutation checks are skipped under the causal rule (it is about
    positions); the causal-first-output check runs when the input is causal
    and query 0 sees key 0 alone.

    Raises:
        PropertyFailure: the first property that fails, with its report.
    """
    impl = as_implementation(fn)
    ran = []
    for name, check in _FUNCTION_CHECKS:
        if inp.policy.causal and name.endswith("permutation"):
            continue
        check(impl, inp)
        ran.append(name)
    if _first_sees_first(inp):
        check_causal_first_output(impl, inp)
        ran.append("causal first output")
    return ran
