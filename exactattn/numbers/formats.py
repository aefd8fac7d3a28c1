"""Binary float formats: rounding exact values into them, ULP distances, their text forms.

A format has ``precision`` p bits (hidden bit included) and exponents
``emin .. emax``: float64 53, float32 24, float16 11, bfloat16 8.
:func:`round_to_format` rounds an exact value (a ``Fraction`` or an exact
``arb``) to the nearest float of the format, ties to even, with gradual
underflow (subnormals) and overflow to infinity, on the exact binary value
with integer arithmetic (IEEE 754-2019 sec. 4.3.1, roundTiesToEven).
:func:`round_ball` rounds both ends of an enclosure and says whether they
agree; :func:`tighten` is the one precision-doubling loop (Ziv 1991) verify
uses around it.  :func:`ulps_between` counts the floats between two floats.

This is the only place exactattn rounds to an IEEE format.

>>> round_to_format(Fraction(1, 3), FORMATS["bfloat16"])
0.333984375
>>> ulps_between(1.0, 1.0 + 2**-23, "float32")
1
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from .exact import fmpq_of
from .digits import MAX_PREC, arb_to_fraction, certify, tighten, working_precision
from ..errors import InputError
from ..options import MAX_PLACES, check_choice, check_whole

__all__ = ["round_to_format", "ulp_index"]


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: ``precision`` bits (hidden bit included), exponents emin..emax."""

    name: str
    precision: int
    emin: int
    emax: int


FORMATS = {
    "float64": FloatFormat("float64", 53, -1022, 1023),
    "float32": FloatFormat("float32", 24, -126, 127),
    "float16": FloatFormat("float16", 11, -14, 15),
    "bfloat16": FloatFormat("bfloat16", 8, -126, 127),
}
DTYPES = tuple(FORMATS)


def float_format(dtype: str | FloatFormat) -> FloatFormat:
    """The :class:`FloatFormat` of a dtype name (a format is returned as it is).

    >>> float_format("float8")
    Traceback (most recent call last):
    ...
    exactattn.errors.InputError: dtype must be one of float64, float32, float16, bfloat16 (got 'float8')
    """
    if isinstance(dtype, FloatFormat):
        return dtype
    return FORMATS[check_choice(dtype, "dtype", DTYPES)]


def _round_scaled(man: int, exp: int, den: int, fmt: FloatFormat) -> float:
    """Round |man| * 2**exp / den (den odd or 1) to ``fmt``; sign from man."""
    sign = -1.0 if man < 0 else 1.0
    man = abs(man)
    if man == 0:
        return 0.0 * sign
    # e = floor(log2(man * 2**exp / den)): the bit-length estimate or one less
    e = man.bit_length() - den.bit_length() + exp
    t = exp - e
    if (man << t if t >= 0 else man) < (den if t >= 0 else den << -t):
        e -= 1
    if e > fmt.emax:
        return math.inf * sign
    if e < fmt.emin - fmt.precision - 1:           # below half the smallest subnormal
        return 0.0 * sign
    E = max(e, fmt.emin)
    q = E - fmt.precision + 1                      # the exponent of one ULP
    # k = round(man * 2**(exp - q) / den), ties to even, exactly
    shift = exp - q
    num, dd = (man << shift, den) if shift >= 0 else (man, den << -shift)
    k, rem = divmod(num, dd)
    if 2 * rem > dd or (2 * rem == dd and k & 1):
        k += 1
    if E > fmt.emax or (k >= 2 ** fmt.precision and E + 1 > fmt.emax):
        return math.inf * sign
    return sign * math.ldexp(k, q)


def round_to_format(value, dtype: str | FloatFormat) -> float:
    """The float of ``dtype`` nearest to an exact value (ties to even), as a Python float.

    ``value`` is a ``Fraction`` (or int) or an exact ``arb`` (radius 0).  The
    result is exactly that float of the format (every float16, bfloat16 and
    float32 is also a float64); ``inf`` past the overflow threshold, signed
    zero below half the smallest subnormal.

    Raises:
        InputError: an unknown dtype.

    >>> round_to_format(Fraction(1, 10), "float32")
    0.10000000149011612
    >>> round_to_format(Fraction(65520), "float16"), round_to_format(Fraction(65519), "float16")
    (inf, 65504.0)
    >>> round_to_format(Fraction(3, 2**26), "float16")    # a subnormal tie, to even
    5.960464477539063e-08
    """
    fmt = float_format(dtype)
    if type(value).__name__ == "arb":
        man, exp = value.mid().man_exp()
        return _round_scaled(int(man), int(exp), 1, fmt)
    q = value if isinstance(value, Fraction) else Fraction(value)
    return _round_scaled(q.numerator, 0, q.denominator, fmt)


def round_ball(ball, dtype: str | FloatFormat, prec: int) -> float | None:
    """The float both ends of an ``arb`` ball round to, or None if they differ (or it is not finite).

    The ends are taken at ``prec`` bits (rounded outwards), so ``prec`` must
    be the precision the ball was computed at.

    >>> from flint import arb
    >>> round_ball(arb(1) / 3, "float32", 64), round_ball(arb(1, 2**-20), "float32", 64)
    (0.3333333432674408, None)
    """
    fmt = float_format(dtype)
    if not ball.is_finite():
        return None
    if ball.rad() == 0:
        return round_to_format(ball, fmt)
    with working_precision(prec):
        lo_m, lo_e = ball.lower().man_exp()
        hi_m, hi_e = ball.upper().man_exp()
    lo = _round_scaled(int(lo_m), int(lo_e), 1, fmt)
    hi = _round_scaled(int(hi_m), int(hi_e), 1, fmt)
    if lo == hi and (lo != 0 or math.copysign(1, lo) == math.copysign(1, hi)):
        return lo
    return None


def ulp_index(x: float, dtype: str | FloatFormat) -> int:
    """The position of a float of ``dtype`` on the number line: ..., -1, 0 (+-0), 1 (smallest subnormal), ...

    Infinity is one past the largest finite float.

    Raises:
        InputError: NaN, or a value that is not a float of ``dtype``.

    >>> ulp_index(1.0, "bfloat16") - ulp_index(0.99609375, "bfloat16")
    1
    """
    fmt = float_format(dtype)
    if math.isnan(x):
        raise InputError("x must not be NaN for an ULP count (got nan)")
    p = fmt.precision
    if math.isinf(x):
        idx = (fmt.emax + 1 - fmt.emin) * 2 ** (p - 1) + 2 ** (p - 1)
        return idx if x > 0 else -idx
    a = abs(x)
    if a == 0:
        return 0
    _, e = math.frexp(a)
    E = max(e - 1, fmt.emin)
    k = math.ldexp(a, p - 1 - E)
    if k != int(k) or E > fmt.emax:
        raise InputError(f"x must be a {fmt.name} value (got {x!r})")
    idx = (E - fmt.emin) * 2 ** (p - 1) + int(k)
    return idx if x > 0 else -idx


def ulp_indices(x, dtype: str | FloatFormat):
    """:func:`ulp_index` of every entry of a float64 array: ``(indices, valid)``, int64
    indices and a bool array that is False where an entry is NaN, infinite or not a float
    of ``dtype`` (its index there is 0 and means nothing).

    >>> import numpy as np
    >>> idx, ok = ulp_indices(np.array([1.0, -0.0, 0.1, 2.0**-149]), "float32")
    >>> idx.tolist(), ok.tolist()
    ([1065353216, 0, 0, 1], [True, True, False, True])
    """
    import numpy as np
    fmt = float_format(dtype)
    p = fmt.precision
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    finite = np.isfinite(a)
    a = np.where(finite, a, 0.0)
    _, e = np.frexp(a)
    E = np.maximum(e.astype(np.int64) - 1, fmt.emin)
    k = np.ldexp(a, (p - 1 - E).astype(np.int32))
    valid = finite & (k == np.floor(k)) & (E <= fmt.emax)
    idx = np.where(a == 0, 0, ((E - fmt.emin) << (p - 1)) + np.where(valid, k, 0).astype(np.int64))
    idx = np.where(valid, np.where(x < 0, -idx, idx), 0)
    return idx, valid


def ulp_unit(magnitudes, fmt: FloatFormat):
    """One ULP of ``fmt`` at ``magnitudes`` (a float, or each entry of a float64 array):
    ``2^(e - p + 1)`` with ``e`` the binade's exponent, at least ``fmt.emin``: the unit of
    every count at the terms.  A float is worked in ``math`` (numpy on one value is far slower).

    >>> import numpy as np
    >>> half = FORMATS["float16"]
    >>> ulp_unit(1.5, FORMATS["float32"]), ulp_unit(np.array([3.0, 0.0]), half).tolist()
    (1.1920928955078125e-07, [0.001953125, 0.00048828125])
    """
    if isinstance(magnitudes, (int, float)):
        return math.ldexp(1.0, max(math.frexp(magnitudes)[1] - 1, fmt.emin) - fmt.precision + 1)
    import numpy as np
    _, e = np.frexp(magnitudes)
    return np.ldexp(1.0, (np.maximum(e.astype(np.int64) - 1, fmt.emin)
                          - fmt.precision + 1).astype(np.int32))


def round_array(x, dtype: str | FloatFormat):
    """Every entry of a float64 array rounded to the nearest float of ``dtype`` (ties to even,
    subnormals, overflow to infinity), as float64: :func:`round_to_format` over an array.

    >>> import numpy as np
    >>> round_array(np.array([1 + 2.0**-8, 1 + 3 * 2.0**-9, 2.0**-134]), "bfloat16").tolist()
    [1.0, 1.0078125, 0.0]
    >>> round_array(np.array([65519.0, -65520.0]), "float16").tolist()
    [65504.0, -inf]
    """
    import numpy as np
    fmt = float_format(dtype)
    p = fmt.precision
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    finite = np.isfinite(a)
    _, e = np.frexp(np.where(finite, a, 0.0))
    E = np.maximum(e.astype(np.int64) - 1, fmt.emin)
    shift = (p - 1 - E).astype(np.int32)
    y = np.ldexp(np.rint(np.ldexp(np.where(finite, a, 0.0), shift)), -shift)
    largest = math.ldexp(2 - 2.0 ** (1 - p), fmt.emax)
    y = np.where(finite, np.where(y > largest, np.inf, y), a)
    return np.copysign(y, x)


def round_enclosures(mid, rad, dtype: str | FloatFormat, steps: int = 1):
    """Values known by float64 enclosures ``[mid - rad, mid + rad]`` correctly rounded to
    ``dtype`` where the enclosure decides it: ``(rounded, decided)``, float64 and bool arrays.

    Both ends, pushed ``steps`` float64s outwards (one covers the rounding of ``mid +- rad``),
    are rounded (:func:`round_array`; rounding is monotonic): an entry is decided when they
    round to one finite float and, where that is a zero, the enclosure lies on one side of 0
    (the zero takes its sign) or is the exact 0 (+0).

    >>> import numpy as np
    >>> r, ok = round_enclosures(np.array([0.1, 0.1, 0.0, -1e-300]),
    ...                          np.array([0.0, 0.01, 1e-300, 0.0]), "float32")
    >>> ok.tolist(), r[ok].tolist()
    ([True, False, False, True], [0.10000000149011612, -0.0])
    """
    import numpy as np
    with np.errstate(invalid="ignore", over="ignore"):
        lo, hi = mid - rad, mid + rad
        for _ in range(steps):
            lo, hi = np.nextafter(lo, -np.inf), np.nextafter(hi, np.inf)
        rounded = round_array(lo, dtype)
        same = (rounded == round_array(hi, dtype)) & np.isfinite(rounded) & np.isfinite(rad)
        # a zero takes the exact value's sign (an exact 0 is +0); a ball around 0 has none
        same &= (rounded != 0) | (below := mid + rad < 0) | (mid - rad > 0) | (mid == 0) & (rad == 0)
        rounded = np.where(rounded == 0, np.where(below, -0.0, 0.0), rounded)
    return rounded, same


def ulps_between(a: float, b: float, dtype: str | FloatFormat) -> int:
    """How many floats of ``dtype`` lie between a and b (0 when equal).

    >>> ulps_between(1.0, 1.0 + 2**-23, "float32"), ulps_between(-0.0, 0.0, "float32")
    (1, 0)
    """
    return abs(ulp_index(a, dtype) - ulp_index(b, dtype))


def default_max_ulps(dtype: str, n_keys: int, d_k: int, max_score: float = 0.0) -> int:
    """The default tolerance: ``2 * ceil(sqrt(S + d_k)) + 4 + ceil(max |scaled score|)`` ULPs.

    Rounding errors of a dot product of length d_k and of a sum of S
    exponentials grow like sqrt(length) on average (Higham 2002, sec. 3.1,
    "Probabilistic error analysis"); the 4 covers the exponential and the
    final division.  ``exp`` has condition number |x|: a scaled score x
    computed with a relative error of one unit moves ``exp(x)`` by about
    |x| half-ULPs, hence the last term (the largest |scale * score + mask| over
    visible pairs).  It is a reading aid, not a proof of a bound; the same
    number applies to both ULP counts of a verify entry.

    The result is at most the number of floats of the dtype (from minus to
    plus infinity): a larger tolerance would accept the same outputs, every
    finite one (a scaled score past the dtype's range, ``inf``, gives that).

    >>> default_max_ulps("float32", 512, 64), default_max_ulps("bfloat16", 2, 1, max_score=23.9)
    (52, 32)
    >>> default_max_ulps("float16", 2, 1, max_score=math.inf) == 2 * ulp_index(math.inf, "float16")
    True
    """
    most = 2 * ulp_index(math.inf, dtype)
    if not max_score < most:      # inf, or past every float: no finer tolerance means more
        return most
    return min(most, 2 * (math.isqrt(n_keys + d_k - 1) + 1) + 4 + math.ceil(max_score))


# ---------------------------------------------------------------- text forms
def shortest_repr(x: float, dtype: str | FloatFormat) -> str:
    """The shortest decimal that rounds back to the float ``x`` of ``dtype``.

    >>> shortest_repr(0.7310585975646973, "float32"), shortest_repr(0.333984375, "bfloat16")
    ('0.7310586', '0.334')
    """
    fmt = float_format(dtype)
    if not math.isfinite(x):
        return repr(x)
    for k in range(1, 18):
        text = f"{x:.{k}g}"
        if round_to_format(Fraction(text), fmt) == x:
            return text
    return repr(x)  # pragma: no cover


def certified_scientific(value, digits: int = 9) -> str:
    """An exact value (an ``ExpRatio``) to ``digits`` significant digits, correctly rounded.

    Written ``d.ddde+XX``; ``0`` for zero, ``nan`` for an empty row's NaN; ``|x|<1e-N`` for
    a value its enclosures up to MAX_PREC bits do not separate from 0 (the bound they certify).

    Raises:
        InputError: ``digits`` is not a whole number from 1 to 50.

    >>> from exactattn.numbers.softmax import SoftmaxRow
    >>> certified_scientific(SoftmaxRow([Fraction(100), Fraction(99)], None).share(0), 10)
    '7.310585786e-01'
    """
    check_whole(digits, "digits", low=1, high=MAX_PLACES)
    if value._nan():
        return "nan"
    q = value.rational()
    if q is not None:
        return scientific_text(*scientific_parts(q, digits), digits)
    from flint import arb

    def scaled(shift):      # compare: the exact sign of value - r / 10**shift
        return certify(lambda prec: value.ball(prec) * arb(10) ** shift, 0,
                       compare=lambda r: value._order(r / Fraction(10) ** shift))

    def exponent(prec):     # about log10 |value|, None while the enclosure holds 0
        b = value.ball(prec)
        return None if b.contains(0) else abs(b).log_base(10)
    # None past MAX_PREC bits: a rotary or soft-capped value no theorem keeps off 0, or one
    # whose every term is below exp(-MAX_PREC) (scores astronomically apart, whose
    # exponentials SoftmaxRow.exp_balls encloses by [0, 2^-K]: no precision short of the gap
    # itself would place its first digit): the bound its enclosure certifies
    got = tighten(exponent, 64, max_prec=MAX_PREC)
    if got is None:
        with working_precision(64):
            if (ball := value.ball(MAX_PREC)).is_zero():    # an enclosure exactly 0: the value is
                return "0"
            top = abs(ball).upper().log_base(10).upper()
        return f"|x|<1e{math.floor(float(top.mid())) + 1}"
    k = math.floor(float(got.mid()))     # off by at most one
    for _ in range(4):    # the first guess of the exponent is off by at most one
        text = scaled(digits - 1 - k)
        mant = text.lstrip("-")
        if mant == "1" + "0" * (digits - 1) and len(scaled(digits - k).lstrip("-")) == digits:
            k -= 1        # a guess one too high, rounded up to 10^k: the digits are below it
        elif len(mant) == digits:
            return scientific_text("-" if text.startswith("-") else "", int(mant), k, digits)
        else:
            k += 1 if len(mant) > digits else -1
    raise InputError(f"digits could not be placed for {value}")  # pragma: no cover


#: log10(2), for a first guess of a decimal exponent from bit lengths
LOG10_2 = 0.30102999566398120


def exponent10(x: Fraction) -> int:
    """``floor(log10 x)`` of a positive rational, exactly (no int-to-str of a long number).

    >>> exponent10(Fraction(999, 1000)), exponent10(Fraction(10) ** 5000)
    (-1, 5000)
    """
    e = int((x.numerator.bit_length() - x.denominator.bit_length()) * LOG10_2)
    while Fraction(10) ** e > x:
        e -= 1
    while Fraction(10) ** (e + 1) <= x:
        e += 1
    return e


def scientific_parts(q, digits: int) -> tuple[str, int, int]:
    """``(sign, k, e)`` with ``q`` correctly rounded (ties to even) to ``sign k 10^(e+1-digits)``.

    ``k`` has ``digits`` digits (or is ``10^digits`` after rounding up, which
    :func:`scientific_text` carries into the exponent); ``k = 0`` for zero.
    Exact integer arithmetic throughout, any length.

    >>> scientific_parts(Fraction(-2, 3), 4), scientific_parts(Fraction(0), 4)
    (('-', 6667, -1), ('', 0, 0))
    """
    q = Fraction(q)
    if q == 0:
        return "", 0, 0
    sign, x = ("-" if q < 0 else ""), abs(q)
    e = exponent10(x)
    return sign, round(x * Fraction(10) ** (digits - 1 - e)), e


def scientific_text(sign: str, k: int, e: int, digits: int, *, padded: bool = True) -> str:
    """The one spelling of ``sign k 10^(e+1-digits)`` (``k`` of ``digits`` digits) in
    scientific form: ``d.ddde+XX`` (``padded``: the exponent has two digits at least) or
    ``d.ddde+X``; ``k = 10^digits`` (rounded up) carries into the exponent; ``0`` for zero.

    >>> scientific_text("-", 6667, -1, 4), scientific_text("", 10, 0, 1, padded=False)
    ('-6.667e-01', '1e+1')
    """
    if k == 0:
        return "0"
    if k == 10 ** digits:
        k, e = k // 10, e + 1
    text = str(k)
    body = text[0] + ("." + text[1:] if len(text) > 1 else "")
    return f"{sign}{body}e{e:+03d}" if padded else f"{sign}{body}e{e:+d}"


def round_value(value, dtype, prec: int = 128):
    """One exact value rounded to ``dtype``: ``(float, ball)``; exactly when it is rational.

    ``value`` has ``rational()`` (a ``Fraction`` or None) and ``ball(prec)``:
    an :class:`~exactattn.numbers.softmax.ExpRatio` or a log-sum-exp.  An algebraic row's
    irrational value is never on a rounding boundary, so tightening ends.  Over
    rotary or soft-capped logits no theorem says so: past
    :data:`~exactattn.numbers.digits.MAX_PREC` bits the value may sit exactly on the midpoint
    of two floats, and the float nearest the ball's centre comes back with a ball that
    still holds the midpoint: :func:`~exactattn.verify.compare.judge` then counts both
    neighbours as the exact rounding (:func:`~exactattn.verify.compare.undecided_tie`).
    """
    from flint import arb
    q = value.rational()
    if q is not None:
        return round_to_format(q, dtype), arb(fmpq_of(q))

    row = getattr(value, "row", None)
    # an exact sign: not over rotary or soft-capped logits, where it comes from enclosures
    certified = getattr(value, "certified", row is not None and row.certified)
    sign = None if certified else getattr(value, "sign", None)

    def step(p):
        ball = value.ball(p)
        f = round_ball(ball, dtype, p)
        if f is None and sign is not None and ball.is_finite() and \
                round_ball(arb(ball.lower()), dtype, p) == 0 == \
                round_ball(arb(ball.upper()), dtype, p):
            # the ball holds 0 and both ends round to a zero: an exponentially small value
            # (a share below 2^-(prec+64) is enclosed by a ball around 0) rounds to the
            # zero of its exact sign, which no enclosure around 0 would ever decide
            f = math.copysign(0.0, sign())
        return None if f is None else (f, ball)
    if not certified:
        return tighten(step, prec)
    got = tighten(step, prec, max_prec=max(prec, MAX_PREC))
    if got is not None:
        return got
    with working_precision(MAX_PREC):
        ball = value.ball(MAX_PREC)
        return round_to_format(arb_to_fraction(ball.mid()), dtype), ball


def round_enclosed(ball, dtype, prec: int, exact, exact_prec: int):
    """``(float, ball)``: the float an enclosure at ``prec`` bits decides, else the exact value's.

    The one "bulk ball first, exact on failure" step: ``ball`` is rounded
    both ends (:func:`round_ball`); when they differ, ``exact()`` (an
    ``ExpRatio`` or a log-sum-exp) is rounded by :func:`round_value` from
    ``exact_prec`` bits, and its ball comes back instead of ``ball``.

    >>> from flint import arb
    >>> from exactattn.numbers.softmax import SoftmaxRow
    >>> third = SoftmaxRow([Fraction(0)] * 3, None).share(0)
    >>> round_enclosed(arb(1, 1), "float32", 64, lambda: third, 128)[0]
    0.3333333432674408
    """
    f = round_ball(ball, dtype, prec)
    return (f, ball) if f is not None else round_value(exact(), dtype, exact_prec)


def round_cells(cells, balls_at, exact, dtype, prec: int, out: tuple, *, max_prec: int,
                exact_prec: int, left: int = 0) -> None:
    """Cells of a block rounded to ``dtype``: whole blocks of balls first, then one by one.

    ``balls_at(p)`` encloses the whole block at ``p`` bits and returns the
    ball of a cell (None: the policy's NaN); the block is enclosed at
    ``prec``, ``2 prec``, ... up to ``max_prec`` bits until at most ``left``
    cells are undecided (:func:`round_ball`).  Those (rational ties and
    stragglers) are rounded from ``exact(cell)`` by :func:`round_value` at
    ``exact_prec`` bits.  Writes ``out = (rounded, balls)`` by cell (NaN, no ball).

    >>> import numpy as np
    >>> from flint import arb
    >>> rounded, balls = np.zeros(2), np.empty(2, dtype=object)
    >>> round_cells([(0,), (1,)], lambda p: lambda cell: None if cell == (1,) else arb(1) / 3,
    ...             lambda cell: 1 / 0, "float16", 64, (rounded, balls), max_prec=128,
    ...             exact_prec=256)
    >>> rounded.tolist(), balls[1]
    ([0.333251953125, nan], None)
    """
    fmt = float_format(dtype)
    rounded, balls = out
    todo = list(cells)

    def attempt(p):
        nonlocal todo
        ball_of = balls_at(p)
        undecided = []
        for cell in todo:
            ball = ball_of(cell)
            if ball is None:       # the policy's NaN row
                rounded[cell] = math.nan
                continue
            f = round_ball(ball, fmt, p)
            if f is None:
                undecided.append(cell)
                continue
            rounded[cell], balls[cell] = f, ball
        todo = undecided
        return True if len(todo) <= left else None
    tighten(attempt, prec, max_prec=max_prec)
    for cell in todo:              # rational ties and stragglers, one by one
        rounded[cell], balls[cell] = round_value(exact(cell), fmt, exact_prec)
