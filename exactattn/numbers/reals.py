"""The real numbers a logit can be, in one canonical form (:class:`Surd`): exact algebraic or certified.

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
* **certified transcendental**: rotary-embedded (RoPE) scores and soft-capped
  scores ``cap * tanh(s / cap)``, kept in the same canonical form with atoms
  :class:`Trig` (``cos a``, ``sin a`` of a reduced angle) and :class:`Tanh`
  (``tanh x`` of a reduced argument), so every tie a modifier creates is an
  equal form.  Rotary forms are zero exactly when their coefficients are
  (Lindemann-Weierstrass); tanh forms that differ are told apart by
  enclosures up to a bound, past which :class:`~exactattn.errors.Undecided`
  says so rather than guess.  Digits are certified from enclosures, never
  decided by a tolerance.

>>> s = two_power(Fraction(-1, 2))            # an ALiBi slope of a 16-head model
>>> s.text(), s.decimal(6), s * 2 == two_power(Fraction(1, 2))
('1/sqrt(2)', '0.707107', True)
>>> two_power(Fraction(-3, 4)).text()
'(1/2)*2^(1/4)'
>>> softcap(Fraction(2), Fraction(1)).decimal(6)   # tanh(2)
'0.964028'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Any

from ..errors import InputError
from .digits import enclosure_sign, fraction_text, round_fraction
from .real import Real
from .exact import fmpq_of

__all__ = ["Surd"]


@dataclass(frozen=True, repr=False)
class Pow2:
    """The atom ``2^f`` for ``0 < f < 1`` with a power-of-two denominator of 4 or more."""

    f: Fraction

    def __post_init__(self):
        f = self.f
        d = f.denominator
        if not (0 < f < 1) or d < 4 or d & (d - 1):
            raise InputError(f"2^f atom needs 0 < f < 1 with denominator 4, 8, 16, ... (got {f})")

    def __repr__(self) -> str:
        return f"Pow2({self.f})"


def _radical_ball(radical):
    from flint import arb
    x = arb(1)
    for p, f in radical:
        x *= arb(p) ** fmpq_of(f)
    return x


def _radical_text(r: Fraction, radical) -> str:
    parts = [] if r == 1 and radical else [fraction_text(r)]
    parts += [f"{p}^({fraction_text(f)})" for p, f in radical]
    return "*".join(parts)


@lru_cache(maxsize=4096)
def power_form(base: Fraction, e: Fraction, *more) -> tuple[Fraction, tuple]:
    """``base^e`` for a positive rational base as ``(r, ((p, f), ...))``: ``r * prod p^f``;
    ``more`` = ``base2, e2, ...`` multiplies in further powers (an NTK-scaled RoPE base).

    r is rational, the primes p are increasing and every ``0 < f < 1``: the canonical
    form of a real radical, so equal powers get equal forms
    (``10 * 10000^(-1/4) = 1``).  By Besicovitch's theorem (1940) the products
    ``prod p^f`` of distinct forms are linearly independent over the rationals, so
    distinct forms are distinct numbers.

    >>> power_form(Fraction(10000), Fraction(-1, 4)), power_form(Fraction(8), Fraction(1, 2))
    ((Fraction(1, 10), ()), (Fraction(2, 1), ((2, Fraction(1, 2)),)))
    """
    from flint import fmpz
    powers: dict = {}
    given = (base, e) + more
    for base, e in zip(given[::2], given[1::2]):
        base, e = Fraction(base), Fraction(e)
        if base <= 0:
            raise InputError(f"a power needs a positive base (got {base})")
        for n, sign in ((base.numerator, 1), (base.denominator, -1)):
            if n > 1:
                for p, k in fmpz(n).factor():
                    powers[int(p)] = powers.get(int(p), 0) + sign * int(k) * e
    r, radical = Fraction(1), []
    for p in sorted(powers):
        x = Fraction(powers[p])
        whole = x.numerator // x.denominator
        r *= Fraction(p) ** whole
        if x != whole:
            radical.append((p, x - whole))
    return r, tuple(radical)


def angle_ball(r: Fraction, radical: tuple = (), over_pi: tuple = ()):
    """An ``arb`` enclosure of ``r * prod p^f``, plus ``r2 * prod p2^f2 / pi`` when
    ``over_pi = (r2, radical2)`` (a rotary frequency in Llama 3's blended band)."""
    from flint import arb
    a = arb(fmpq_of(r)) * _radical_ball(radical)
    return a + arb(fmpq_of(over_pi[0])) * _radical_ball(over_pi[1]) / arb.pi() if over_pi else a


def gain_ball(gain):
    """A rope's gain as a ball (the one reading of it): a ``Fraction`` itself, ``(f, m, m2)``
    YaRN's attention factor squared (:func:`yarn_gain`)."""
    from flint import arb
    q, yarn = gain_parts(gain)
    return yarn_gain(*(arb(fmpq_of(x)) for x in yarn), log=lambda f: f.log()) if yarn else \
        arb(fmpq_of(q))


def gain_parts(gain) -> tuple:
    """A rope's gain (:attr:`Rope.gain <exactattn.call.modifiers.Rope.gain>`) read once, as
    ``(q, yarn)``: a rational factor q (1 beside yarn's) and yarn's ``(f, m, m2)`` or ()."""
    return (gain, ()) if isinstance(gain, Fraction) else (Fraction(1), gain)


def yarn_gain(f, m, m2, log):
    """YaRN's attention factor squared over any numbers (``arb`` balls, sympy): ``c^2`` with
    ``c = (1 + m log(f)/10) / (1 + m2 log(f)/10)`` (transformers' ``yarn_get_mscale`` ratio;
    m2 = 0: no divisor)."""
    c = (1 + m * log(f) / 10) / (1 + m2 * log(f) / 10)
    return c * c


def gain_text(gain: tuple) -> str:
    f, m, m2 = gain
    one = [f"(1 + ({fraction_text(x / 10)})*log({fraction_text(f)}))" for x in (m, m2) if x]
    return f"{one[0]}^2" if len(one) == 1 else f"({one[0]}/{one[1]})^2"


@dataclass(frozen=True, repr=False)
class Trig:
    """The atom ``cos(a)`` or ``sin(a)`` of a positive algebraic angle ``a = r * prod p^f``.

    The angle is in the canonical form of :func:`power_form`, so equal angles are
    equal atoms.  ``cos(-a) = cos(a)`` and ``sin(-a) = -sin(a)``: build atoms with
    :func:`trig`, which folds the sign.  By the Lindemann-Weierstrass theorem
    ``1, cos(a_k), sin(a_k)`` for distinct positive algebraic angles are linearly
    independent over the algebraic numbers (write each as ``(e^(ia) +- e^(-ia))/2``:
    the exponents ``0, +-i a_k`` are distinct), so a rotary score is zero exactly
    when its collected coefficients are.

    Two extensions for scaled RoPE: ``over_pi = (r2, radical2)`` adds ``r2 * prod p2^f2 / pi``
    to the angle (Llama 3's blended band), and ``gain = (f, m, m2)`` multiplies the atom by
    YaRN's attention factor squared (:func:`gain_ball`; r = 0 with cos: the factor alone).
    No theorem covers these, so sums over them are decided by enclosures up to a bound
    (:func:`decidable` is False), as tanh forms are.
    """

    fn: str
    r: Fraction
    radical: tuple = ()
    over_pi: tuple = ()
    gain: tuple = ()
    _h: int = field(init=False, compare=False, repr=False, default=0)

    def __post_init__(self):
        if self.fn not in ("cos", "sin") or not (self.r > 0 or self.over_pi or self.gain):
            raise InputError(f"a trig atom needs cos or sin of a positive angle (got {self.fn}, "
                             f"{self.r})")
        object.__setattr__(self, "_h", hash((self.fn, self.r, self.radical, self.over_pi,
                                             self.gain)))

    def __hash__(self) -> int:
        return self._h

    def ball(self):
        a = angle_ball(self.r, self.radical, self.over_pi)
        x = a.cos() if self.fn == "cos" else a.sin()
        return x * gain_ball(self.gain) if self.gain else x

    def text(self) -> str:
        angle = _radical_text(self.r, self.radical)
        if self.over_pi:
            angle = (f"{angle} + " if self.r else "") + f"{_radical_text(*self.over_pi)}/pi"
        t = f"{self.fn}({angle})" if self.r or self.over_pi else ""
        return t if not self.gain else f"{gain_text(self.gain)}*{t}" if t else gain_text(self.gain)

    def sympy(self):
        import sympy

        def power(r, radical):
            a = sympy.Rational(r.numerator, r.denominator)
            for p, f in radical:
                a *= sympy.Integer(p) ** sympy.Rational(f.numerator, f.denominator)
            return a
        a = power(self.r, self.radical) + (power(*self.over_pi) / sympy.pi if self.over_pi else 0)
        x = (sympy.cos if self.fn == "cos" else sympy.sin)(a)
        if self.gain:
            x *= yarn_gain(*(sympy.Rational(v.numerator, v.denominator) for v in self.gain), sympy.log)
        return x

    def __repr__(self) -> str:
        return f"Trig({self.text()})"


def trig(fn: str, delta: int, freq: tuple = (Fraction(1), ()), gain: tuple = ()):
    """``(coefficient, atom)`` with ``fn(delta * w) [* gain] = coefficient * atom`` (atom None:
    1) for a positive frequency ``w = freq``'s ``r * prod p^f`` (plus ``r2 * prod p2^f2 / pi``
    when ``freq = (r, radical, (r2, radical2))``).

    >>> trig("sin", -1), trig("cos", 0)
    ((-1, Trig(sin(1))), (1, None))
    """
    r, radical, *pi = freq
    if delta == 0:
        return (0, None) if fn == "sin" else \
            (1, Trig("cos", Fraction(0), gain=gain) if gain else None)
    k = abs(delta)
    over = (k * pi[0][0], pi[0][1]) if pi and pi[0] else ()
    return (-1 if fn == "sin" and delta < 0 else 1), Trig(fn, k * r, radical, over, gain)


@dataclass(frozen=True, repr=False)
class Tanh:
    """The atom ``tanh(x)`` of a non-zero real x in canonical form (a :class:`Surd`).

    tanh is odd and injective, so the atom keeps x with a positive leading coefficient
    (:func:`tanh_of` folds the sign) and atoms compare by x's canonical ``form``.
    Unlike :class:`Trig`, no theorem makes distinct tanh atoms independent, so a sum
    with them is zero when its collected coefficients are, and otherwise its sign
    comes from enclosures up to a bound (:meth:`Surd.sign`).
    """

    x: Any = field(compare=False)
    form: tuple = field(init=False)
    _h: int = field(init=False, compare=False, repr=False, default=0)

    def __post_init__(self):
        object.__setattr__(self, "form", _canonical(self.x))
        object.__setattr__(self, "_h", hash(("tanh", self.form)))

    def __hash__(self) -> int:
        return self._h

    def ball(self):
        return real_ball(self.x).tanh()

    def text(self) -> str:
        return f"tanh({real_text(self.x)})"

    def sympy(self):
        import sympy
        x = self.x
        return sympy.tanh(x.sympy() if isinstance(x, Surd) else sympy.Rational(x.numerator, x.denominator))

    def __repr__(self) -> str:
        return f"Tanh({real_text(self.x)})"


def tanh_of(x) -> tuple[int, "Tanh | None"]:
    """``(sign, atom)`` with ``tanh(x) = sign * atom`` (atom None when x = 0)."""
    if not isinstance(x, Surd):
        x = Fraction(x)
        if x == 0:
            return 0, None
        return (1, Tanh(x)) if x > 0 else (-1, Tanh(-x))
    form = _canonical(x)
    if len(form) == 1:
        return tanh_of(x.p)
    return (1, Tanh(x)) if form[1][1] > 0 else (-1, Tanh(-x))   # the leading coefficient's sign


@dataclass(frozen=True, repr=False)
class Prod:
    """The atom ``alg * trans``: an algebraic atom (``1/sqrt(D)``, ``2^f``) times a
    :class:`Trig` or :class:`Tanh` (a rotary score divided by an irrational sqrt(D))."""

    alg: Any
    trans: Any
    _h: int = field(init=False, compare=False, repr=False, default=0)

    def __post_init__(self):
        object.__setattr__(self, "_h", hash((self.alg, self.trans)))

    def __hash__(self) -> int:
        return self._h

    def __repr__(self) -> str:
        return f"Prod({atom_text(self.alg)}, {self.trans.text()})"


TRANSCENDENTAL = (Trig, Tanh, Prod)


def transcendental(atom) -> bool:
    """True for an atom that is not algebraic (a cosine, sine, tanh or a product with one)."""
    return isinstance(atom, TRANSCENDENTAL)


def decidable(atom) -> bool:
    """True when sums over this atom are zero exactly when their coefficients are
    (every algebraic atom and every :class:`Trig` of an algebraic angle; not a :class:`Tanh`,
    nor a Trig with a pi part or a gain)."""
    if isinstance(atom, Prod):
        atom = atom.trans
    return not isinstance(atom, Tanh) and not (isinstance(atom, Trig) and
                                               (atom.over_pi or atom.gain))


def atom_ball(atom):
    """An ``arb`` enclosure of an atom at the current precision.

    Each atom is enclosed once per precision (a bounded cache): a row of rotary logits
    names the same few cosines in every gap, and ``cos(10^3000)`` costs a reduction
    modulo pi at ten thousand bits.
    """
    from flint import ctx
    return _atom_ball_at(atom, ctx.prec)


@lru_cache(maxsize=1 << 14)
def _atom_ball_at(atom, prec: int):
    """:func:`atom_ball` at ``prec`` bits (the working precision; arb values are immutable)."""
    from flint import arb, fmpq
    if isinstance(atom, Pow2):
        return arb(2) ** fmpq(atom.f.numerator, atom.f.denominator)
    if isinstance(atom, (Trig, Tanh)):
        return atom.ball()
    if isinstance(atom, Prod):
        return atom_ball(atom.alg) * atom_ball(atom.trans)
    return 1 / arb(fmpq_of(atom)).sqrt()


def tanh_parts(atom):
    """``(s, tail)`` with ``tanh(x) = s * (1 - tail)`` for a :class:`Tanh` atom whose
    argument's sign s is known (else None): ``tail = 2/(exp(2|x|) + 1)``, enclosed with
    relative precision however far tanh has saturated (``tanh(10^5)`` is within e^-200000
    of 1; its tail is not lost below the ball's radius, so saturated logits still compare)."""
    from flint import arb
    x = atom.x
    if isinstance(x, Surd):
        b = x.ball()
        s = 1 if b > 0 else -1 if b < 0 else 0
        if not s:
            return None
        b = b if s > 0 else -b
    else:
        s, b = (1 if x > 0 else -1), arb(fmpq_of(abs(Fraction(x))))
    e = (-2 * b).exp()
    return s, 2 * e / (1 + e)


def atom_text(atom) -> str:
    if isinstance(atom, Pow2):
        return f"2^({fraction_text(atom.f)})"
    if isinstance(atom, (Trig, Tanh)):
        return atom.text()
    if isinstance(atom, Prod):
        return f"{atom.trans.text()}*{atom_text(atom.alg)}"
    return f"1/sqrt({fraction_text(atom)})"


@lru_cache(maxsize=4096)
def square_free(D: Fraction) -> tuple[Fraction, int]:
    """``(c, m)`` with ``1/sqrt(D) = c / sqrt(m) = (c/m) sqrt(m)``, m a square-free whole number.

    >>> square_free(Fraction(48)), square_free(Fraction(3, 2))
    ((Fraction(1, 4), 3), (Fraction(2, 1), 6))
    """
    from flint import fmpz
    a, b = D.numerator, D.denominator
    s, m = 1, 1
    if a * b > 1:
        for p, k in fmpz(a * b).factor():
            s *= int(p) ** (int(k) // 2)
            if k % 2:
                m *= int(p)
    return Fraction(s * m, a), m     # 1/sqrt(a/b) = sqrt(ab)/a = s sqrt(m)/a


def canonical_atom(atom) -> tuple[Fraction, Any]:
    """``(c, a)`` with ``atom = c * a`` and a the one representative of its class."""
    if isinstance(atom, Fraction):
        c, m = square_free(atom)
        return c, Fraction(m)
    if isinstance(atom, Prod):
        c, a = canonical_atom(atom.alg)
        return (c, atom.trans) if a == 1 else (c, Prod(a, atom.trans))   # sqrt(4): rational
    return Fraction(1), atom


def _order(atom) -> tuple:
    """A sort key for canonical atoms, compared structurally: never a string of a number
    (``repr`` of a 3,000-digit Fraction exceeds Python's int-to-string limit)."""
    if isinstance(atom, Fraction):
        return (0, atom)
    if isinstance(atom, Pow2):
        return (1, atom.f)
    if isinstance(atom, Prod):
        return (3,) + _order(atom.trans) + _order(atom.alg)
    if isinstance(atom, Trig):
        return (2, 0, atom.fn, atom.r, atom.radical) + \
            ((atom.over_pi, atom.gain) if atom.over_pi or atom.gain else ())
    return (2, 1, atom.form)


def _canonical(x) -> tuple:
    """A value's canonical form: ``((p,), (order, coefficient, atom), ...)``, sorted; equal
    exact values (the same algebraic number, the same rotary or tanh form) have equal forms."""
    if not isinstance(x, Surd):
        return ((Fraction(x),),)
    merged: dict = {}
    for atom, a in x.terms:
        c, rep = canonical_atom(atom)
        merged[rep] = merged.get(rep, 0) + a * c
    terms = sorted(((_order(rep), a, rep) for rep, a in merged.items() if a), key=lambda t: t[0])
    return ((x.p,),) + tuple((o, a) for o, a, _ in terms)


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
    where: dict = {}        # canonical atom -> (index in basis, the basis atom's factor)
    rows = []
    for v in values:
        if v is None:
            rows.append(None)
            continue
        p, terms = (v.p, v.terms) if isinstance(v, Surd) else (Fraction(v), ())
        coeffs: dict = {}
        for atom, a in terms:
            c, rep = canonical_atom(atom)
            if rep == 1:                # 1/sqrt(D) of a square D: rational
                p += a * c
                continue
            found = where.get(rep)
            if found is None:
                where[rep] = (len(basis), c)
                basis.append(atom)
                coeffs[len(basis) - 1] = coeffs.get(len(basis) - 1, 0) + Fraction(a)
            else:                       # atom = c rep = (c / c_b) basis[k]
                k, cb = found
                coeffs[k] = coeffs.get(k, 0) + a * (c / cb)
        rows.append((p, coeffs))
    m = len(basis)
    return tuple(basis), [None if r is None else
                          (r[0], *(Fraction(r[1].get(k, 0)) for k in range(m))) for r in rows]


class Surd(Real):
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
        if len(terms) == 1 and not isinstance(terms[0][0], Fraction):   # nothing to merge
            (atom, a), = terms
            a = Fraction(a)
            self.terms = ((atom, a),) if a else ()
            return
        # merge dependent atoms, square divisors (terms of a zero coefficient dropped first)
        basis, (key,) = align([Surd.merged(0, terms)])
        self.p += key[0]
        self.terms = tuple((atom, a) for atom, a in zip(basis, key[1:]) if a)

    @classmethod
    def merged(cls, p, terms) -> "Surd":
        """A Surd from terms over atoms already independent (no two of one class): no merge."""
        self = cls.__new__(cls)
        self.p, self._hash = Fraction(p), None
        self.terms = tuple((atom, Fraction(a)) for atom, a in terms if a)
        return self

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
            return Surd.merged(self.p * other, tuple((t, a * other) for t, a in self.terms))
        return NotImplemented

    __rmul__ = __mul__

    def __neg__(self) -> "Surd":
        return self * -1

    def __sub__(self, other):
        return self + (-other)

    def __rsub__(self, other):
        return (-self) + other

    def over_sqrt(self, D: Fraction) -> "Surd":
        """``self / sqrt(D)`` for an irrational sqrt(D), when self has no algebraic atom
        (a rotary score): each cosine or sine term becomes a :class:`Prod` atom.

        Raises:
            InputError: self holds an algebraic atom (a product of two surds).
        """
        terms = [(Fraction(D), self.p)] if self.p else []
        for atom, a in self.terms:
            if not isinstance(atom, (Trig, Tanh)):
                raise InputError(f"cannot divide {self.text()} by sqrt({D}) exactly here")
            terms.append((Prod(Fraction(D), atom), a))
        return Surd.merged(0, terms)           # distinct Trig/Tanh atoms stay distinct

    @property
    def transcendental(self) -> bool:
        """True when a cosine, sine or tanh occurs (its digits are certified, not exact)."""
        return any(transcendental(atom) for atom, _ in self.terms)

    # -- exact sign and order ------------------------------------------------
    def ball(self, prec: int = 0):
        from flint import arb, fmpq
        x = arb(fmpq(self.p.numerator, self.p.denominator))
        for atom, a in self.terms:
            x += arb(fmpq_of(a)) * atom_ball(atom)
        return x

    def sign(self) -> int:
        """-1, 0 or 1, exactly (0 only when every coefficient is 0).

        Algebraic values: exact, always.  With a cosine or sine (Lindemann-Weierstrass:
        a non-zero form is a non-zero number) or a tanh (no such theorem), the sign is
        read from enclosures up to :data:`~exactattn.numbers.digits.MAX_PREC` bits.

        Raises:
            Undecided: enclosures up to that bound still contain 0.
        """
        if not self.terms:
            return (self.p > 0) - (self.p < 0)
        paired = self._tanh_pair()
        if paired is not None:
            return paired
        ball = self._sign_ball if any(isinstance(atom, Tanh) for atom, _ in self.terms) \
            else self.ball
        return enclosure_sign(ball, self.text, bounded=self.transcendental)

    def _sign_ball(self, prec: int = 0):
        """An enclosure that keeps saturated tanh atoms' distance to +-1: each
        ``a tanh(x) = a s - a s tail`` moves ``a s`` into the exact rational part, so
        ``tanh(100) + tanh(101) - 2`` (about -2e^-200) is enclosed to relative precision."""
        from flint import arb
        p, rest, small = self.p, arb(0), arb(0)
        for atom, a in self.terms:
            parts = tanh_parts(atom) if isinstance(atom, Tanh) else None
            if parts is None:
                rest += arb(fmpq_of(a)) * atom_ball(atom)
            else:
                s, tail = parts
                p += a * s
                small -= arb(fmpq_of(a * s)) * tail
        return (arb(fmpq_of(p)) + rest if p or rest != 0 else rest) + small

    def _tanh_pair(self) -> int | None:
        """``c (tanh x - tanh y)``, two capped logits with one cap and equal biases: tanh is
        increasing, so the sign is ``sign(c) sign(x - y)``, exact however close the two
        saturate (``tanh(200000) - tanh(100000)`` is about e^-200000)."""
        if self.p or len(self.terms) != 2:
            return None
        (a, c1), (b, c2) = self.terms
        if not (isinstance(a, Tanh) and isinstance(b, Tanh)) or c1 != -c2:
            return None
        s = real_compare(a.x, b.x)
        return s if c1 > 0 else -s

    def _order(self, other) -> int:
        if isinstance(other, (int, Fraction, Surd)) and not isinstance(other, bool):
            return (self - other).sign()
        return NotImplemented

    def _equals(self, other):
        if not isinstance(other, (int, Fraction, Surd)) or isinstance(other, bool):
            return NotImplemented
        d = self - other
        if not d.terms:
            return d.p == 0
        if all(decidable(atom) for atom, _ in d.terms):
            return False               # a non-zero form over independent atoms
        return d.sign() == 0

    def _hash_value(self) -> int:
        form = _canonical(self)
        return hash(self.p) if len(form) == 1 else hash(("Surd", form))

    # -- views ---------------------------------------------------------------
    def text(self) -> str:
        parts = []
        for atom, a in self.terms:
            t = atom_text(atom)
            if isinstance(atom, Pow2) or transcendental(atom):
                body = t if abs(a) == 1 else f"({fraction_text(abs(a))})*{t}" \
                    if abs(a).denominator != 1 else f"{abs(a)}*{t}"
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
            elif isinstance(atom, (Trig, Tanh)):
                x += c * atom.sympy()
            elif isinstance(atom, Prod):
                x += c * Surd(0, ((atom.alg, 1),)).sympy() * atom.trans.sympy()
            else:
                x += c / sympy.sqrt(sympy.Rational(atom.numerator, atom.denominator))
        return x

    def __repr__(self) -> str:
        return f"Surd({self.text()})"


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


# --------------------------------------------------------------------------- any real logit
def real_ball(x, prec: int = 0):
    """An enclosure of a rational or :class:`Surd` at the current precision."""
    if isinstance(x, Surd):
        return x.ball(prec)
    from flint import arb
    x = Fraction(x)
    return arb(fmpq_of(x))


def real_text(x) -> str:
    return x.text() if isinstance(x, Surd) else fraction_text(Fraction(x))


def real_compare(x, y) -> int:
    """sign(x - y) for rationals and Surds (see :meth:`Surd.sign`).

    Raises:
        Undecided: two tanh forms not separated up to the bound.
    """
    d = x - y
    return d.sign() if isinstance(d, Surd) else (d > 0) - (d < 0)


def real_decimal(x, places: int) -> str:
    """Certified decimal of a rational or :class:`Surd`."""
    if isinstance(x, Surd):
        return x.decimal(places)
    return round_fraction(Fraction(x), places)


def softcap(x, cap: Fraction):
    """``cap * tanh(x / cap)`` (Gemma 2's logit soft-capping) of an exact x, in canonical form.

    The result is a :class:`Surd` over a :class:`Tanh` atom of the reduced argument
    ``x / cap`` (tanh is odd and injective): equal inputs give the same form, so
    ties that soft-capping keeps are decided exactly.  ``softcap(0)`` is exactly
    ``Fraction(0)``.
    """
    cap = Fraction(cap)
    sign, atom = tanh_of(x / cap if not isinstance(x, Surd) else x * (1 / cap))
    if atom is None:
        return Fraction(0)
    return Surd(0, ((atom, sign * cap),))


def softcap_ball(x, cap: Fraction):
    """``cap * tanh(x / cap)`` of an ``arb`` x, at the current working precision (the one
    soft-cap formula every enclosure uses)."""
    from flint import arb
    c = arb(fmpq_of(cap))
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
    >>> from exactattn.numbers.digits import certify
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
