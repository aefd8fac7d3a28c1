"""The property checks: of any attention function's outputs, on one input or two, and of exactattn.

Each ``check_*(fn, inp)`` runs ``fn`` (wrapped in an :class:`Implementation`)
on the one-head :class:`~exactattn.call.Call` ``inp`` (and, for the invariance
checks, on a changed copy: scores shifted, keys or queries permuted, a bias
added, hidden entries changed), compares its :class:`Result` with
:class:`~exactattn.verify.Reference`'s exact values or with the other run, and
returns quietly or raises :class:`~exactattn.properties.PropertyFailure`.  A
function that raises fails the property too, its exception named in one line
(and chained, so Hypothesis shrinks the input as for any failure).
:func:`check_all` runs those that hold under the input's policy
(:data:`exactattn.properties.rules.PROPERTIES`).

How the function is called: ``fn(queries, keys, values, *, mask=None,
scale=None) -> outputs``.  A float function is called by
:class:`~exactattn.verify.adapter.FunctionImpl` in its ``mask`` convention on
the :class:`~exactattn.verify.adapter.FloatCall` of the input
(:func:`~exactattn.verify.adapter.make_call`): numpy arrays of the dtype, the
mask (the explicit one with the causal rule folded in) in the form asked for,
the policy's scale (None for the default 1/sqrt(d_k)).  Its answer keeps the
dtype it came back in, which sets the tolerance
(:func:`~exactattn.verify.compare.tolerance_for`).  An exact function
(``exact=True``) gets lists of ``Fraction``, the scale as a ``Fraction`` or a
sympy ``1/sqrt(D)``, the :class:`~exactattn.call.policy.Mask` itself, and
returns ``Fraction`` or :class:`~exactattn.numbers.softmax.ExpRatio` entries.
A :class:`Result` compares itself: exactly for exact entries (decided by
Lindemann-Weierstrass), by :mod:`exactattn.verify.compare`'s rtol/atol mode
for floats.
"""

from __future__ import annotations

import functools
import inspect
import math
from fractions import Fraction
from typing import Callable, Sequence

import flint  # noqa: F401  (loaded with the checks, not inside the first example Hypothesis times)

from ..call.inputs import Call, empty_rows, keys_read
from ..call.policy import DEFAULT_SCALE, EMPTY_ROWS, MASK_KINDS, POSITION_FIELDS
from ..engines.head import attend
from ..errors import InputError, ShapeError
from ..numbers.exact import fraction_of, rational_sqrt, to_exact
from ..numbers.softmax import ExpRatio
from ..options import check_choice
from ..reference.online import all_splits, online_softmax
from ..reference.reference import Reference
from ..verify import compare
from ..verify.adapter import NUMPY_DTYPES, FunctionImpl, ImplRaised, ask, make_call
from ..verify.compare import TOLERANCES, Tolerance, check_tolerance, tolerance_for
from .inputs import (Check, PropertyFailure, attend_as_function, dropout_keep, effective_mask,
                     failure, input_text, keep, matrices, matrix_text, reference, replace,
                     row_text, selector_head, sizes, value_text, visible)
from .gradients import check_gradients
from .rules import OPT_IN, PROPERTIES, active, holds


MASK_FORMS = (*MASK_KINDS, "mask")


def exact_entry(value, where: str) -> Fraction | ExpRatio:
    """An exact function's output entry, checked: an ``ExpRatio`` or a rational as ``Fraction``."""
    if isinstance(value, ExpRatio):
        return value
    if isinstance(value, (int, Fraction)) and not isinstance(value, bool):
        return Fraction(value)
    if type(value).__module__.startswith("sympy") and getattr(value, "is_Rational", False):
        return fraction_of(value)
    raise InputError(f"{where} must be a Fraction or an ExpRatio from an exact function "
                     f"(got {value!r})")


class Result:
    """One call's outputs (n_q x d_v): exact entries, or floats with the :class:`Tolerance` they
    get; and how entries of it compare (``M``: the column's magnitude)."""

    __slots__ = ("rows", "exact", "tolerance")

    def __init__(self, rows, exact: bool, tolerance: Tolerance | None = None):
        self.rows, self.exact, self.tolerance = rows, exact, tolerance

    def is_nan(self, x) -> bool:
        return isinstance(x, ExpRatio) and x.row.nan if self.exact else math.isnan(x)

    def same(self, a, b, M) -> bool:
        """Two results of the function agree: exactly, or within twice the tolerance."""
        return not self.is_nan(a) and not self.is_nan(b) and a == b if self.exact else \
            math.isfinite(a) and math.isfinite(b) and abs(a - b) <= 2 * self.tolerance.bound(M)

    def equals(self, got, want, M) -> bool:
        """A result equals an exact value (``Fraction`` or ``ExpRatio``)."""
        return not self.is_nan(got) and got == want if self.exact else \
            compare.within(got, want, M, self.tolerance)

    def between(self, got, lo, hi, M) -> bool:
        """``lo <= got <= hi`` (``lo`` None: no lower bound), exactly or within the tolerance."""
        if self.exact:
            return not self.is_nan(got) and (lo is None or got >= lo) and got <= hi
        b = self.tolerance.bound(M)
        return math.isfinite(got) and (lo is None or got >= float(lo) - b) and got <= float(hi) + b

    def total(self, xs):
        """The sum of results: exactly (one softmax normaliser), or ``math.fsum``."""
        return sum(xs, Fraction(0)) if self.exact else math.fsum(xs)


def column_scales(values) -> list[Fraction]:
    """``M`` of every column: its largest finite ``|value|`` (an ``inf``/``nan`` a mask hides is skipped)."""
    return [max((abs(e) for e in column if not isinstance(e, float)), default=Fraction(0))
            for column in zip(*values)]


class Implementation:
    """An attention function under test, with how to call it and how to compare its results.

    ``fn(queries, keys, values, *, mask=None, scale=None) -> outputs`` (see
    :mod:`exactattn.properties`).

    Args:
        exact: True for a function over ``Fraction`` that returns exact
            entries (compared exactly); False (default) for a float function.
        dtype: the numpy dtype the inputs are cast to (``float64``,
            ``float32``, ``float16``) for a float function.
        convert: applied to every array argument (e.g. ``torch.from_numpy``).
        mask_as: how the mask is passed: ``bool_keep`` (default for float
            functions), ``bool_drop``, ``additive`` or ``mask`` (the
            :class:`~exactattn.call.policy.Mask` itself; default for exact functions).
        empty_row: what the function gives a query that sees no key
            (``zero``, ``uniform``, ``nan``); None (default): the input
            policy's ``empty_row``.
        rtol, atol: the float tolerance; default from the returned dtype
            (:data:`TOLERANCES`).
        name: how reports name the function (default: its ``__name__``).

    Raises:
        InputError: any argument outside the above.

    >>> Implementation(reference, exact=True).describe()
    'reference (exact)'
    >>> Implementation(len, dtype="float8")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: dtype must be one of float64, float32, float16 (got 'float8')
    """

    def __init__(self, fn: Callable, *, exact: bool = False, dtype: str = "float64",
                 convert: Callable | None = None, mask_as: str | None = None,
                 empty_row: str | None = None, rtol: float | None = None,
                 atol: float | None = None, name: str | None = None):
        if not isinstance(exact, bool):
            raise InputError(f"exact must be True or False (got {exact!r})")
        check_choice(dtype, "dtype", tuple(NUMPY_DTYPES))
        mask_as = check_choice(mask_as if mask_as is not None else
                               ("mask" if exact else "bool_keep"), "mask_as", MASK_FORMS)
        if empty_row is not None:
            check_choice(empty_row, "empty_row", EMPTY_ROWS)
        if name is not None and not isinstance(name, str):
            raise InputError(f"name must be a string (got {name!r})")
        if exact and convert is not None:
            raise InputError(f"convert must be None for an exact function (got {convert!r}); "
                             "exact functions get lists of Fraction")
        self.fn, self.exact, self.dtype = fn, exact, dtype
        self.mask_as, self.empty_row = mask_as, empty_row
        self.rtol, self.atol = check_tolerance("rtol", rtol), check_tolerance("atol", atol)
        self.name = name or getattr(fn, "__name__", None) or repr(fn)
        self.function = FunctionImpl(    # refuses a fn that is not callable (an exact one: read
            # for the arguments it takes)
            fn, convention="mask", mask_as="bool_keep" if mask_as == "mask" else mask_as,
            convert=convert, name=self.name)

    def describe(self, result: Result | None = None) -> str:
        """The function and its tolerance, as a report names them."""
        if self.exact:
            return f"{self.name} (exact)"
        tol = "tolerance from the returned dtype" if result is None else \
            result.tolerance.describe()
        return f"{self.name} (float; {tol}; |got - exact| <= atol + rtol*M)"

    @staticmethod
    def exact_scale(inp):
        """An exact function's ``scale``: None (default), else a ``Fraction`` or a sympy ``1/sqrt(D)``."""
        import sympy
        D = inp.policy.divisor_squared
        if D in (DEFAULT_SCALE, None):
            return None if D == DEFAULT_SCALE else Fraction(1)
        root = rational_sqrt(D)
        return 1 / (root if root is not None else sympy.sqrt(sympy.Rational(D.numerator,
                                                                             D.denominator)))

    def __call__(self, inp) -> Result:
        """FloatCall the function on ``inp`` and read its outputs (n_q x d_v).

        Raises:
            ImplRaised: the function raised.
            PropertyFailure: outputs of the wrong shape.
        """
        n_q, _, _, d_v = sizes(inp)
        if self.exact:
            rows = self._exact(inp)
            res, wrong = Result(rows, True), len(rows) != n_q or any(len(r) != d_v for r in rows)
            got = f"{len(rows)} x {[len(r) for r in rows]}"
        else:
            answer = self.function.answer(make_call(inp, self.dtype))
            res = Result(answer.values.tolist(), False,
                         tolerance_for(answer.dtype, self.dtype, self.rtol, self.atol))
            wrong, got = answer.values.shape != (n_q, d_v), f"shape {tuple(answer.values.shape)}"
        if wrong:
            raise failure("output shape", f"outputs must be {n_q} x {d_v} (got {got})",
                          self.name, inp, [])
        return res

    def _exact(self, inp) -> list:
        mask = effective_mask(inp)
        if mask is not None and self.mask_as != "mask":
            mask = mask.as_form(self.mask_as)
        extra = {}
        if inp.policy.modified or any(getattr(inp.policy, f) is not None for f in POSITION_FIELDS):
            extra["policy"] = inp.policy      # modifiers reach an exact function as the policy
            if inp.dropout_keep is not None:
                extra["dropout_keep"] = dropout_keep(inp)
            if not (self.function.var_kw or "policy" in self.function.accepts):
                raise InputError(f"{self.name} must take policy= for an input with modifiers "
                                 f"(got a function without it; policy: {inp.policy.describe()})")
        try:
            out = self.fn(*matrices(inp), mask=mask, scale=self.exact_scale(inp), **extra)
        except Exception as e:     # the function under test failed on this input
            raise ImplRaised(e) from e
        return [[exact_entry(e, f"outputs[{i}][{c}]") for c, e in enumerate(r)]
                for i, r in enumerate(out)]


def as_implementation(fn) -> Implementation:
    """``fn`` as an :class:`Implementation`: exactattn's exact functions exact, any other float."""
    if isinstance(fn, Implementation):
        return fn
    return Implementation(fn, exact=fn is reference or fn is attend_as_function)


#: property name (rules.PROPERTIES) -> its function check, whose failure says its statement
CHECKS: dict[str, Callable] = {}


def property_check(name: str):
    """Make ``check(impl, inp, ...)`` the function check ``check(fn, inp, ...)`` of the property
    ``name`` (:data:`CHECKS` keeps it).

    ``fn`` is wrapped by :func:`as_implementation`; a function that raises
    (:class:`~exactattn.verify.adapter.ImplRaised`) fails the property, the
    exception named in one line and chained.
    """
    prop = PROPERTIES[name].statement

    def wrap(check):
        @functools.wraps(check)
        def run(fn, inp, *args, **kwargs):
            impl = as_implementation(fn)
            inp.check_nonfinite()
            out, status, why, error = ask(check, impl, inp, *args, **kwargs)
            if status:
                raise failure(name, prop, impl.describe(), inp, [f"{impl.name} raised {why}"]) \
                    from error
            return out
        sig = inspect.signature(check)
        first, *rest = sig.parameters.values()
        run.__signature__ = sig.replace(parameters=[first.replace(name="fn"), *rest])
        CHECKS[name] = run
        return run
    return wrap


def _fail(name: str, impl: Implementation, res: Result, inp: Call, bad: list[str],
          detail: str = "") -> None:
    """Raise property ``name``'s :class:`PropertyFailure` when ``bad`` holds lines."""
    if bad:
        raise failure(name, PROPERTIES[name].statement + detail, impl.describe(res), inp, bad)


def _identity(inp: Call) -> Call:
    """``inp`` with values = the n_k x n_k identity, so that its outputs are the shares."""
    n_k = sizes(inp)[1]
    return replace(inp, values=[[int(i == j) for j in range(n_k)] for i in range(n_k)])


def _exact(impl: Implementation, inp: Call) -> Reference:
    """The exact reference of ``inp`` under the function's ``empty_row`` (default: the policy's)."""
    return Reference(inp.with_policy(inp.policy.replace(empty_row=impl.empty_row or
                                                        inp.policy.empty_row)))


@property_check("rows sum to one")
def check_rows_sum_to_one(impl, inp: Call) -> None:
    """Every row of shares sums to exactly 1 (a row that sees no key follows ``empty_row``).

    The shares are the outputs for values = the n_k x n_k identity.

    Raises:
        PropertyFailure: a row whose shares do not sum to 1 (or, for an empty
            row, do not follow the ``empty_row`` policy).
    """
    res = impl(_identity(inp))
    empty_row = impl.empty_row or inp.policy.empty_row
    seen = visible(inp)
    bad, want = [], inp.policy.replace(empty_row=empty_row).empty_share(sizes(inp)[1])
    for i, row in enumerate(res.rows):      # want: each share of a row that sees no key
        if seen[i]:
            t = res.total(row)
            if not res.equals(t, Fraction(1), Fraction(1)):
                bad.append(f"row {i}: shares {row_text(row)} sum to {value_text(t)}, want 1")
        elif not all(res.is_nan(x) if empty_row == "nan" else res.equals(x, want, Fraction(1))
                     for x in row):
            bad.append(f"row {i} sees no key: shares {row_text(row)}, want " + (
                "nan" if empty_row == "nan" else f"{want} each") + f" (empty_row={empty_row})")
    _fail("rows sum to one", impl, res, inp, bad)


@property_check("rows sum below one")
def check_rows_sum_below_one(impl, inp: Call) -> None:
    """With a sink, every row of shares sums to exactly ``1 - sink share``, less than 1.

    The sink joins the normaliser and carries no value, so the keys' shares
    add up to what it leaves (a row that sees no key: 0).

    Raises:
        InputError: an input without a sink.
        PropertyFailure: a row whose shares sum to anything else (or to 1 or more).

    >>> from exactattn.call.policy import Policy
    >>> from exactattn import Call
    >>> from exactattn.properties import reference
    >>> check_rows_sum_below_one(reference, Call([[1]], [[1], [0]], [[3], [1]],
    ...                                          policy=Policy(scale=1, sink=0)))
    """
    if inp.policy.sink is None:
        raise InputError("inp must have a sink (policy.sink) for this check (got none)")
    res = impl(_identity(inp))
    exact = _exact(impl, inp).dropped_shares()
    sums = [(row, res.total(row), sum(shares, Fraction(0))) for row, shares in zip(res.rows, exact)]
    _fail("rows sum below one", impl, res, inp, [
        f"row {i}: shares {row_text(row)} sum to {value_text(t)}, want {value_text(want)} (1 "
        "minus the sink's share)" for i, (row, t, want) in enumerate(sums)
        if not (res.equals(t, want, Fraction(1)) and res.between(t, None, Fraction(1), Fraction(0))
                and not (res.exact and t == 1))])


@property_check("matches reference")
def check_matches_reference(impl, inp: Call) -> None:
    """The outputs equal the exact reference's (under the function's ``empty_row``).

    Exactly for an exact function; within the stated tolerance for a float one.

    Raises:
        PropertyFailure: an output that differs from the exact one.
    """
    res, want = impl(inp), _exact(impl, inp).outputs()
    scales = column_scales(matrices(inp)[2])
    _fail("matches reference", impl, res, inp, [
        f"outputs[{i}][{c}] = {value_text(got)}, exact {value_text(w)}"
        for i, row in enumerate(res.rows) for c, (got, w) in enumerate(zip(row, want[i]))
        if not (res.is_nan(got) if w.row.nan else res.equals(got, w, scales[c]))])


@property_check("share support")
def check_share_support(impl, inp: Call) -> None:
    """Every share is positive where the key is visible and exactly 0 where it is masked.

    Rows that see no key are left to :func:`check_rows_sum_to_one`.  A float
    share may underflow to 0.0 where the exact share is below ``atol``
    (``exp(-800)`` is 0 in float64); anywhere else a visible share must be > 0.

    Raises:
        PropertyFailure: a visible share that is not > 0, or a masked one that is not 0.

    >>> from exactattn import Call
    >>> from exactattn.properties import reference
    >>> keep = [[True, False]]
    >>> check_share_support(reference, Call([[1]], [[1], [1]], [[0], [0]], keep))
    >>> def ignores_mask(queries, keys, values, *, mask=None, scale=None):
    ...     return reference(queries, keys, values, scale=scale)
    >>> check_share_support(Implementation(ignores_mask, exact=True),
    ...                     Call([[1]], [[1], [1]], [[0], [0]], keep))
    Traceback (most recent call last):
    ...
    exactattn.properties.PropertyFailure: property failed: shares are positive on visible keys and exactly 0 on masked ones
      function: ignores_mask (exact)
      input: Call([[1]], [[1], [1]], [[0], [0]], [[True, False]], policy=Policy())
      shares[0][1] = 1/2 for a masked key, want exactly 0
    """
    res, bad = impl(_identity(inp)), []
    exact = functools.cache(lambda: _exact(impl, inp).dropped_shares())
    keep, visible_keys = dropout_keep(inp), visible(inp)
    for i, row in enumerate(res.rows):     # a dropped key counts as hidden here
        seen = [j for j in visible_keys[i] if keep is None or keep[i][j]]
        if not seen:
            continue
        for j, x in enumerate(row):    # a float's underflow to 0 is no fault below atol
            ok = (not res.is_nan(x) and (x > 0 if j in seen else x == 0)) if res.exact else \
                math.isfinite(x) and (x > 0 or x == 0.0 and float(exact()[i][j]) <=
                                      res.tolerance.atol) if j in seen else x == 0.0
            if not ok:
                bad.append(f"shares[{i}][{j}] = {value_text(x)} for a " + (
                    "visible key, want > 0" if j in seen else "masked key, want exactly 0"))
    _fail("share support", impl, res, inp, bad)


def _views(inp: Call) -> list[tuple]:
    """Each query's view of the keys: (visible, additive offset, kept) per key."""
    mask, keep = inp.block_mask(0, 0), dropout_keep(inp)
    return [tuple((j in seen, Fraction(0) if mask is None else mask.offset(i, j),
                   keep is None or keep[i][j]) for j in range(sizes(inp)[1]))
            for i, seen in enumerate(map(set, visible(inp)))]


@property_check("identical queries")
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
    res, scales = impl(inp), column_scales(values)
    _fail("identical queries", impl, res, inp, [
        f"queries {a} and {b} are identical but outputs[{a}][{c}] = {value_text(res.rows[a][c])}"
        f" and outputs[{b}][{c}] = {value_text(res.rows[b][c])}" for a, b in pairs
        for c in range(len(values[0])) if not res.same(res.rows[a][c], res.rows[b][c], scales[c])])
    return len(pairs)


@property_check("outputs within values")
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
    bounds = [[(min(col), max(col)) for col in zip(*(values[j] for j in seen))] if seen else []
              for seen in visible(inp)]            # a row that sees no key has no bounds
    _fail("outputs within values", impl, res, inp, [
        f"outputs[{i}][{c}] = {value_text(got)} lies outside [{lo}, {hi}], the visible values "
        f"of column {c}" for i, row in enumerate(res.rows)
        for c, (got, (lo, hi)) in enumerate(zip(row, bounds[i]))
        if not res.between(got, lo, hi, scales[c])])


def _first_sees_first(inp: Call) -> bool:
    return inp.policy.causal and visible(inp)[0] == [0]


@property_check("causal first output")
def check_causal_first_output(impl, inp: Call) -> None:
    """With the causal rule the first query sees only the first key, so its output is exactly ``values[0]``.

    Raises:
        InputError: the input is not causal with query 0 seeing key 0 alone
            (``top_left``, or ``bottom_right`` with as many keys as queries).
        PropertyFailure: ``outputs[0] != values[0]``.

    >>> from exactattn.call.policy import Policy
    >>> from exactattn import Call
    >>> from exactattn.properties import attend_as_function, reference
    >>> check_causal_first_output(attend_as_function,
    ...     Call([[1], [2]], [[3], [4]], [[5], [6]], policy=Policy(causal=True)))
    >>> check_causal_first_output(reference, Call([[1]], [[1]], [[1]]))
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: inp must be causal with query 0 seeing key 0 alone for this check (top_left, or bottom_right with as many keys as queries) (got causal=off, query 0 sees keys [0])
    """
    if not _first_sees_first(inp):
        raise InputError(
            f"inp must be causal with query 0 seeing key 0 alone for this check (top_left, or "
            f"bottom_right with as many keys as queries) (got causal="
            f"{'on' if inp.policy.causal else 'off'}, query 0 sees keys {visible(inp)[0]})")
    res, values = impl(inp), matrices(inp)[2]
    scales = column_scales(values)
    _fail("causal first output", impl, res, inp, [
        f"outputs[0][{c}] = {value_text(got)}, want values[0][{c}] = {want}"
        for c, (got, want) in enumerate(zip(res.rows[0], values[0]))
        if not res.equals(got, want, scales[c])])


def _unmoved(impl, base: Result, moved: Call, pairs, scales, why: str = "", shift=None) -> tuple:
    """``(other, bad)``: ``other = impl(moved)``'s rows against ``base``'s (+ ``shift``),
    ``other[i]`` against ``base[src]`` for ``(i, src)`` in ``pairs``; ``bad`` one line per
    entry that moved (``M``: ``scales``, widened by the shift)."""
    other, bad = impl(moved), []
    for i, src in pairs:
        for c, M in enumerate(scales):
            want, got = base.rows[src][c], other.rows[i][c]
            if shift is not None:
                want, M = want + (shift[c] if base.exact else float(shift[c])), M + abs(shift[c])
            if not other.same(got, want, M):
                bad.append(f"outputs[{i}][{c}] = {value_text(got)}, want {value_text(want)}{why}")
    return other, bad


def _compare_outputs(name: str, detail: str, impl, inp: Call, moved: Call, rows_map=None,
                     shift=None):
    """:func:`_unmoved` of ``impl(inp)`` and ``moved`` over ``rows_map`` (default: in order),
    rows of ``inp`` that see no key skipped; fails property ``name``."""
    seen = visible(inp)
    pairs = [(i, src) for i, src in rows_map or enumerate(range(len(seen))) if seen[src]]
    other, bad = _unmoved(impl, impl(inp), moved, pairs, column_scales(matrices(inp)[2]),
                          shift=shift)
    _fail(name, impl, other, inp, bad, detail)


@property_check("shift invariance")
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
    shifts = [to_exact(s, name=f"shifts[{i}]") for i, s in
              enumerate(range(1, n_q + 1) if shifts is None else shifts)]
    if len(shifts) != n_q:
        raise ShapeError(f"shifts must have one entry per query, {n_q} (got {len(shifts)})")
    wide = replace(inp, queries=[q + [s] for q, s in zip(queries, shifts)],
                   keys=[k + [Fraction(1)] for k in keys],
                   policy=inp.policy.replace(divisor_squared=inp.policy.divisor_squared_for(d_k)))
    _compare_outputs("shift invariance", f" (shifts {[str(s) for s in shifts]})", impl, inp, wide)


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


@property_check("key permutation")
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
    _compare_outputs("key permutation", f" (keys in the order {perm})", impl, inp, moved)


@property_check("query permutation")
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
    _compare_outputs("query permutation", f" (queries in the order {perm})", impl, inp, moved,
                     list(enumerate(perm)))


def read_bias(bias, width: int, name: str) -> list[Fraction]:
    """A bias vector read exactly (default: all ones)."""
    b = [to_exact(e, name=f"{name}[{i}]") for i, e in enumerate([1] * width if bias is None
                                                                else bias)]
    if len(b) != width:
        raise ShapeError(f"{name} must have {width} numbers (got {len(b)})")
    return b


@property_check("key bias cancels")
def check_key_bias_cancels(impl, inp: Call, bias: Sequence | None = None) -> None:
    """A bias on the keys cancels: ``k_j + b`` adds ``q_i . b`` to every score of row i, a constant.

    (A bias on the queries adds ``b . k_j``, which varies with j, so it does
    *not* cancel in general.)  Default bias: all ones.

    Raises:
        PropertyFailure: an output that changed.

    >>> from exactattn import Call
    >>> from exactattn.properties import reference
    >>> check_key_bias_cancels(reference, Call([[1, 2]], [[0, 1], [1, 0]], [[1], [3]]),
    ...                        bias=[5, -1])
    """
    b = read_bias(bias, sizes(inp)[2], "bias")
    moved = replace(inp, keys=[[a + e for a, e in zip(k, b)] for k in matrices(inp)[1]])
    _compare_outputs("key bias cancels", f" (bias {[str(e) for e in b]})", impl, inp, moved)


@property_check("value bias shifts")
def check_value_bias_shifts(impl, inp: Call, bias: Sequence | None = None) -> None:
    """A bias on the values shifts every output by exactly that bias (the shares sum to 1).

    Raises:
        PropertyFailure: ``outputs'[i] != outputs[i] + bias`` for a row that sees a key.

    >>> from exactattn import Call
    >>> from exactattn.properties import reference
    >>> check_value_bias_shifts(reference, Call([[1]], [[1], [2]], [[0], [3]]), ["1/2"])
    """
    b = read_bias(bias, sizes(inp)[3], "bias")
    moved = replace(inp, values=[[a + e for a, e in zip(v, b)] for v in matrices(inp)[2]])
    _compare_outputs("value bias shifts", f" (bias {[str(e) for e in b]})", impl, inp, moved,
                     shift=b)


@property_check("masked entries ignored")
def check_masked_entries_ignored(impl, inp: Call, change: Fraction | int = 7) -> None:
    """Changing a key or value that query i cannot see leaves output i unchanged.

    For each query with a hidden key, every entry of the keys and values it
    cannot see has ``change`` added, and its output row is compared.  (For
    ``inf`` and ``nan`` there, see :func:`check_masked_nonfinite_ignored`.)

    Raises:
        PropertyFailure: an output that moved when only hidden entries changed.
    """
    delta = to_exact(change, name="change")
    bad, base, res = [], None, None
    _, keys, values = matrices(inp)
    for i, seen in enumerate(visible(inp)):
        hidden = [j for j in range(len(keys)) if j not in seen]
        if not hidden or not seen:
            continue
        base = base or impl(inp)
        moved_values = [[e + delta for e in v] if j in hidden else v for j, v in enumerate(values)]
        moved = replace(inp, values=moved_values, keys=[[e + delta for e in k] if j in hidden
                                                        else k for j, k in enumerate(keys)])
        scales = [max(a, b) for a, b in zip(column_scales(values), column_scales(moved_values))]
        res, more = _unmoved(impl, base, moved, [(i, i)], scales,
                             f" when hidden keys {hidden} changed")
        bad += more
    _fail("masked entries ignored", impl, res, inp, bad)


@property_check("masked inf/nan ignored")
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

    >>> from exactattn import Call
    >>> from exactattn.properties import reference
    >>> check_masked_nonfinite_ignored(reference, Call([[0]], [[0], [0]], [[1], [2]],
    ...                                                [[True, False]]))
    1
    """
    bad, res, seen = [], None, keep(inp)
    unseen = (~keys_read(inp.policy, seen).any(axis=0)).nonzero()[0].tolist()
    empty = empty_rows(inp.policy, seen)
    values = matrices(inp)[2]
    scales = column_scales(values)
    base = impl(inp) if unseen else None
    for fill in ("inf", "nan") if unseen else ():
        moved = replace(inp, values=[[fill] * len(v) if j in unseen else v
                                     for j, v in enumerate(values)])
        rows = [(i, i) for i in range(len(empty)) if not (empty[i] and
                                                           inp.policy.empty_row == "nan")]
        res, bad = _unmoved(impl, base, moved, rows, scales, f" when the values of keys "
                            f"{unseen}, which no query sees, were {fill}")
        if bad:
            break
    _fail("masked inf/nan ignored", impl, res, inp, bad)
    return len(unseen)


def check_all(fn, inp: Call, *, d_out=None,
              finite_differences: Sequence[tuple] = ()) -> list[str]:
    """Run every function check that holds under ``inp``'s policy; return the names of those run.

    With ``d_out`` (n_q x d_v, the upstream gradient), the checks of exactattn's exact
    gradients of ``inp`` run too (:func:`~exactattn.properties.gradients.check_gradients`,
    with the ``finite_differences`` named there).

    Which property holds under which modifier is the one table
    :data:`exactattn.properties.rules.PROPERTIES` (e.g. a soft-capped head is
    not shift-invariant; with a sink the rows sum to less than 1, checked
    instead of summing to 1; the permutation checks skip the causal rule,
    windows, ALiBi and RoPE); the causal-first-output check runs when the
    input is causal and query 0 sees key 0 alone.

    Raises:
        PropertyFailure: the first property that fails, with its report.

    >>> from exactattn.call.policy import Policy
    >>> from exactattn import Call
    >>> from exactattn.properties import reference
    >>> capped = Call([[1], [2]], [[1], [0]], [[3], [1]], policy=Policy(softcap="1"))
    >>> "shift invariance" in check_all(reference, capped)
    False
    """
    impl, on = as_implementation(fn), active(inp.policy)
    ran = [name for name in PROPERTIES if name not in OPT_IN and holds(name, on)
           and (name != "causal first output" or _first_sees_first(inp))]
    for name in ran:
        CHECKS[name](impl, inp)
    if d_out is not None:
        g = Reference(inp).gradients(d_out).blocks[(0, 0)]
        for check in check_gradients(g, finite_differences=finite_differences):
            if not check.holds:
                raise PropertyFailure(check, "function: exactattn's exact gradients",
                                      f"input: {input_text(inp)}", f"d_out: {d_out!r}")
            ran.append(check.name)
    return ran


# --------------------------------------------------------------------------- exactattn itself
# These take a head and its tokens (or a row of scores) rather than a function, and hold
# exactly: every comparison is between exact values.


def check_identical_tokens(head, x) -> int:
    """Two tokens with the same numbers get the same row of shares and the same output (no positions).

    :func:`check_identical_queries` on the head's call (:meth:`Call.of_head
    <exactattn.call.Call.of_head>`), its outputs and its shares, run by the head engine
    (:func:`~exactattn.properties.attend_as_function`): identical tokens have identical
    queries.

    Returns:
        the number of pairs of identical queries compared.

    Raises:
        InputError: a causal head (its rows differ by position on purpose).
        PropertyFailure: identical queries with different rows.

    >>> from exactattn.examples import chronicle
    >>> check_identical_tokens(chronicle().head, chronicle().x)    # tokens 2 and 4
    1
    """
    if head.causal:
        raise InputError("head must not be causal for this check (got causal=True)")
    inp = Call.of_head(head, x)
    check_identical_queries(attend_as_function, inp)
    return check_identical_queries(attend_as_function, _identity(inp))


def check_bias_cancels(head, x, *, key_bias: Sequence | None = None,
                       value_bias: Sequence | None = None) -> None:
    """A key bias cancels out of the shares; a value bias shifts every output by exactly itself.

    Derivation: with ``k_j = W_K x_j + b_k`` the score ``q_i . k_j`` gains
    ``q_i . b_k``, the same for every key j of row i, and a softmax ignores a
    constant added to a row.  With ``v_j = W_V x_j + b_v`` each output gains
    ``sum_j shares[i][j] b_v = b_v``.  A *query* bias adds ``b_q . k_j``,
    which depends on j, so it does not cancel (see the tests for a head
    where it moves the shares).  :func:`check_key_bias_cancels` on the head's
    shares and :func:`check_value_bias_shifts` on its outputs, run by the head
    engine (:func:`~exactattn.properties.attend_as_function`).

    Raises:
        PropertyFailure: shares that moved, or outputs not shifted by ``value_bias``.
    """
    inp = Call.of_head(head, x)
    check_key_bias_cancels(attend_as_function, _identity(inp), key_bias)
    check_value_bias_shifts(attend_as_function, inp, value_bias)


def check_cost(head, x) -> dict[str, int]:
    """The multiply-adds the pencil engine counts equal the formula derived from the loop bounds.

    The scores' and the mix's MACs are counted over each exact row's visible pairs and kept
    keys; the projections' are read from the shapes of the products (so that stage checks
    the shapes only).  Runs ``attend(head, x, engine="pencil")`` and compares ``trace.macs`` stage
    by stage with :func:`exactattn.cost.derive` (sympy sums over the loop
    nests: ``n D (2 d_k + d_v)``, ``n^2 d_k``, ``n^2 d_v``; a causal head sees
    n(n+1)/2 pairs) at n, D = d_model, d_k, d_v.  Units: MACs.

    Returns:
        the counted MACs per stage, with their ``total``.

    Raises:
        PropertyFailure: a stage whose count differs from the derived figure.

    >>> from exactattn.examples import chronicle
    >>> check_cost(chronicle().head, chronicle().x)
    {'projections': 192, 'scores': 64, 'mix': 64, 'total': 320}
    """
    from ..cost import derive, derive_at
    trace = attend(head, x, engine="pencil")
    derived = derive_at(trace.n, head.d_model, head.d_k, head.d_v, causal=head.causal)
    counted = dict(trace.macs, total=sum(trace.macs.values()))
    bad = [f"{stage}: counted {counted.get(stage)} MACs, derived {derived[stage]} "
           f"({derive(causal=head.causal)[stage]})" for stage in derived
           if counted.get(stage) != derived[stage]]
    if bad:
        raise PropertyFailure(Check("cost", "the counted cost equals the derived formula", False,
                                    bad), "function: exactattn.attend (exact)", f"head: {head!r}",
                              f"x: {matrix_text(x)}")
    return counted


def check_masked_entries_absent(inp: Call) -> int:
    """No key or value at a masked position appears in any output, proved with sympy symbols.

    Every key and value entry is replaced by a symbol (``k_j_c``, ``v_j_c``)
    and :func:`exactattn.attend` runs with ``engine="symbolic"``; output i's
    free symbols must avoid those of the keys query i cannot see.  Uses the
    queries and policy of ``inp``: self-attention (as many keys as queries)
    without an explicit mask, causal or not (what ``attend`` supports).

    Returns:
        how many (query, hidden key) pairs were checked.

    Raises:
        PropertyFailure: a hidden key's or value's symbol in an output.
        InputError, ShapeError: a mask or shape ``attend`` does not support.

    >>> from exactattn.call.policy import Policy
    >>> from exactattn import Call
    >>> check_masked_entries_absent(Call([[1], [2]], [[0], [0]], [[0], [0]],
    ...                                  policy=Policy(causal=True)))
    1
    """
    import sympy
    n_q, n_k, d_k, d_v = sizes(inp)
    if n_q != n_k:
        raise ShapeError(f"keys must number as many as queries for exactattn.attend, "
                         f"{n_q} (got {n_k})")
    if inp.mask is not None:
        raise InputError(f"mask must be None for exactattn.attend, which knows the causal rule "
                         f"only (got {inp.block_mask(0, 0)!r})")
    k_sym = [[sympy.Symbol(f"k_{j}_{c}") for c in range(d_k)] for j in range(n_k)]
    v_sym = [[sympy.Symbol(f"v_{j}_{c}") for c in range(d_v)] for j in range(n_k)]
    head, x = selector_head(matrices(inp)[0], k_sym, v_sym, causal=inp.policy.causal,
                            scale=inp.policy.divisor_squared, symbolic=True)
    trace = attend(head, x, engine="symbolic")
    hidden = [[j for j in range(n_k) if j not in seen] for seen in visible(inp)]
    leaks = [(i, c, sympy.sympify(trace.outputs[i][c]).free_symbols &
              {s for j in hide for s in k_sym[j] + v_sym[j]})
             for i, hide in enumerate(hidden) for c in range(d_v)]
    bad = [f"outputs[{i}][{c}] contains {sorted(map(str, leak))}, entries of keys or values "
           f"query {i} cannot see" for i, c, leak in leaks if leak]
    if bad:
        raise failure("masked entries absent", "keys and values at masked positions appear in "
                      "no output", "exactattn.attend (symbolic)", inp, bad)
    return sum(map(len, hidden))


def check_online_softmax(raw: Sequence, divisor_squared, values=None, *, blocks=None,
                         empty_row: str = "zero") -> int:
    """The online (blockwise, running-maximum) softmax equals the one-pass softmax exactly.

    ``blocks`` is one split (a block size or a list of lengths); None tries
    every split of the row (2**(n-1) of them).  See :mod:`exactattn.reference.online`.

    Returns:
        the number of splits compared.

    Raises:
        PropertyFailure: a split whose maximum, normaliser or outputs differ.

    >>> check_online_softmax([Fraction(0), None, Fraction(3)], Fraction(2))
    4
    """
    splits = list(all_splits(len(raw))) if blocks is None else [blocks]
    for split in splits:
        res = online_softmax(raw, divisor_squared, values, blocks=split, empty_row=empty_row)
        if not res.equals_one_pass():
            ref, outs = res.one_pass()
            raise PropertyFailure(Check(
                "online softmax", "the online softmax equals the one-pass softmax exactly", False,
                [f"raw scores: {['-inf' if r is None else str(r) for r in raw]}, "
                 f"divisor squared {divisor_squared}", f"blocks: {res.blocks}",
                 f"online: max {res.row.max_raw}, normaliser {res.row.counts}, "
                 f"outputs {[o.numerators for o in res.outputs]}",
                 f"one pass: max {ref.max_raw}, normaliser {ref.counts}, "
                 f"outputs {[o.numerators for o in outs]}"]))
    return len(splits)
