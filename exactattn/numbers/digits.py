"""Certified decimals: every printed digit is the correctly rounded one.

A value is printed at ``places`` decimal places, rounded to nearest.  Exact
rationals are rounded exactly, with ties going to the even last digit (the
rule of IEEE 754 and Python's ``round``).  Every other value exactactn prints
(a share or an output that is not rational) is transcendental, so it never
sits on a rounding boundary: we enclose it in an ``arb`` ball, round both ends
of the ball, and if they disagree we double the working precision and redo the
enclosure (Ziv's strategy) until they agree.  The digits never come from a
binary float.

Possible issues: ``arb.str``, sympy ``N(x, 4)``, mpmath ``nstr`` and ``%.4f``
all print a wrong last digit for a value within 1e-25 of a boundary; they are
not used here.

>>> round_fraction(Fraction(1, 8), 2)      # a tie: to even
'0.12'
>>> round_fraction(Fraction(-2, 3), 4)
'-0.6667'
>>> from flint import arb
>>> certify(lambda prec: arb(2).sqrt(), 4)
'1.4142'
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import Callable

from ..errors import InputError, Undecided, too_long_to_write
from ..options import check_places     # a number of decimal places, named "digits"

__all__ = ["certify", "decide", "tighten"]

START_PREC = 64
MAX_PREC = 1 << 16
SIDED_PREC = 1 << 10


def format_scaled(k: int, places: int) -> str:
    """Format the integer k / 10**places as a decimal string (no negative zero)."""
    sign = "-" if k < 0 else ""
    k = abs(k)
    digits = _int_text(k)
    if places == 0:
        return f"{sign}{digits}"
    digits = digits.rjust(places + 1, "0")
    return f"{sign}{digits[:-places]}.{digits[-places:]}"


def fraction_text(q) -> str:
    """``str(q)`` of a ``Fraction`` or int of any size (``'3/4'``, ``'-2'``), never hitting
    Python's int-to-str digit limit.

    >>> fraction_text(Fraction(-3, 4)), len(fraction_text(Fraction(1, 10 ** 5000)))
    ('-3/4', 5003)
    """
    q = Fraction(q)
    sign = "-" if q < 0 else ""
    num = _int_text(abs(q.numerator))
    return sign + num if q.denominator == 1 else f"{sign}{num}/{_int_text(q.denominator)}"


def _int_text(k: int) -> str:
    """``str(k)`` for any size: past Python's int-to-str digit limit, python-flint writes it.

    >>> len(_int_text(10 ** 5000))
    5001
    """
    if not too_long_to_write(k):
        return str(k)
    from flint import fmpz
    return str(fmpz(k))


def round_fraction(q: Fraction, places: int) -> str:
    """Round an exact rational to ``places`` decimals (ties to even).

    >>> round_fraction(Fraction(25, 8), 4)
    '3.1250'
    """
    check_places(places)
    return format_scaled(round(Fraction(q) * 10 ** places), places)  # exact, half-even


def format_exact(q: Fraction) -> str | None:
    """The exact decimal of a rational when it terminates, else None.

    >>> format_exact(Fraction(25, 16)), format_exact(Fraction(1, 3))
    ('1.5625', None)
    """
    q = Fraction(q)
    places = terminating_places(q.denominator)
    return None if places is None else format_scaled(int(q * 10 ** places), places)


@lru_cache(maxsize=4096)
def terminating_places(den: int) -> int | None:
    """The places of the exact decimal of ``p/den`` (p coprime to den), None if it repeats.

    >>> terminating_places(16), terminating_places(3)
    (4, None)
    """
    twos = fives = 0
    while den % 2 == 0:
        den //= 2
        twos += 1
    while den % 5 == 0:
        den //= 5
        fives += 1
    return max(twos, fives) if den == 1 else None


def arb_to_fraction(x) -> Fraction:
    """The exact value of an exact (radius 0) arb, e.g. ``x.lower()``."""
    man, exp = x.man_exp()
    man, exp = int(man), int(exp)
    return Fraction(man * 2 ** exp) if exp >= 0 else Fraction(man, 2 ** -exp)


def working_precision(prec: int):
    """A context manager setting python-flint's arb working precision to ``prec`` bits.

    python-flint's own ``ctx.workprec``, restoring the previous precision on exit.
    """
    from flint import ctx
    return ctx.workprec(prec)


def decide(ball, places: int) -> int | None:
    """``round(value * 10**places)`` when the enclosure ``ball`` decides it, else None.

    The one rounding decision of :func:`certify` for a single ``arb`` ball, without
    raising and without the precision loop: for callers that enclose many values at
    once and send only the undecided ones on to :func:`certify` (or an exact path).
    Works on the ball with arb's own exact floor, so a tiny share such as
    exp(-10**9) costs no more than 0.5 (no Fraction of a billion bits is built).
    A ball whose lower end sits exactly on a rounding boundary is undecided
    unless the ball is a point, in which case the tie goes to the even integer.

    >>> from flint import arb
    >>> decide(arb(2).sqrt(), 4), decide(arb("0.12345 +/- 0.001"), 4) is None
    (14142, True)
    """
    from flint import arb, fmpq
    if not ball.is_finite():
        return None
    z = ball * (10 ** places) + arb(fmpq(1, 2))
    lo, hi = z.lower(), z.upper()
    k_lo, k_hi = lo.floor(), hi.floor()
    if not (k_lo.is_exact() and k_hi.is_exact()):
        return None
    k = int(k_lo.unique_fmpz())
    if k != int(k_hi.unique_fmpz()):
        return None
    if lo.is_integer():  # the lower end is exactly a boundary (value*10^p = k - 1/2)
        if not z.is_exact():
            return None
        return k if k % 2 == 0 else k - 1  # an exact tie: to even
    return k


def tighten(step: Callable[[int], object], prec: int, *, max_prec: int | None = None):
    """Ziv's loop, the one in the package: ``step(p)`` at p = prec, 2 prec, ... (each under
    ``working_precision(p)``).

    Returns the first result that is not None, or None once ``p`` passes
    ``max_prec`` (no limit when None: only for values a tighter enclosure
    always decides, such as a transcendental number against a float format).

    >>> tighten(lambda p: p if p >= 256 else None, 64)
    256
    >>> tighten(lambda p: None, 64, max_prec=128) is None
    True
    """
    while max_prec is None or prec <= max_prec:
        with working_precision(prec):
            got = step(prec)
        if got is not None:
            return got
        prec *= 2
    return None



def enclosure_sign(ball: Callable[[int], object], what: Callable[[], str], *,
                   bounded: bool = True) -> int:
    """The sign of a value from its enclosures ``ball(prec)``: -1 or 1 (0 once an enclosure
    is exactly 0: a hidden key's entry, a recipe that cancels).

    ``bounded``: stop at :data:`MAX_PREC` bits and raise :class:`~exactattn.errors.Undecided`
    naming ``what()`` (for values no theorem keeps off 0: rotary and soft-capped forms);
    unbounded only for values proven non-zero (an algebraic number, an exponential
    polynomial with algebraic exponents).

    >>> from flint import arb
    >>> enclosure_sign(lambda prec: arb(2).sqrt() - 1, lambda: "sqrt(2) - 1")
    1
    """
    def step(prec):
        b = ball(prec)
        return 0 if b.is_zero() else 1 if b > 0 else -1 if b < 0 else None
    s = tighten(step, 64, max_prec=MAX_PREC if bounded else None)
    if s is None:
        raise Undecided(what(), MAX_PREC)
    return s


def certify(ball: Callable[[int], object], places: int, *,
            compare: Callable[[Fraction], int] | None = None) -> str:
    """Correctly rounded decimal of an irrational value given by enclosures (Ziv's strategy).

    ``ball(prec)`` must return an ``arb`` enclosing the value when computed at
    ``prec`` bits; the precision doubles until both ends of the ball round
    alike.  ``compare(q)`` (optional) returns the exact sign of ``value - q``
    for a rational q: once the enclosure (at ``SIDED_PREC`` bits or more) is
    narrower than the decimal grid but still astride a boundary, the rounding
    is decided by the exact side of the boundaries around it, so a value
    within ``e**-45000`` of a boundary costs no more than any other.  (A huge
    value, 10**1000, first needs enough bits for its last printed place: the
    precision keeps doubling until the ball is narrower than the grid.)

    Raises:
        InputError: the rounding could not be decided up to ``MAX_PREC`` bits (no
            ``compare`` given).
    """
    check_places(places)
    scale = 10 ** places

    def step(prec: int):
        b = ball(prec)
        k = decide(b, places)
        if k is not None or compare is None or prec < SIDED_PREC or not b.is_finite() \
                or not b.rad() * scale < 1:
            return k
        # narrow against the grid, yet astride a boundary: k with (k - 1/2) < value * scale
        # < (k + 1/2) from the exact sides (the guess is within one; the value is on none)
        k = round(arb_to_fraction(b.mid()) * scale)
        while True:
            if compare(Fraction(2 * k - 1, 2 * scale)) <= 0:
                k -= 1
            elif compare(Fraction(2 * k + 1, 2 * scale)) >= 0:
                k += 1
            else:
                return k
    k = tighten(step, START_PREC, max_prec=MAX_PREC)
    if k is None:
        raise InputError(
            f"value could not be rounded to {places} places from enclosures "
            f"up to {MAX_PREC} bits; it may be an exact tie, pass its exact form")
    return format_scaled(k, places)
