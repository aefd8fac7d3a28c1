"""The adapter for an attention function under test: how it is called, how its result is read.

``fn(queries, keys, values, *, mask=None, scale=None) -> outputs`` gets the
input's numbers, the mask (the explicit one with the causal rule folded in,
:meth:`~exactattn.properties.AttentionInput.effective_mask`) in the form it
asked for, and the policy's scale (None for the default 1/sqrt(d_k)).  Float
functions get numpy arrays; exact ones lists of ``Fraction``.  The adapter
computes nothing exact itself: its results are compared by
:mod:`exactattn.properties.compare`.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Callable

from ..call import DEFAULT_SCALE, EMPTY_ROWS, MASK_KINDS, float_scale
from ..options import check_choice
from ..errors import InputError
from ..exact import rational_sqrt
from ..softmax import ExpRatio
from .reference import attend_as_function, reference
from .report import PropertyFailure

__all__ = ["MASK_FORMS", "TOLERANCES", "Implementation", "Result", "as_implementation",
           "exact_entry"]

MASK_FORMS = (*MASK_KINDS, "mask")
TOLERANCES = {  # dtype -> (rtol, atol)
    "float64": (1e-12, 1e-12),
    "float32": (1e-5, 1e-6),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
}
_INPUT_DTYPES = ("float64", "float32", "float16")


def exact_entry(value, where: str) -> Fraction | ExpRatio:
    """An exact function's output entry, checked: an ``ExpRatio`` or a rational as ``Fraction``."""
    if isinstance(value, ExpRatio):
        return value
    if isinstance(value, (int, Fraction)) and not isinstance(value, bool):
        return Fraction(value)
    if type(value).__module__.startswith("sympy") and getattr(value, "is_Rational", False):
        return Fraction(int(value.p), int(value.q))
    raise InputError(f"{where} must be a Fraction or an ExpRatio from an exact function "
                     f"(got {value!r})")


def _tolerance(name: str, value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 \
            or not math.isfinite(value):
        raise InputError(f"{name} must be a non-negative finite number (got {value!r})")
    return float(value)


class Result:
    """One call's outputs (n_q x d_v): exact entries, or floats with the tolerance they get."""

    __slots__ = ("rows", "exact", "rtol", "atol", "dtype")

    def __init__(self, rows, exact: bool, rtol: float = 0.0, atol: float = 0.0, dtype: str = ""):
        self.rows, self.exact, self.rtol, self.atol, self.dtype = rows, exact, rtol, atol, dtype


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
            :class:`~exactattn.call.Mask` itself; default for exact functions).
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
        check_choice(dtype, "dtype", _INPUT_DTYPES)
        if convert is not None and not callable(convert):
            raise InputError(f"convert must be callable or None (got {convert!r})")
        mask_as = check_choice(mask_as if mask_as is not None else
                               ("mask" if exact else "bool_keep"), "mask_as", MASK_FORMS)
        if empty_row is not None:
            check_choice(empty_row, "empty_row", EMPTY_ROWS)
        if name is not None and not isinstance(name, str):
            raise InputError(f"name must be a string (got {name!r})")
        self.fn, self.exact, self.dtype, self.convert = fn, exact, dtype, convert
        self.mask_as, self.empty_row = mask_as, empty_row
        self.rtol, self.atol = _tolerance("rtol", rtol), _tolerance("atol", atol)
        self.name = name or getattr(fn, "__name__", None) or repr(fn)

    def describe(self, result: Result | None = None) -> str:
        """The function and its tolerance, as a report names them."""
        if self.exact:
            return f"{self.name} (exact)"
        if result is None:
            tol = "tolerance from the returned dtype"
        else:
            src = "given" if self.rtol is not None and self.atol is not None else \
                f"from {result.dtype}"
            tol = f"rtol={result.rtol:g}, atol={result.atol:g} {src}"
        return f"{self.name} (float; {tol}; |got - exact| <= atol + rtol*M)"

    def empty_row_for(self, inp) -> str:
        """What this function gives an empty row of ``inp``: its own setting, else the policy's."""
        return self.empty_row or inp.policy.empty_row

    def scale_arg(self, inp):
        """The ``scale`` argument for ``inp``: None (default), else 1/sqrt(D) (1 for no scaling).

        Exact functions get a ``Fraction`` or a sympy ``1/sqrt(D)``; float
        functions the float nearest the exact scale.
        """
        D = inp.policy.scale
        if D == DEFAULT_SCALE:
            return None
        if D is None:
            return Fraction(1) if self.exact else 1.0
        if not self.exact:
            return float_scale(D)
        root = rational_sqrt(D)
        if root is not None:
            return 1 / root
        import sympy
        return 1 / sympy.sqrt(sympy.Rational(D.numerator, D.denominator))

    def __call__(self, inp) -> Result:
        """Call the function on ``inp`` and read its outputs (n_q x d_v)."""
        mask = inp.effective_mask()
        scale = self.scale_arg(inp)
        if self.exact:
            if mask is not None and self.mask_as != "mask":
                mask = mask.as_form(self.mask_as)
            out = self.fn([list(r) for r in inp.queries], [list(r) for r in inp.keys],
                          [list(r) for r in inp.values], mask=mask, scale=scale)
            rows = [[exact_entry(e, f"outputs[{i}][{c}]") for c, e in enumerate(r)]
                    for i, r in enumerate(out)]
            if len(rows) != inp.n_queries or any(len(r) != inp.d_v for r in rows):
                self._wrong_shape(inp, f"{len(rows)} x {[len(r) for r in rows]}")
            return Result(rows, True)
        import numpy as np
        conv = self.convert or (lambda a: a)

        def arr(m):
            return conv(np.array([[float(e) for e in r] for r in m], dtype=self.dtype))
        if mask is not None:
            form = "bool_keep" if self.mask_as == "mask" else self.mask_as
            m = mask.as_form(form)
            if form == "additive":
                mask = conv(np.array([[-math.inf if e is None else float(e) for e in r]
                                      for r in m], dtype=self.dtype))
            else:
                mask = conv(np.array(m, dtype=bool))
        out = self.fn(arr(inp.queries), arr(inp.keys), arr(inp.values), mask=mask, scale=scale)
        if hasattr(out, "detach"):  # a PyTorch tensor: bfloat16 has no numpy dtype
            out = out.detach().cpu()
            dtype = str(out.dtype).replace("torch.", "")
            out = out.double().numpy()
        else:
            out = np.asarray(out)
            dtype = out.dtype.name
        # the looser of the input dtype and the returned one: float32 inputs upcast
        # to float64 still carry float32's rounding
        if TOLERANCES.get(dtype, TOLERANCES["float64"]) < TOLERANCES[self.dtype]:
            dtype = self.dtype
        rtol, atol = TOLERANCES.get(dtype, TOLERANCES["float64"])
        rtol = self.rtol if self.rtol is not None else rtol
        atol = self.atol if self.atol is not None else atol
        if out.shape != (inp.n_queries, inp.d_v):
            self._wrong_shape(inp, f"shape {tuple(out.shape)}")
        return Result(out.astype(np.float64).tolist(), False, rtol, atol, dtype)

    def _wrong_shape(self, inp, got: str):
        raise PropertyFailure(f"outputs must be {inp.n_queries} x {inp.d_v} (got {got})\n"
                              f"  function: {self.name}\n  input: {inp!r}")


def as_implementation(fn) -> Implementation:
    """``fn`` as an :class:`Implementation`: exactattn's exact functions exact, any other float."""
    if isinstance(fn, Implementation):
        return fn
    return Implementation(fn, exact=fn is reference or fn is attend_as_function)
