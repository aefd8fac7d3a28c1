"""The real numbers a logit can be: exact algebraic (:class:`Surd`) or certified (:class:`Certified`).

A plain scaled score is a rational, or ``a/sqrt(D)`` for an irrational divisor
sqrt(D).  The modifiers of today's attention add two more kinds:

* **exact algebraic**: ALiBi slopes such as ``2^(-1/2)`` (12- and 16-head
  models) or ``2^(-1/4)`` (24- and 32-head models).  A :class:`Surd` is
  ``p + sum_i a_i * atom_i`` with rational p, a_i and atoms ``1/sqrt(D)``
  (D rational, not a square) or ``2^f`` (f with a power-of-two denominator of
  at least 4; :class:`Pow2`).  Atoms are kept linearly independent over the
  rationals (``1/sqrt(8)`` is rewritten as ``(1/2)/sqrt(2)``), so a Surd is
  zero exactly when every coefficient is; its sign is then decided by
  enclosures, which always terminates.  (Independence: ``Q(2^(1/2^m))`` meets
  every multi-quadratic field only in ``Q(sqrt(2))``.)
* **certified transcendental**: soft-capped scores ``cap * tanh(s / cap)``
  and rotary-embedded (RoPE) scores.  A :class:`Certified` carries a
  structural key (equal keys mean equal values: tanh is injective, a rotation
  is a function of its angle) and enclosures; digits are certified from the
  enclosures, and nothing is decided by a tolerance.

>>> s = two_power(Fraction(-1, 2))            # an ALiBi slope of a 16-head model
>>> s.text(), s.decimal(6), s * 2 == two_power(Fraction(1, 2))
('1/sqrt(2)', '0.707107', True)
>>> two_power(Fraction(-3, 4)).text()
'(1/2)*2^(1/4)'
>>> softcap(Fraction(2), Fraction(1)).decimal(6)   # tanh(2)
'0.964028'
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Callable

from .errors import InputError
from .exact import rational_sqrt

__all__ = ["Certified", "Pow2", "Surd", "align", "atom_ball", "atom_ratio", "atom_text", "real_ball",
           "real_compare", "real_decimal", "real_sign", "softcap_ball", "real_text", "softcap", "sympy_ball",
           "two_power"]


class Pow2:
    """The atom ``2^f`` for ``0 < f < 1`` with a power-of-two denominator of 4 or more."""

    __slots__ = ("f",)

    def __init__(self, f: Fraction):
        d = f.denominator
        if not (0 < f < 1) or d < 4 or d & (d - 1):
            raise InputError(f"2^f atom needs 0 < f < 1 with denominator 4, 8, 16, ... (got {f})")
        self.f = f

    def __eq__(self, other) -> bool:
        return isinstance(other, Pow2) and other.f == self.f

    def __hash__(self) -> int:
        return hash(("Pow2", self.f))

    def __repr__(self) -> str:
        return f"Pow2({self.f})"


def atom_ball(atom):
    """An ``arb`` enclosure of an atom at the current precision."""
    from flint import arb, fmpq
    if isinstance(atom, Pow2):
        return arb(2) ** fmpq(atom.f.numerator, atom.f.denominator)
    return 1 / arb(fmpq(atom.numerator, atom.denominator)).sqrt()


def atom_text(atom) -> str:
    from .digits import fraction_text
    if isinstance(atom, Pow2):
        return f"2^({fraction_text(atom.f)})"
    return f"1/sqrt({fraction_text(atom)})"


def atom_ratio(x, y) -> Fraction | None:
    """r with ``x = r * y`` for atoms x, y, or None (independent atoms)."""
    if isinstance(x, Pow2) or isinstance(y, Pow2):
        return Fraction(1) if x == y else None
    return rational_sqrt(y / x)     # 1/sqrt(x) = sqrt(y/x) / sqrt(y)


def align(values) -> tuple[tuple, list]:
    """Surds (or rationals) written over one basis of independent atoms.

    Returns ``(basis, keys)`` where ``keys[i] = (p, a_1, ..., a_m)`` means
    ``p + sum a_k basis[k]``; equal keys are equal values and distinct keys
    distinct values (None stays None).

    >>> basis, keys = align([Surd(1, ((Fraction(2), 1),)), Surd(0, ((Fraction(8), 2),)), 3])
    >>> basis, [tuple(map(str, k)) for k in keys]
    ((Fraction(2, 1),), [('1', '1'), ('0', '1'), ('3', '0')])
    """
    basis: list = []
    rows = []
    for v in values:
        if v is None:
            rows.append(None)
            continue
        p, terms = (v.p, v.terms) if isinstance(v, (Surd, _Raw)) else (Fraction(v), ())
        coeffs: dict = {}
        for atom, a in terms:
            for k, b in enumerate(basis):
                r = atom_ratio(atom, b)
                if r is not None:
                    coeffs[k] = coeffs.get(k, 0) + a * r
                    break
            else:
                basis.append(atom)
                coeffs[len(basis) - 1] = Fraction(a)
        rows.append((p, coeffs))
    m = len(basis)
    return tuple(basis), [None if r is None else
                          (r[0], *(Fraction(r[1].get(k, 0)) for k in range(m))) for r in rows]


class Surd:
    """An exact real algebraic number ``p + sum_i a_i * atom_i``; behaves like ``Fraction``.

    ``terms`` is a tuple of ``(atom, a)``: an atom is a ``Fraction`` D (the
    atom ``1/sqrt(D)``) or a :class:`Pow2`.  Dependent atoms are merged on
    construction, so equality and sign are exact.

    >>> half = Surd(0, ((Fraction(2), Fraction(1)),))      # 1/sqrt(2)
    >>> half + half == Surd(0, ((Fraction(1, 2), 1),))               # 2/sqrt(2) = sqrt(2)
    True
    >>> half < Fraction(3, 4), half.sign()
    (True, 1)
    """

    __slots__ = ("p", "terms", "_hash")

    def __init__(self, p=0, terms: tuple = ()):
        self.p = Fraction(p)
        self._hash = None
        if len(terms) == 1:                    # one atom: nothing to merge
            (atom, a), = terms
            a = Fraction(a)
            self.terms = ((atom, a),) if a else ()
            return
        basis, (key,) = align([_Raw(terms)])   # merge dependent atoms
        self.terms = tuple((atom, a) for atom, a in zip(basis, key[1:]) if a)

    # -- structure --------------------------------------------------------
    def rational(self) -> Fraction | None:
        return self.p if not self.terms else None

    def __add__(self, other):
        if isinstance(other, Surd):
            return Surd(self.p + other.p, self.terms + other.terms)
        if isinstance(other, (int, Fraction)) and not isinstance(other, bool):
            return Surd(self.p + other, self.terms)
        return NotImplemented

    __radd__ = __add__

    def __mul__(self, other):
        if isinstance(other, (int, Fraction)) and not isinstance(other, bool):
            return Surd(self.p * other, tuple((t, a * other) for t, a in self.terms))
        return NotImplemented

    __rmul__ = __mul__

    def __neg__(self) -> "Surd":
        return self * -1

    def __sub__(self, other):
        return self + (-other)

    def __rsub__(self, other):
        return (-self) + other

    # -- exact sign and order ------------------------------------------------
    def ball(self, prec: int = 0):
        from flint import arb, fmpq
        x = arb(fmpq(self.p.numerator, self.p.denominator))
        for atom, a in self.terms:
            x += arb(fmpq(a.numerator, a.denominator)) * atom_ball(atom)
        return x

    def sign(self) -> int:
        """-1, 0 or 1, exactly (0 only when every coefficient is 0)."""
        if not self.terms:
            return (self.p > 0) - (self.p < 0)
        from .digits import tighten

        def step(prec):
            b = self.ball(prec)
            return 1 if b > 0 else -1 if b < 0 else None
        return tighten(step, 64)

    def _cmp(self, other) -> int:
        if isinstance(other, (int, Fraction, Surd)) and not isinstance(other, bool):
            return (self - other).sign()
        return NotImplemented

    def __eq__(self, other) -> bool:
        c = self._cmp(other)
        return NotImplemented if c is NotImplemented else c == 0

    def __lt__(self, other) -> bool:
        c = self._cmp(other)
        return NotImplemented if c is NotImplemented else c < 0

    def __le__(self, other) -> bool:
        c = self._cmp(other)
        return NotImplemented if c is NotImplemented else c <= 0

    def __gt__(self, other) -> bool:
        c = self._cmp(other)
        return NotImplemented if c is NotImplemented else c > 0

    def __ge__(self, other) -> bool:
        c = self._cmp(other)
        return NotImplemented if c is NotImplemented else c >= 0

    def __hash__(self) -> int:
        if self._hash is None:
            q = self.rational()
            self._hash = hash(q) if q is not None else hash(("Surd", self.decimal(30)))
        return self._hash

    # -- views ---------------------------------------------------------------
    def decimal(self, places: int) -> str:
        from .digits import certify, round_fraction
        q = self.rational()
        if q is not None:
            return round_fraction(q, places)
        return certify(self.ball, places, compare=self._cmp)

    def text(self) -> str:
        from .digits import fraction_text
        parts = []
        for atom, a in self.terms:
            t = atom_text(atom)
            if isinstance(atom, Pow2):
                body = t if abs(a) == 1 else f"({fraction_text(abs(a))})*{t}"
            elif abs(a).numerator == 1:
                n = abs(a).denominator
                body = f"1/sqrt({fraction_text(atom)})" if n == 1 else \
                    f"1/({n}*sqrt({fraction_text(atom)}))"
            elif abs(a).denominator == 1:
                body = f"{abs(a)}/sqrt({fraction_text(atom)})"
            else:
                body = f"({fraction_text(abs(a))})/sqrt({fraction_text(atom)})"
            parts.append(("-" if a < 0 else "+", body))
        if self.p or not parts:
            parts.append(("-" if self.p < 0 else "+", fraction_text(abs(self.p))))
        out = ("-" if parts[0][0] == "-" else "") + parts[0][1]
        for s, body in parts[1:]:
            out += f" {s} {body}"
        return out

    def sympy(self):
        import sympy
        x = sympy.Rational(self.p.numerator, self.p.denominator)
        for atom, a in self.terms:
            c = sympy.Rational(a.numerator, a.denominator)
            if isinstance(atom, Pow2):
                x += c * sympy.Integer(2) ** sympy.Rational(atom.f.numerator, atom.f.denominator)
            else:
                x += c / sympy.sqrt(sympy.Rational(atom.numerator, atom.denominator))
        return x

    def __float__(self) -> float:
        return float(self.decimal(20))

    def __repr__(self) -> str:
        return f"Surd({self.text()})"


class _Raw:
    """Unmerged terms, for :func:`align` inside ``Surd.__init__``."""

    __slots__ = ("p", "terms")

    def __init__(self, terms):
        self.p, self.terms = Fraction(0), tuple((t, Fraction(a)) for t, a in terms)


def two_power(r: Fraction):
    """``2^r`` exactly: a ``Fraction`` for whole r, else a :class:`Surd`.

    Raises:
        InputError: r's denominator is not a power of two.

    >>> two_power(Fraction(-3)), two_power(Fraction(-5, 2)).text()
    (Fraction(1, 8), '1/(4*sqrt(2))')
    """
    r = Fraction(r)
    d = r.denominator
    if d & (d - 1):
        raise InputError(f"2^r needs r with a power-of-two denominator (got r = {r})")
    whole = r.numerator // d
    f = r - whole
    base = Fraction(2) ** whole
    if f == 0:
        return base
    if d == 2:   # 2^(w + 1/2) = 2^w * sqrt(2) = 2^(w+1) / sqrt(2)
        return Surd(0, ((Fraction(2), base * 2),))
    return Surd(0, ((Pow2(f), base),))


# --------------------------------------------------------------------------- certified reals
class Certified:
    """A certified transcendental real: a structural ``key`` and an enclosure function.

    Equal keys mean equal values (the key names how the value was built from
    exact inputs by injective steps); distinct keys are compared by
    enclosures only.  ``ball(prec)`` returns an ``arb`` at the current
    working precision.

    >>> x = softcap(Fraction(5), Fraction(1)); x.text(), x == softcap(Fraction(5), Fraction(1))
    ('tanh(5)', True)
    """

    __slots__ = ("key", "_ball", "label")

    def __init__(self, key: Any, ball: Callable[[int], Any], label: str):
        self.key, self._ball, self.label = key, ball, label

    def ball(self, prec: int = 0):
        return self._ball(prec)

    def __eq__(self, other) -> bool:
        return isinstance(other, Certified) and other.key == self.key

    def __hash__(self) -> int:
        return hash(("Certified", self.key))

    def __add__(self, other):
        if other == 0 and not isinstance(other, Certified):
            return self
        if isinstance(other, (int, Fraction, Surd, Certified)) and not isinstance(other, bool):
            return Certified(("+", self.key, _key(other)),
                             lambda prec: self.ball(prec) + real_ball(other, prec),
                             f"{self.label} + {real_text(other)}")
        return NotImplemented

    __radd__ = __add__

    def text(self) -> str:
        return self.label

    def decimal(self, places: int) -> str:
        from .digits import certify
        return certify(self.ball, places)

    def __repr__(self) -> str:
        return f"Certified({self.label})"


def _key(x):
    if isinstance(x, Certified):
        return x.key
    if isinstance(x, Surd):
        return ("surd", x.p, x.terms)
    return ("q", Fraction(x))


def real_ball(x, prec: int = 0):
    """An enclosure of a rational, :class:`Surd` or :class:`Certified` at the current precision."""
    if isinstance(x, (Surd, Certified)):
        return x.ball(prec)
    from flint import arb, fmpq
    x = Fraction(x)
    return arb(fmpq(x.numerator, x.denominator))


def real_text(x) -> str:
    from .digits import fraction_text
    return x.text() if isinstance(x, (Surd, Certified)) else fraction_text(Fraction(x))


def real_sign(x) -> int:
    """The sign of a real: exact for rationals and Surds, from enclosures for Certified ones.

    Raises:
        InputError: a certified value whose enclosures contain 0 up to 2^16 bits.
    """
    if isinstance(x, Surd):
        return x.sign()
    if not isinstance(x, Certified):
        return (x > 0) - (x < 0)
    from .digits import MAX_PREC, tighten

    def step(prec):
        b = x.ball(prec)
        return 1 if b > 0 else -1 if b < 0 else None
    s = tighten(step, 64, max_prec=MAX_PREC)
    if s is None:
        raise InputError(f"the sign of {x.label} could not be certified below {MAX_PREC} bits")
    return s


def real_compare(x, y) -> int:
    """sign(x - y) for rationals, Surds and Certified reals.

    Exact unless a Certified value is involved; then equal structure gives 0
    and otherwise enclosures decide (to 2^16 bits).

    Raises:
        InputError: two certified values not separated below 2^16 bits.
    """
    if not isinstance(x, Certified) and not isinstance(y, Certified):
        return real_sign(x - y)
    if x == y:
        return 0
    return real_sign(Certified(("-", _key(x), _key(y)),
                               lambda prec: real_ball(x, prec) - real_ball(y, prec),
                               f"{real_text(x)} - ({real_text(y)})"))


def real_decimal(x, places: int) -> str:
    """Certified decimal of a rational, :class:`Surd` or :class:`Certified`."""
    if isinstance(x, (Surd, Certified)):
        return x.decimal(places)
    from .digits import round_fraction
    return round_fraction(Fraction(x), places)


def softcap(x, cap: Fraction):
    """``cap * tanh(x / cap)`` (Gemma 2's logit soft-capping) of an exact or certified x.

    tanh is injective, so the key is x's key: equal inputs give equal outputs.
    ``softcap(0)`` is exactly ``Fraction(0)`` (so it ties exactly with a 0 logit).
    """
    if not isinstance(x, (Surd, Certified)) and x == 0:
        return Fraction(0)
    from .digits import fraction_text
    arg = real_text(x) if cap == 1 else f"({real_text(x)})/{fraction_text(cap)}"
    label = f"tanh({arg})" if cap == 1 else f"{fraction_text(cap)}*tanh({arg})"
    return Certified(("softcap", cap, _key(x)),
                     lambda prec: softcap_ball(real_ball(x, prec), cap), label)


def softcap_ball(x, cap: Fraction):
    """``cap * tanh(x / cap)`` of an ``arb`` x, at the current working precision (the one
    soft-cap formula every enclosure uses)."""
    from flint import arb, fmpq
    c = arb(fmpq(cap.numerator, cap.denominator))
    return c * (x / c).tanh()


_SYMPY_FUNCTIONS = ("exp", "log", "sin", "cos", "tanh", "atan", "erf", "gamma")


def sympy_ball(e):
    """An ``arb`` enclosure of a closed sympy number, at the current working precision.

    The one reader of sympy constants into balls (the symbolic engine's
    decimals, the proofs): rationals, ``pi``, ``E``, ``+``, ``*``, powers
    (``sqrt`` exactly as a square root) and exp, log, sin, cos, tanh, atan,
    erf, gamma.

    Raises:
        InputError: anything else (a free symbol, an unknown function).

    >>> import sympy
    >>> from exactattn.digits import certify
    >>> certify(lambda prec: sympy_ball(sympy.E / (1 + sympy.sqrt(2))), 6)
    '1.125949'
    """
    import sympy
    from flint import arb, fmpq
    if e.is_Rational:
        return arb(fmpq(int(e.p), int(e.q)))
    if e is sympy.E:
        return arb(1).exp()
    if e is sympy.pi:
        return arb.pi()
    if e.is_Add or e.is_Mul:
        total = arb(0) if e.is_Add else arb(1)
        for a in e.args:
            total = total + sympy_ball(a) if e.is_Add else total * sympy_ball(a)
        return total
    if e.is_Pow:
        base, power = e.args
        if power.is_Integer:
            return sympy_ball(base) ** int(power)
        if power == sympy.Rational(1, 2):
            return sympy_ball(base).sqrt()
        return sympy_ball(base) ** sympy_ball(power)
    name = getattr(e.func, "__name__", None)
    if name in _SYMPY_FUNCTIONS and getattr(sympy, name) is e.func:
        return getattr(sympy_ball(e.args[0]), name)()
    raise InputError(f"value must be built from rationals, exp, log, sqrt and +, *, ** "
                     f"to print decimals (got {e})")
