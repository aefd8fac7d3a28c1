"""The function under test as the property checks call it: a thin layer on verify's one adapter.

``fn(queries, keys, values, *, mask=None, scale=None) -> outputs``.  A float
function is called by :class:`~exactattn.verify.adapter.FunctionImpl` in its
``mask`` convention on the :class:`~exactattn.verify.adapter.FloatCall` of the
input (:func:`~exactattn.verify.adapter.make_call` of the input's
:class:`~exactattn.call.Call`): numpy arrays of the dtype, the mask (the explicit
one with the causal rule folded in) in the form asked for, the policy's
scale (None for the default 1/sqrt(d_k)).  Its answer keeps the dtype it came
back in, which sets the tolerance (:func:`~exactattn.verify.compare.tolerance_for`).

An exact function (``exact=True``) gets lists of ``Fraction``, the scale as a
``Fraction`` or a sympy ``1/sqrt(D)``, the :class:`~exactattn.call.policy.Mask`
itself, and returns ``Fraction`` or :class:`~exactattn.numbers.softmax.ExpRatio`
entries.  Whatever either kind raises becomes
:class:`~exactattn.verify.adapter.ImplRaised`, which a check reports as its
property failing.  A :class:`Result` compares itself: exactly for exact entries
(``Fraction`` or :class:`~exactattn.numbers.softmax.ExpRatio`, decided by
Lindemann-Weierstrass), by :mod:`exactattn.verify.compare`'s rtol/atol mode
for floats.
"""

from __future__ import annotations

import functools
import inspect
import math
from fractions import Fraction
from typing import Callable

import flint  # noqa: F401  (loaded with the checks, not inside the first example Hypothesis times)

from ..call.policy import DEFAULT_SCALE, EMPTY_ROWS, MASK_KINDS, POSITION_FIELDS
from ..errors import InputError
from ..numbers.exact import fraction_of, rational_sqrt
from ..options import check_choice
from ..numbers.softmax import ExpRatio
from ..verify import compare
from ..verify.adapter import NUMPY_DTYPES, FunctionImpl, ImplRaised, make_call
from ..verify.compare import TOLERANCES, Tolerance, check_tolerance, tolerance_for
from .inputs import dropout_keep, effective_mask, matrices, sizes
from .reference import attend_as_function, reference
from .report import PropertyFailure, failure

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


def _nan(x) -> bool:
    return isinstance(x, ExpRatio) and x.row.nan


def sign(x) -> int:
    """-1, 0 or 1 of an exact entry."""
    return x.sign() if isinstance(x, ExpRatio) else (x > 0) - (x < 0)


class Result:
    """One call's outputs (n_q x d_v): exact entries, or floats with the :class:`Tolerance` they
    get; and how entries of it compare (``M``: the column's magnitude)."""

    __slots__ = ("rows", "exact", "tolerance")

    def __init__(self, rows, exact: bool, tolerance: Tolerance | None = None):
        self.rows, self.exact, self.tolerance = rows, exact, tolerance

    def is_nan(self, x) -> bool:
        return _nan(x) if self.exact else math.isnan(x)

    def same(self, a, b, M) -> bool:
        """Two results of the function agree: exactly, or within twice the tolerance."""
        if self.exact:
            return not _nan(a) and not _nan(b) and a == b
        return compare.agree(a, b, M, self.tolerance)

    def equals(self, got, want, M) -> bool:
        """A result equals an exact value (``Fraction`` or ``ExpRatio``)."""
        if self.exact:
            return not _nan(got) and got == want
        return compare.within(got, want, M, self.tolerance)

    def at_least(self, got, lo, M) -> bool:
        if self.exact:
            return not _nan(got) and got >= lo
        return compare.at_least(got, lo, M, self.tolerance)

    def at_most(self, got, hi, M) -> bool:
        if self.exact:
            return not _nan(got) and got <= hi
        return compare.at_most(got, hi, M, self.tolerance)

    def plus(self, a, q: Fraction):
        """A result plus a rational: exactly, or in floats."""
        return a + q if self.exact else a + float(q)

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
        if not callable(fn):
            raise InputError(f"fn must be callable (got {fn!r})")
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
        self.function = None if exact else FunctionImpl(
            fn, convention="mask", mask_as="bool_keep" if mask_as == "mask" else mask_as,
            convert=convert, name=self.name)

    def describe(self, result: Result | None = None) -> str:
        """The function and its tolerance, as a report names them."""
        if self.exact:
            return f"{self.name} (exact)"
        tol = "tolerance from the returned dtype" if result is None else \
            result.tolerance.describe()
        return f"{self.name} (float; {tol}; |got - exact| <= atol + rtol*M)"

    def empty_row_for(self, inp) -> str:
        """What this function gives an empty row of ``inp``: its own setting, else the policy's."""
        return self.empty_row or inp.policy.empty_row

    @staticmethod
    def exact_scale(inp):
        """An exact function's ``scale``: None (default), else a ``Fraction`` or a sympy ``1/sqrt(D)``."""
        D = inp.policy.divisor_squared
        if D == DEFAULT_SCALE:
            return None
        if D is None:
            return Fraction(1)
        root = rational_sqrt(D)
        if root is not None:
            return 1 / root
        import sympy
        return 1 / sympy.sqrt(sympy.Rational(D.numerator, D.denominator))

    def __call__(self, inp) -> Result:
        """FloatCall the function on ``inp`` and read its outputs (n_q x d_v).

        Raises:
            ImplRaised: the function raised.
            PropertyFailure: outputs of the wrong shape.
        """
        if self.exact:
            return self._exact(inp)
        n_q, _, _, d_v = sizes(inp)
        answer = self.function.answer(make_call(inp, self.dtype))
        if answer.values.shape != (n_q, d_v):
            self._wrong_shape(inp, f"shape {tuple(answer.values.shape)}")
        return Result(answer.values.tolist(), False,
                      tolerance_for(answer.dtype, self.dtype, self.rtol, self.atol))

    def _exact(self, inp) -> Result:
        mask = effective_mask(inp)
        if mask is not None and self.mask_as != "mask":
            mask = mask.as_form(self.mask_as)
        extra = {}
        if inp.policy.modified or any(getattr(inp.policy, f) is not None for f in POSITION_FIELDS):
            extra["policy"] = inp.policy      # modifiers reach an exact function as the policy
            if inp.dropout_keep is not None:
                extra["dropout_keep"] = dropout_keep(inp)
            try:
                params = inspect.signature(self.fn).parameters
            except (TypeError, ValueError):
                params = {}
            if "policy" not in params and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
                raise InputError(f"{self.name} must take policy= for an input with modifiers "
                                 f"(got a function without it; policy: {inp.policy.describe()})")
        try:
            out = self.fn(*matrices(inp), mask=mask, scale=self.exact_scale(inp), **extra)
        except Exception as e:     # the function under test failed on this input
            raise ImplRaised(e) from e
        rows = [[exact_entry(e, f"outputs[{i}][{c}]") for c, e in enumerate(r)]
                for i, r in enumerate(out)]
        n_q, _, _, d_v = sizes(inp)
        if len(rows) != n_q or any(len(r) != d_v for r in rows):
            self._wrong_shape(inp, f"{len(rows)} x {[len(r) for r in rows]}")
        return Result(rows, True)

    def _wrong_shape(self, inp, got: str):
        n_q, _, _, d_v = sizes(inp)
        raise PropertyFailure(f"outputs must be {n_q} x {d_v} (got {got})\n"
                              f"  function: {self.name}\n  input: {inp!r}")


def as_implementation(fn) -> Implementation:
    """``fn`` as an :class:`Implementation`: exactattn's exact functions exact, any other float."""
    if isinstance(fn, Implementation):
        return fn
    return Implementation(fn, exact=fn is reference or fn is attend_as_function)


def property_check(prop: str):
    """Make ``check(impl, inp, ...)`` the function check ``check(fn, inp, ...)`` of the property ``prop``.

    ``fn`` is wrapped by :func:`as_implementation`; a function that raises
    (:class:`~exactattn.verify.adapter.ImplRaised`) fails the property, the
    exception named in one line and chained.
    """
    def wrap(check):
        @functools.wraps(check)
        def run(fn, inp, *args, **kwargs):
            impl = as_implementation(fn)
            try:
                return check(impl, inp, *args, **kwargs)
            except ImplRaised as e:
                raise failure(prop, impl.describe(), inp, [f"{impl.name} raised {e.line}"]) from e
        sig = inspect.signature(check)
        first, *rest = sig.parameters.values()
        run.__signature__ = sig.replace(parameters=[first.replace(name="fn"), *rest])
        return run
    return wrap
