"""Comparing a float result with the exact one: in ULPs of a dtype, or within rtol/atol.

One module, two modes, one rule for hard failures.

* ULPs (``exactattn verify``): :func:`judge` counts the floats of the dtype
  between the result and the correctly rounded exact value (0 = correctly
  rounded; +0 and -0 are one float), the error in ULPs at the size of the
  terms the output adds up (``sum_j shares_ij |value_jc|``) and the relative
  error ``|got - exact| / |exact|``; an entry passes when either count is
  within ``max_ulps``.
* rtol/atol (:mod:`exactattn.properties`): a :class:`Tolerance` passes
  ``got`` against an exact ``want`` when ``|got - want| <= atol + rtol * M``
  (``M`` the largest ``|value|`` of the output column, 1 for shares); two
  results of one function agree within twice that.  :func:`tolerance_for`
  takes rtol and atol from the dtype the function returned (:data:`TOLERANCES`).

Hard failures (:func:`hard`), in both modes: NaN or infinity where the exact
value is finite (and rounds to a finite float), and a number where the
policy's exact answer is NaN.

>>> tolerance_for("float32").describe()
'rtol=1e-05, atol=1e-06 from float32'
>>> within(0.7310586, Fraction(7310585786, 10**10), 1, tolerance_for("float32"))
True
>>> hard(float("nan"), 0.5), hard(float("inf"), float("inf")), hard(0.5, float("nan"))
(True, False, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

from ..digits import MAX_PREC, tighten, working_precision
from ..errors import InputError
from ..exponents import fmpq_of
from ..numbers.formats import FloatFormat, round_to_format, ulps_between

__all__ = ["Judgement", "TOLERANCES", "Tolerance", "agree", "at_least", "at_most",
           "check_tolerance", "errors", "hard", "is_exact", "judge", "tolerance_for", "within"]

TOLERANCES = {  # dtype -> (rtol, atol)
    "float64": (1e-12, 1e-12),
    "float32": (1e-5, 1e-6),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
}


def hard(got: float, want: float) -> bool:
    """A hard failure: NaN or infinity where ``want`` (the exact value, rounded) is not, or a number where it is NaN."""
    if math.isnan(want):
        return not math.isnan(got)
    return math.isnan(got) or (math.isinf(got) and got != want)


# --------------------------------------------------------------------------- rtol / atol
def check_tolerance(name: str, value) -> float | None:
    """An rtol or atol as given: None, or a non-negative finite number (as a float)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 \
            or not math.isfinite(value):
        raise InputError(f"{name} must be a non-negative finite number (got {value!r})")
    return float(value)


@dataclass(frozen=True)
class Tolerance:
    """``|got - want| <= atol + rtol * M``: the tolerance and where it came from (``dtype`` or given)."""

    rtol: float
    atol: float
    dtype: str = "float64"
    given: bool = False

    def bound(self, M) -> float:
        """How far a result may be from the exact value in a column of magnitude ``M``."""
        return self.atol + self.rtol * float(M)

    def describe(self) -> str:
        src = "given" if self.given else f"from {self.dtype}"
        return f"rtol={self.rtol:g}, atol={self.atol:g} {src}"


def tolerance_for(returned: str, requested: str = "float64", rtol: float | None = None,
                  atol: float | None = None) -> Tolerance:
    """The tolerance of a result returned in dtype ``returned`` from inputs in ``requested``.

    The looser of the two dtypes' :data:`TOLERANCES` (float32 inputs upcast
    to float64 still carry float32's rounding; an unknown dtype counts as
    float64); ``rtol``/``atol``, when given, replace the dtype's.

    Raises:
        InputError: a negative or non-finite ``rtol`` or ``atol``.

    >>> tolerance_for("float64", "float16")
    Tolerance(rtol=0.01, atol=0.001, dtype='float16', given=False)
    """
    rtol, atol = check_tolerance("rtol", rtol), check_tolerance("atol", atol)
    default = TOLERANCES["float64"]
    if TOLERANCES.get(returned, default) < TOLERANCES.get(requested, default):
        returned = requested
    r, a = TOLERANCES.get(returned, default)
    return Tolerance(r if rtol is None else rtol, a if atol is None else atol, returned,
                     rtol is not None and atol is not None)


def within(got: float, want, M, tol: Tolerance) -> bool:
    """``got`` is within ``tol`` of the exact ``want`` (any exact number) in a column of size ``M``.

    Never on a hard failure (:func:`hard`); NaN where the exact answer is NaN passes.
    """
    w = float(want)
    if math.isnan(w):
        return math.isnan(got)
    return not hard(got, w) and abs(got - w) <= tol.bound(M)


def agree(a: float, b: float, M, tol: Tolerance) -> bool:
    """Two results of one function agree: both finite, within twice the tolerance."""
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= 2 * tol.bound(M)


def at_least(got: float, lo, M, tol: Tolerance) -> bool:
    return math.isfinite(got) and got >= float(lo) - tol.bound(M)


def at_most(got: float, hi, M, tol: Tolerance) -> bool:
    return math.isfinite(got) and got <= float(hi) + tol.bound(M)


# --------------------------------------------------------------------------- ULPs
#: a relative error below this prints as 0.0 (a float64 cannot hold it)
_TINY = Fraction(1, 2 ** 1100)


@dataclass(frozen=True)
class Judgement:
    """One output judged in ULPs: ``ok``, ``over`` or ``hard``, and the errors measured.

    ``ulps``: floats of the dtype between the result (rounded to the dtype
    when it was not one, ``off_format``) and the correctly rounded exact
    value; ``terms_ulps``: ``|got - exact|`` in ULPs at the terms' magnitude;
    ``rel``: ``|got - exact| / |exact|`` (0.0 when ``got`` is exact).  None
    where not measured (hard failures, NaN answers).  ``undecided``: the exact value
    may be the midpoint of the result and its neighbour, so both count as exact.
    """

    status: str
    ulps: int | None = None
    rel: float | None = None
    terms_ulps: float | None = None
    off_format: bool = False
    undecided: bool = False


def _error(got: float, ball, exact: Callable):
    """``got - exact`` and ``exact`` as ``arb`` balls tight enough for 3 significant digits.

    The block's ball is used when it is tight enough; else the exact value is
    enclosed again at doubled precision (:func:`tighten`) until the relative
    error is known to a thousandth of itself, or known to be below 2**-1100.
    ``got`` must differ from the exact value (see :func:`is_exact`).
    """
    from flint import arb
    tiny = arb(fmpq_of(_TINY))

    def settled(x):
        err = arb(got) - x
        rel = abs(err / x)
        if rel.rad() * 1024 <= rel.mid() or rel < tiny:
            return err, x
        return None
    with working_precision(96):
        found = settled(ball)
    return found or tighten(lambda p: settled(exact().ball(p)), 128, max_prec=1 << 16) \
        or (arb(0), ball)


def is_exact(got: float, ball, exact: Callable) -> bool:
    """True when ``got`` is the exact value itself (asked of ``exact()`` only when the
    enclosure ``ball`` allows it, so a rational output computed without error reads 0, not 2e-29)."""
    from flint import arb
    if ball is None or not math.isfinite(got):
        return False
    with working_precision(96):
        if not ball.contains(arb(got)):
            return False
    try:
        return exact() == Fraction(got)
    except InputError:      # a certified value its enclosures cannot tell from got: not proven
        return False


def errors(got: float, ball, magnitude: float, fmt: FloatFormat,
           exact: Callable) -> tuple[float, float]:
    """``(relative error, error in ULPs at the terms)`` of ``got`` against the exact value.

    ``ball`` encloses the exact value, ``exact()`` gives it (an ``ExpRatio``)
    when the ball is not tight enough.  The relative error is ``|got - exact|
    / |exact|``; the error at the terms is ``|got - exact|`` in ULPs of the
    dtype at the terms' magnitude ``sum_j shares |values|``: equal to the
    plain ULP error, up to rounding, when no cancellation happens (all values
    of one sign); smaller when the output is a small difference of large
    terms, where the plain count says nothing about the kernel.  Both are 0.0
    when ``got`` is the exact value, infinite when it is not finite.
    """
    if not math.isfinite(got):
        return math.inf, math.inf
    if is_exact(got, ball, exact):
        return 0.0, 0.0
    if ball.rad() == 0 and ball.mid() == 0:      # the exact value is 0
        rel, size = math.inf, abs(got)
    else:
        err, x = _error(got, ball, exact)
        with working_precision(96):
            rel, size = float(abs(err / x).mid()), float(abs(err).mid())
    if magnitude <= 0:
        return rel, math.inf
    e = max(math.frexp(magnitude)[1] - 1, fmt.emin)
    return rel, size / math.ldexp(1.0, e - fmt.precision + 1)


def undecided_tie(got: float, rounded: float, ball, dtype) -> bool:
    """True when the exact value may be the midpoint of ``got`` and ``rounded`` (neighbours):
    ``ball`` (not a point) still holds that midpoint, so the rounding was not decided."""
    from flint import arb
    if ball is None or not (math.isfinite(got) and math.isfinite(rounded)) or got == rounded:
        return False
    if ulps_between(got, rounded, dtype) != 1:
        return False
    mid = (Fraction(got) + Fraction(rounded)) / 2
    with working_precision(MAX_PREC):
        return ball.rad() != 0 and ball.contains(arb(fmpq_of(mid)))


def judge(got: float, rounded: float, ball, magnitude: float, fmt: FloatFormat,
          exact: Callable, max_ulps: int) -> Judgement:
    """One output against the exact value ``rounded`` to ``fmt`` (NaN: the policy's answer is NaN).

    ``ball`` encloses the exact value, ``exact()`` gives it, ``magnitude`` is
    the size of its terms.  Hard (:func:`hard`) before anything is counted;
    else ``ok`` when the ULP count or the count at the terms is within
    ``max_ulps``, ``over`` when neither is.  Where the exact value may be the midpoint
    of two floats (a rotary or soft-capped output no enclosure decided,
    :func:`undecided_tie`), either neighbour counts as the exact rounding
    (``undecided``).

    >>> from flint import arb
    >>> from exactattn.numbers.formats import float_format
    >>> judge(0.5, 0.5, arb(0.5), 0.5, float_format("float32"), lambda: Fraction(1, 2), 4)
    Judgement(status='ok', ulps=0, rel=0.0, terms_ulps=0.0, off_format=False, undecided=False)
    """
    if math.isnan(rounded):
        return Judgement("ok" if math.isnan(got) else "hard")
    if hard(got, rounded):
        return Judgement("hard", rel=math.inf if math.isinf(got) else None)
    gf = round_to_format(Fraction(got), fmt) if math.isfinite(got) else got
    if undecided_tie(gf, rounded, ball, fmt):
        return Judgement("ok", 0, 0.0, 0.0, gf != got, undecided=True)
    u = ulps_between(gf, rounded, fmt)
    rel, t = errors(got, ball, magnitude, fmt, exact)
    return Judgement("ok" if u <= max_ulps or t <= max_ulps else "over", u, rel, t, gf != got)
