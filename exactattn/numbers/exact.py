"""The number domain: every conversion into exact values happens here.

Exactness contract
------------------
Inputs are integers, ``fractions.Fraction``, ``decimal.Decimal``, sympy
rationals, strings such as ``"1/2"``, ``"-0.75"`` or ``"3"``, and (in the
symbolic engine) sympy expressions.  Strings and decimals are read from their
text, so ``"0.1"`` is exactly 1/10.

A binary ``float`` is never converted silently, because ``0.1`` as a float is
3602879701896397/36028797018963968, not 1/10.  The caller says what it means:
``floats="exact"`` takes the float's exact binary value
(``Fraction(0.1) != Fraction(1, 10)``), ``floats="decimal"`` takes its shortest
decimal repr (``"0.1"`` -> 1/10).  NaN and infinities are refused either way.

>>> to_exact("1/2")
Fraction(1, 2)
>>> to_exact("-0.75")
Fraction(-3, 4)
>>> to_exact(0.1, floats="decimal")
Fraction(1, 10)
>>> to_exact(0.1)
Traceback (most recent call last):
...
exactattn.errors.FloatInputError: value is a binary float (0.1); pass '0.1' as a string or say how floats are read (floats='exact' or floats='decimal')
"""

from __future__ import annotations

import decimal
import functools
import math
import numbers
import re
from fractions import Fraction
from typing import Any, Iterable, Sequence

from ..errors import FloatInputError, InputError, ShapeError, shorten

__all__ = ["to_exact"]

FLOAT_POLICIES = (None, "exact", "decimal")

_NUMBER_TEXT = re.compile(
    r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?(\s*/\s*[+-]?\d+)?\s*$"
)


def _check_floats(floats) -> None:
    if floats not in FLOAT_POLICIES:
        raise InputError(f"floats must be None, 'exact' or 'decimal' (got {shorten(floats, quote=True)})")


def _fail_float(value: float, name: str) -> None:
    raise FloatInputError(
        f"{name} is a binary float ({value!r}); pass {str(value)!r} as a string "
        "or say how floats are read (floats='exact' or floats='decimal')"
    )


def is_symbolic(value: Any) -> bool:
    """True when ``value`` is a sympy expression that is not a plain rational."""
    return type(value).__module__.startswith("sympy") and not getattr(value, "is_Rational", False)


def to_exact(value: Any, *, name: str = "value", floats: str | None = None,
             symbolic: bool = False) -> Any:
    """Convert one entry into an exact number.

    Returns a ``Fraction`` for every rational input; with ``symbolic=True`` a
    sympy expression that is not a rational number is returned unchanged
    (after checking that it holds no binary ``Float``).

    Raises:
        FloatInputError: ``value`` is a float and ``floats`` is None.
        InputError: NaN, infinity, a bool, an unreadable string, a symbolic
            entry when ``symbolic`` is False.

    >>> to_exact(3), to_exact("2.5"), to_exact(Fraction(1, 3))
    (Fraction(3, 1), Fraction(5, 2), Fraction(1, 3))
    >>> to_exact("abc", name="x[0][1]")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: x[0][1] must be a number such as 3, '1/2' or '-0.75' (got 'abc')
    """
    _check_floats(floats)
    if isinstance(value, bool):
        raise InputError(f"{name} must be a number, not a bool (got {shorten(value, quote=True)})")
    if isinstance(value, Fraction):
        return value
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(f"{name} must be finite (got {shorten(value, quote=True)})")
        if floats is None:
            _fail_float(value, name)
        return Fraction(value) if floats == "exact" else Fraction(repr(float(value)))
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise InputError(f"{name} must be finite (got {shorten(value, quote=True)})")
        _check_size(format(value, "e") if abs(value.adjusted()) > MAX_DIGITS else str(value),
                    name)
        return Fraction(value)
    if isinstance(value, str):
        known = _text_value(value)
        if known is not None:
            return known
        text = value.strip()
        _check_size(text, name)
        if not _NUMBER_TEXT.match(text):
            low = text.lower().lstrip("+-")
            if low in ("nan", "inf", "infinity"):
                raise InputError(f"{name} must be finite (got {shorten(value, quote=True)})")
            raise InputError(
                f"{name} must be a number such as 3, '1/2' or '-0.75' (got {shorten(value, quote=True)})")
        try:
            if "/" in text:
                num, den = text.split("/")
                result = Fraction(num.strip()) / Fraction(den.strip())
            else:
                result = Fraction(text)
        except ZeroDivisionError:
            raise InputError(f"{name} must not divide by zero (got {shorten(value, quote=True)})") from None
        return result
    mod = type(value).__module__
    if mod.startswith("sympy"):
        import sympy
        if getattr(value, "is_Rational", False):
            return fraction_of(value)
        if isinstance(value, sympy.Basic):
            if value.has(sympy.Float):
                raise FloatInputError(
                    f"{name} holds a binary Float ({value}); use sympy.Rational('...') "
                    "or a string so the value stays exact")
            if value.has(sympy.nan, sympy.zoo, sympy.oo, -sympy.oo):
                raise InputError(f"{name} must be finite (got {shorten(str(value))})")
            if value.is_real is False or value.has(sympy.I):
                raise InputError(f"{name} must be a real number (got {shorten(str(value))})")
            if not symbolic:
                raise InputError(
                    f"{name} must be a rational number for this engine (got {shorten(str(value))}); "
                    "pass symbolic=True to allow symbols and expressions")
            return value
    if mod.startswith("flint") and type(value).__name__ in ("fmpq", "fmpz"):
        return fraction_of(value)
    if isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real):
        raise InputError(f"{name} must be a real number (got {shorten(repr(value))})")
    if isinstance(value, numbers.Rational):
        return Fraction(int(value.numerator), int(value.denominator))
    if isinstance(value, numbers.Real):  # numpy floats and friends
        fv = float(value)
        if not math.isfinite(fv):
            raise InputError(f"{name} must be finite (got {shorten(value, quote=True)})")
        if floats is None:
            _fail_float(fv, name)
        if floats == "exact":
            return Fraction(fv)
        # the shortest decimal of the value in its own precision (numpy's str of a
        # float32 0.1 is '0.1', while float(...) would widen it to 0.10000000149...)
        return Fraction(str(value) if hasattr(value, "dtype") else repr(fv))
    raise InputError(
        f"{name} must be a number such as 3, '1/2' or '-0.75' (got {shorten(value, quote=True)})")


#: the largest number of digits, and the largest decimal exponent, read from text
MAX_DIGITS = 4000

_SHORT_TEXT = re.compile(r"\s*([+-]?\d{1,18})(?:\s*/\s*(\d{1,18}))?\s*")


@functools.lru_cache(maxsize=1 << 16)
def _text_value(text: str) -> Fraction | None:
    """The value of a short integer or ``p/q`` text (``'-3/4'``, ``'5'``), or None for every
    other text (decimals, exponents, long digits, a zero denominator), which
    :func:`to_exact` reads on its general path.  Spec files repeat a few such texts
    many times: each is read once."""
    m = _SHORT_TEXT.fullmatch(text)
    if m is None or m.group(2) is not None and int(m.group(2)) == 0:
        return None
    return Fraction(int(m.group(1)), int(m.group(2) or 1))


def _check_size(text: str, name: str) -> None:
    """Refuse number texts whose exact value would be astronomically large or slow to build."""
    digits = sum(ch.isdigit() for ch in text)
    m = re.search(r"[eE]\s*([+-]?\d+)", text)
    exponent = abs(int(m.group(1))) if m and len(m.group(1)) < 12 else (
        0 if not m else MAX_DIGITS + 1)
    if digits > MAX_DIGITS or exponent > MAX_DIGITS:
        raise InputError(
            f"{name} must have at most {MAX_DIGITS} digits and a decimal exponent within "
            f"±{MAX_DIGITS} (got {shorten(text, quote=True)}); rescale the inputs")


def to_row(values: Any, *, name: str, width: int | None = None,
           floats: str | None = None, symbolic: bool = False) -> list:
    """Convert a sequence into a list of exact entries, checking its width."""
    if isinstance(values, (str, bytes, dict, set, frozenset)) or \
            not isinstance(values, Iterable):
        raise ShapeError(f"{name} must be a list of numbers (got {shorten(repr(values))}); "
                         "a dict or a set has no order of its own")
    _check_floats(floats)
    # a Fraction is kept as it is; short integer and p/q texts (most of a spec file) are
    # read from one cache first
    row = [v if type(v) is Fraction else
           known if type(v) is str and (known := _text_value(v)) is not None else
           to_exact(v, name=f"{name}[{j}]", floats=floats, symbolic=symbolic)
           for j, v in enumerate(values)]
    if width is not None and len(row) != width:
        raise ShapeError(f"{name} must have {width} numbers (got {len(row)})")
    return row


def to_matrix(rows: Any, *, name: str, shape: tuple[int | None, int | None] = (None, None),
              floats: str | None = None, symbolic: bool = False,
              hint: str = "") -> list[list]:
    """Convert a list of rows into a rectangular list-of-lists of exact entries.

    ``shape`` gives the expected (rows, columns); None leaves a size free.

    Raises:
        ShapeError: empty, ragged or of the wrong shape.
    """
    if hasattr(rows, "ndim") and getattr(rows, "ndim", 0) >= 1 and hasattr(rows, "dtype"):
        rows = list(rows)         # numpy rows keep their scalars' own precision (float32 stays)
    if isinstance(rows, (str, bytes, dict, set, frozenset)) or not isinstance(rows, Iterable):
        raise ShapeError(f"{name} must be a list of rows (got {shorten(repr(rows))}); "
                         "a dict or a set has no order of its own")
    rows = list(rows)
    if not rows:
        raise ShapeError(f"{name} must have at least one row (got none)")
    out = [to_row(r, name=f"{name}[{i}]", floats=floats, symbolic=symbolic)
           for i, r in enumerate(rows)]
    widths = {len(r) for r in out}
    if len(widths) != 1:
        lens = [len(r) for r in out]
        raise ShapeError(f"{name} must have rows of equal length (got lengths {lens})")
    n_rows, n_cols = len(out), len(out[0])
    if n_cols == 0:
        raise ShapeError(f"{name} must have at least one column (got empty rows)")
    want_r, want_c = shape
    if (want_r is not None and n_rows != want_r) or (want_c is not None and n_cols != want_c):
        exp_r = want_r if want_r is not None else n_rows
        exp_c = want_c if want_c is not None else n_cols
        raise ShapeError(
            f"{name} must be {exp_r} x {exp_c}{hint} (got {n_rows} x {n_cols})")
    return out


def rational_sqrt(q: Fraction) -> Fraction | None:
    """The exact square root of a non-negative rational when it is rational, else None.

    >>> rational_sqrt(Fraction(9, 4)), rational_sqrt(Fraction(2))
    (Fraction(3, 2), None)
    """
    a, b = math.isqrt(q.numerator), math.isqrt(q.denominator)
    return Fraction(a, b) if a * a == q.numerator and b * b == q.denominator else None


def common_denominator(m: Sequence[Sequence]) -> tuple[list[list[int]], int] | None:
    """``m`` as integers over one common denominator ``(ints, den)``, or None if an
    entry is not rational (an ``int`` or a ``Fraction``).

    >>> common_denominator([[Fraction(1, 3), Fraction(1, 2)]])
    ([[2, 3]], 6)
    """
    den = 1
    for r in m:
        for e in r:
            if type(e) is not Fraction and type(e) is not int:
                return None
            den = math.lcm(den, e.denominator)
    return [[e.numerator * (den // e.denominator) for e in r] for r in m], den


def fraction_of(q) -> Fraction:
    """An exact rational from python-flint (``fmpq``, ``fmpz``) or sympy (``Rational``), or
    an ``int``, as a ``Fraction``.

    >>> from flint import fmpq
    >>> fraction_of(fmpq(3, 6)), fraction_of(7)
    (Fraction(1, 2), Fraction(7, 1))
    """
    if isinstance(q, (int, Fraction)):
        return Fraction(q)
    if hasattr(q, "q"):
        return Fraction(int(q.p), int(q.q))
    return Fraction(int(q))


def fmpq_of(q: Fraction):
    """A ``Fraction`` (or int) as python-flint's ``fmpq``."""
    from flint import fmpq
    return fmpq(q) if type(q) is int else fmpq(q.numerator, q.denominator)


def fmpq_mat_of(rows: Sequence[Sequence]):
    """Rows of ``Fraction`` (or int) as python-flint's ``fmpq_mat`` (no float on the way)."""
    from flint import fmpq_mat
    return fmpq_mat(len(rows), len(rows[0]), [fmpq_of(e) for r in rows for e in r])


def binary64(numerators, denominator: int = 1):
    """``numerators / denominator`` as a float64 array when every entry is a float64 exactly
    with no bit below 2^-1022 (so a normal float64 or 0; a value with bits further down is
    left to the default rule), else None: the one test of "is this exact input a binary
    float64" that a proved tolerance asks (verify's inputs and the blocked check's).

    ``numerators``: integers (an int array), or an object array of ints and ``Fraction``
    (each over its own denominator too); ``denominator``: a positive int.

    >>> binary64([2 ** 60, 3]).tolist(), binary64([1], 2 ** 1000).tolist() == [2.0 ** -1000]
    ([1.152921504606847e+18, 3.0], True)
    >>> binary64([2 ** 60 + 1]), binary64([1], 3), binary64([Fraction(3, 2 ** 1023)])
    (None, None, None)
    """
    import numpy as np
    a, k = np.asarray(numerators), denominator.bit_length() - 1
    if denominator < 1 or denominator & (denominator - 1):
        return None
    if a.dtype.kind == "i" and k <= 1022:      # fixed width: a round trip through float64
        f = a.astype(np.float64)
        return np.ldexp(f, -k) if np.array_equal(np.where(f == 2.0 ** 63, 0.0, f).astype(
            np.int64), a) else None
    out = []
    for x in a.reshape(-1).tolist():
        if type(x) not in (int, Fraction):
            return None
        n, d = x.numerator, x.denominator * denominator
        m, e = abs(n), d.bit_length() - 1
        low = (m & -m).bit_length() - 1         # the lowest bit set (-1 for 0)
        if m and (d & (d - 1) or (m >> low).bit_length() > 53 or low - e < -1022
                  or m.bit_length() - e > 1024):
            return None
        out.append(math.ldexp(n >> low, low - e) if m else 0.0)
    return np.array(out, dtype=np.float64).reshape(a.shape)
