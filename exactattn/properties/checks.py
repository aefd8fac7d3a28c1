"""The function checks of one run: properties of any attention function's outputs on one input.

Each ``check_*(fn, inp)`` runs ``fn`` (wrapped in an
:class:`~exactattn.properties.Implementation`) on the one-head
:class:`~exactattn.call.Call` ``inp``, compares its :class:`Result` with
:class:`~exactattn.verify.Reference`'s exact values and returns quietly or raises
:class:`~exactattn.properties.PropertyFailure`.  A function that raises fails
the property too, its exception named in one line (and chained, so
Hypothesis shrinks the input as for any failure).  The checks that compare
two runs are in :mod:`~exactattn.properties.invariance`; :func:`check_all`
runs both kinds, those that hold under the input's policy
(:data:`exactattn.properties.rules.PROPERTIES`).
"""

from __future__ import annotations

import math
from fractions import Fraction

from ..call.inputs import Call
from ..errors import InputError
from ..reference.reference import Reference
from .implementation import (Implementation, Result, as_implementation, column_scales,
                             property_check, sign)
from .inputs import dropout_keep, matrices, replace, sizes, visible
from .invariance import (check_key_bias_cancels, check_key_permutation,
                         check_masked_entries_ignored, check_query_permutation,
                         check_shift_invariance, check_value_bias_shifts)
from .report import fail, row_text, value_text
from .rules import PROPERTIES, active, holds


# what each check's failure says: the property's one statement (rules.PROPERTIES)
SUMS = PROPERTIES["rows sum to one"].statement
BELOW = PROPERTIES["rows sum below one"].statement
MATCHES = PROPERTIES["matches reference"].statement
SUPPORT = PROPERTIES["share support"].statement
IDENTICAL = PROPERTIES["identical queries"].statement
WITHIN = PROPERTIES["outputs within values"].statement
CAUSAL_FIRST = PROPERTIES["causal first output"].statement


def _shares(impl: Implementation, inp: Call) -> Result:
    """The function's shares: its outputs for values = the n_k x n_k identity."""
    n_k = sizes(inp)[1]
    return impl(replace(inp, values=[[Fraction(int(i == j)) for j in range(n_k)]
                                     for i in range(n_k)]))


def _exact(inp: Call, empty_row: str | None = None) -> Reference:
    """The exact reference of ``inp`` (``empty_row`` default: the policy's)."""
    policy = inp.policy if empty_row is None else inp.policy.replace(empty_row=empty_row)
    return Reference(inp.with_policy(policy))


@property_check(SUMS)
def check_rows_sum_to_one(impl, inp: Call) -> None:
    """Every row of shares sums to exactly 1 (a row that sees no key follows ``empty_row``).

    The shares are the outputs for values = the n_k x n_k identity.

    Raises:
        PropertyFailure: a row whose shares do not sum to 1 (or, for an empty
            row, do not follow the ``empty_row`` policy).
    """
    res = _shares(impl, inp)
    empty_row = impl.empty_row_for(inp)
    seen = visible(inp)
    bad = []
    for i, row in enumerate(res.rows):
        if seen[i]:
            t = res.total(row)
            if not res.equals(t, Fraction(1), Fraction(1)):
                bad.append(f"row {i}: shares {row_text(row)} sum to {value_text(t)}, want 1")
        elif empty_row == "nan":
            if not all(res.is_nan(x) for x in row):
                bad.append(f"row {i} sees no key: shares {row_text(row)}, want nan "
                           "(empty_row=nan)")
        else:
            want = inp.policy.replace(empty_row=empty_row).empty_share(sizes(inp)[1])
            if not all(res.equals(x, want, Fraction(1)) for x in row):
                bad.append(f"row {i} sees no key: shares {row_text(row)}, want {want} each "
                           f"(empty_row={empty_row})")
    if bad:
        fail(SUMS, impl.describe(res), inp, bad)


@property_check(BELOW)
def check_rows_sum_below_one(impl, inp: Call) -> None:
    """With a sink, every row of shares sums to exactly ``1 - sink share``, less than 1.

    The sink joins the normaliser and carries no value, so the keys' shares
    add up to what it leaves (a row that sees no key: 0).

    Raises:
        InputError: an input without a sink.
        PropertyFailure: a row whose shares sum to anything else (or to 1 or more).

    >>> from exactattn.call.policy import Policy
    >>> from exactattn.properties import AttentionInput, reference
    >>> check_rows_sum_below_one(reference, AttentionInput([[1]], [[1], [0]], [[3], [1]],
    ...                                                    policy=Policy(scale=1, sink=0)))
    """
    if inp.policy.sink is None:
        raise InputError("inp must have a sink (policy.sink) for this check (got none)")
    res = _shares(impl, inp)
    exact = _exact(inp, impl.empty_row_for(inp)).dropped_shares()
    bad = []
    for i, row in enumerate(res.rows):
        want = sum(exact[i], Fraction(0))
        t = res.total(row)
        if not res.equals(t, want, Fraction(1)) or not res.at_most(t, Fraction(1), Fraction(0)) \
                or (res.exact and t == 1):
            bad.append(f"row {i}: shares {row_text(row)} sum to {value_text(t)}, want "
                       f"{value_text(want)} (1 minus the sink's share)")
    if bad:
        fail(BELOW, impl.describe(res), inp, bad)


@property_check(MATCHES)
def check_matches_reference(impl, inp: Call) -> None:
    """The outputs equal the exact reference's (under the function's ``empty_row``).

    Exactly for an exact function; within the stated tolerance for a float one.

    Raises:
        PropertyFailure: an output that differs from the exact one.
    """
    res = impl(inp)
    want = _exact(inp, impl.empty_row_for(inp)).outputs()
    scales = column_scales(matrices(inp)[2])
    bad = []
    for i, row in enumerate(res.rows):
        for c, got in enumerate(row):
            w = want[i][c]
            if w.row.nan:
                ok = res.is_nan(got)
            else:
                ok = res.equals(got, w, scales[c])
            if not ok:
                bad.append(f"outputs[{i}][{c}] = {value_text(got)}, exact {value_text(w)}")
    if bad:
        fail(MATCHES, impl.describe(res), inp, bad)


@property_check(SUPPORT)
def check_share_support(impl, inp: Call) -> None:
    """Every share is positive where the key is visible and exactly 0 where it is masked.

    Rows that see no key are left to :func:`check_rows_sum_to_one`.  A float
    share may underflow to 0.0 where the exact share is below ``atol``
    (``exp(-800)`` is 0 in float64); anywhere else a visible share must be > 0.

    Raises:
        PropertyFailure: a visible share that is not > 0, or a masked one that is not 0.

    >>> from exactattn.call.policy import Mask
    >>> from exactattn.properties import AttentionInput, reference
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
    res = _shares(impl, inp)
    exact = None
    keep, visible_keys = dropout_keep(inp), visible(inp)
    bad = []
    for i, row in enumerate(res.rows):
        seen = visible_keys[i]
        if keep is not None:       # a dropped key counts as hidden here
            seen = [j for j in seen if keep[i][j]]
        if not seen:
            continue
        for j, x in enumerate(row):
            if j in seen:
                if res.exact:
                    ok = not res.is_nan(x) and sign(x) > 0
                else:
                    ok = math.isfinite(x) and x > 0
                    if x == 0.0:  # underflow is no fault when the exact share is below atol
                        if exact is None:
                            exact = _exact(inp).dropped_shares()
                        ok = float(exact[i][j]) <= res.tolerance.atol
                if not ok:
                    bad.append(f"shares[{i}][{j}] = {value_text(x)} for a visible key, want > 0")
            else:
                ok = (not res.is_nan(x) and sign(x) == 0) if res.exact else x == 0.0
                if not ok:
                    bad.append(f"shares[{i}][{j}] = {value_text(x)} for a masked key, "
                               "want exactly 0")
    if bad:
        fail(SUPPORT, impl.describe(res), inp, bad)


def _views(inp: Call) -> list[tuple]:
    """Each query's view of the keys: (visible, additive offset, kept) per key."""
    mask, keep = inp.block_mask(0, 0), dropout_keep(inp)
    return [tuple((j in seen, Fraction(0) if mask is None else mask.offset(i, j),
                   keep is None or keep[i][j]) for j in range(sizes(inp)[1]))
            for i, seen in enumerate(map(set, visible(inp)))]


@property_check(IDENTICAL)
def check_identical_queries(impl, inp: Call) -> int:
    """Two queries with the same numbers (and the same view of the keys) get the same output row.

    Returns:
        the number of pairs of identical queries compared (0: nothing to check).

    Raises:
        PropertyFailure: two identical queries with different outputs.
    """
    queries, _, values = matrices(inp)
    n, views = len(queries), _views(inp)
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)
             if queries[a] == queries[b] and views[a] == views[b]]
    if not pairs:
        return 0
    res = impl(inp)
    scales = column_scales(values)
    bad = []
    for a, b in pairs:
        for c in range(len(values[0])):
            if not res.same(res.rows[a][c], res.rows[b][c], scales[c]):
                bad.append(f"queries {a} and {b} are identical but outputs[{a}][{c}] = "
                           f"{value_text(res.rows[a][c])} and outputs[{b}][{c}] = "
                           f"{value_text(res.rows[b][c])}")
    if bad:
        fail(IDENTICAL, impl.describe(res), inp, bad)
    return len(pairs)


@property_check(WITHIN)
def check_outputs_within_values(impl, inp: Call) -> None:
    """Each output lies between the smallest and largest visible value in its column.

    ``min_j values[j][c] <= outputs[i][c] <= max_j values[j][c]`` over the keys
    query i sees: an output is a weighted average with positive weights adding to 1.

    Raises:
        PropertyFailure: an output outside that range.
    """
    res = impl(inp)
    values = matrices(inp)[2]
    scales = column_scales(values)
    bad = []
    for i, (row, seen) in enumerate(zip(res.rows, visible(inp))):
        if not seen:
            continue
        for c, got in enumerate(row):
            col = [values[j][c] for j in seen]
            lo, hi = min(col), max(col)
            if not (res.at_least(got, lo, scales[c]) and res.at_most(got, hi, scales[c])):
                bad.append(f"outputs[{i}][{c}] = {value_text(got)} lies outside [{lo}, {hi}], "
                           f"the visible values of column {c}")
    if bad:
        fail(WITHIN, impl.describe(res), inp, bad)


def _first_sees_first(inp: Call) -> bool:
    return inp.policy.causal and visible(inp)[0] == [0]


@property_check(CAUSAL_FIRST)
def check_causal_first_output(impl, inp: Call) -> None:
    """With the causal rule the first query sees only the first key, so its output is exactly ``values[0]``.

    Raises:
        InputError: the input is not causal with query 0 seeing key 0 alone
            (``top_left``, or ``bottom_right`` with as many keys as queries).
        PropertyFailure: ``outputs[0] != values[0]``.

    >>> from exactattn.call.policy import Policy
    >>> from exactattn.properties import AttentionInput, attend_as_function, reference
    >>> check_causal_first_output(attend_as_function,
    ...     AttentionInput([[1], [2]], [[3], [4]], [[5], [6]], policy=Policy(causal=True)))
    >>> check_causal_first_output(reference, AttentionInput([[1]], [[1]], [[1]]))
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: inp must be causal with query 0 seeing key 0 alone for this check (top_left, or bottom_right with as many keys as queries) (got causal=off, query 0 sees keys [0])
    """
    if not _first_sees_first(inp):
        raise InputError(
            f"inp must be causal with query 0 seeing key 0 alone for this check (top_left, or "
            f"bottom_right with as many keys as queries) (got causal="
            f"{'on' if inp.policy.causal else 'off'}, query 0 sees keys {visible(inp)[0]})")
    res = impl(inp)
    values = matrices(inp)[2]
    scales = column_scales(values)
    bad = []
    for c, want in enumerate(values[0]):
        got = res.rows[0][c]
        if not res.equals(got, want, scales[c]):
            bad.append(f"outputs[0][{c}] = {value_text(got)}, want values[0][{c}] = {want}")
    if bad:
        fail(CAUSAL_FIRST, impl.describe(res), inp, bad)


_FUNCTION_CHECKS = (
    ("matches reference", check_matches_reference),
    ("rows sum to one", check_rows_sum_to_one),
    ("rows sum below one", check_rows_sum_below_one),
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


def check_all(fn, inp: Call) -> list[str]:
    """Run every function check that holds under ``inp``'s policy; return the names of those run.

    Which property holds under which modifier is the one table
    :data:`exactattn.properties.rules.PROPERTIES` (e.g. a soft-capped head is
    not shift-invariant; with a sink the rows sum to less than 1, checked
    instead of summing to 1; the permutation checks skip the causal rule,
    windows, ALiBi and RoPE); the causal-first-output check runs when the
    input is causal and query 0 sees key 0 alone.

    Raises:
        PropertyFailure: the first property that fails, with its report.

    >>> from exactattn.call.policy import Policy
    >>> from exactattn.properties import AttentionInput, reference
    >>> capped = AttentionInput([[1], [2]], [[1], [0]], [[3], [1]], policy=Policy(softcap="1"))
    >>> "shift invariance" in check_all(reference, capped)
    False
    """
    impl = as_implementation(fn)
    on = active(inp.policy)
    ran = []
    for name, check in _FUNCTION_CHECKS:
        if not holds(name, on):
            continue
        check(impl, inp)
        ran.append(name)
    if _first_sees_first(inp) and holds("causal first output", on):
        check_causal_first_output(impl, inp)
        ran.append("causal first output")
    return ran
