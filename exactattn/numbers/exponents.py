"""Exact exponents and exponential polynomials: the arithmetic behind exact shares.

An exponent of a softmax term is ``p + a / sqrt(D)`` for rationals p, a and a
rational D that is not a rational square (or just p).  Exponents of different
rows are compared in one basis of inverse square roots: ``1/sqrt(D)`` and
``1/sqrt(E)`` are rationally dependent exactly when E/D is a rational square.
An :class:`ExpPoly` is ``sum_k c_k exp(e_k)`` with exact, collected terms; by
the Lindemann-Weierstrass theorem it is zero exactly when every collected
coefficient is zero, and otherwise its sign is decided by ball arithmetic at a
precision that always suffices.

>>> one = ExpPoly((), {(Fraction(0),): Fraction(1)})
>>> e = ExpPoly((), {(Fraction(1),): Fraction(1)})
>>> (e - one).sign()      # e - 1 > 0
1
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from operator import add

from .digits import enclosure_sign, fraction_text
from .exact import fmpq_of
from .reals import Surd, Tanh, align, atom_text, tanh_parts, transcendental


def unify(*polys: "ExpPoly") -> list["ExpPoly"]:
    """The polynomials rewritten over one basis of independent atoms (:func:`exp_polys`)."""
    if all(p.basis == polys[0].basis for p in polys):
        return list(polys)
    return exp_polys([([exponent_value(p.basis, e) for e in p.terms], p.terms.values())
                      for p in polys])


def exp_polys(sums) -> list["ExpPoly"]:
    """Sums ``sum_k c_k exp(x_k)``, each given as ``(exponents, coefficients)`` (the x exact
    values: rationals, :class:`~exactattn.numbers.reals.Surd`), as ExpPolys over one basis
    (:func:`~exactattn.numbers.reals.align`'s: ``1/sqrt(D)`` and ``1/sqrt(E)`` are one atom
    when E/D is a rational square), equal exponents collected."""
    sums = [(list(xs), list(cs)) for xs, cs in sums]
    basis, keys = align([x for xs, _ in sums for x in xs])
    keys, out = iter(keys), []
    for _, cs in sums:
        terms = Counter()
        for c in cs:
            terms[next(keys)] += c
        out.append(ExpPoly(basis, terms))
    return out


class ExpPoly:
    """``sum_k c_k exp(p_k + sum_i a_ki / sqrt(basis_i))`` with exact, collected terms.

    ``terms`` maps an exponent ``(p, a_1, ..., a_m)`` to its non-zero rational
    coefficient; ``basis`` holds the D values (none a rational square, no two
    with a rational-square ratio), so distinct keys are distinct exponents.
    """

    __slots__ = ("basis", "terms")

    def __init__(self, basis: tuple, terms: dict):
        self.basis = basis
        self.terms = {e: c for e, c in terms.items() if c != 0}

    # -- the ring: +, -, *, exact division (terms collected, bases unified) ----------------
    def __add__(self, other: "ExpPoly") -> "ExpPoly":
        s, o = unify(self, other)
        out = Counter(s.terms)
        out.update(o.terms)          # adds (negative coefficients kept; zeros dropped below)
        return ExpPoly(s.basis, out)

    def __neg__(self) -> "ExpPoly":
        return ExpPoly(self.basis, {e: -c for e, c in self.terms.items()})

    def __sub__(self, other: "ExpPoly") -> "ExpPoly":
        return self + (-other)

    def __mul__(self, other: "ExpPoly") -> "ExpPoly":
        s, o = unify(self, other)
        out: dict = {}
        for e1, c1 in s.terms.items():
            for e2, c2 in o.terms.items():
                key = (e1[0] + e2[0],) if len(e1) == 1 else tuple(map(add, e1, e2))
                out[key] = out.get(key, 0) + c1 * c2
        return ExpPoly(s.basis, out)

    def ball(self, prec: int):
        from flint import arb
        return sum((arb(fmpq_of(c)) * exponent_value(self.basis, e).ball().exp()
                    for e, c in self.terms.items()), arb(0))

    def sign(self) -> int:
        """-1, 0 or 1: 0 for the zero polynomial.

        With algebraic exponents a non-zero polynomial is a non-zero number
        (Lindemann-Weierstrass), so its sign is exact.  Exponents over cosine, sine
        or tanh atoms (rotary, soft-capped logits) have no such theorem: the sign of
        a non-zero polynomial then comes from enclosures up to
        :data:`~exactattn.numbers.digits.MAX_PREC` bits.

        Raises:
            Undecided: transcendental exponents, enclosures still astride 0 at the bound.
        """
        if not self.terms:
            return 0
        cs = list(self.terms.values())
        if all(c > 0 for c in cs) or all(c < 0 for c in cs):
            return 1 if cs[0] > 0 else -1          # every exp(e) > 0
        if len(cs) == 2 and cs[0] == -cs[1]:       # c (exp(e1) - exp(e2)): exp is increasing
            e1, e2 = self.terms
            s = exponent_value(self.basis, tuple(u - v for u, v in zip(e1, e2))).sign()
            return s if cs[0] > 0 else -s
        ball = self._sign_ball if any(isinstance(atom, Tanh) for atom in self.basis) else self.ball
        return enclosure_sign(ball, self.text,
                              bounded=any(transcendental(atom) for atom in self.basis))

    def _sign_ball(self, prec: int):
        """An enclosure that keeps saturated tanh atoms' distance to +-1 (soft-capped logits
        within e^-2000 of the cap): with ``tanh(x) = s (1 - tail)`` each exponent is an exact
        part plus a small ``delta``, and terms of one exact part add as
        ``exp(part) (sum c + sum c expm1(delta))``, each piece to relative precision."""
        from flint import arb
        parts = [tanh_parts(atom) if isinstance(atom, Tanh) else None for atom in self.basis]
        rest = tuple(atom for atom, part in zip(self.basis, parts) if part is None)
        groups: dict = {}
        for e, c in self.terms.items():
            p, key, delta = e[0], [], arb(0)
            for a, part in zip(e[1:], parts):
                if part is None:
                    key.append(a)
                elif a:
                    p += a * part[0]
                    delta -= arb(fmpq_of(a * part[0])) * part[1]
            g = groups.setdefault((p, tuple(key)), [Fraction(0), arb(0)])
            g[0] += c
            g[1] += arb(fmpq_of(c)) * delta.expm1()
        return sum((exponent_value(rest, (p, *key)).ball().exp() * (arb(fmpq_of(c)) + small)
                    for (p, key), (c, small) in groups.items()), arb(0))

    def text(self) -> str:
        """The polynomial as a sum of exponentials (for messages)."""
        return sum_text([(i, exponent_text(self.basis, e), c)
                         for i, (e, c) in enumerate(self.terms.items())])


def exponent_value(basis: tuple, e: tuple) -> Surd:
    """The exponent ``e = (p, a_1, ...)`` over ``basis`` as a value, ``p + sum a_k basis[k]``."""
    return Surd.merged(e[0], tuple(zip(basis, e[1:])))


def exponent_text(basis: tuple, e: tuple) -> str:
    """``exp(...)`` of the exponent ``e = (p, a_1, ...)`` (``p + sum a_k basis[k]``), or ``1`` for 0.

    A basis entry is a ``Fraction`` D (the atom ``1/sqrt(D)``) or a ``2^f`` atom.

    >>> exponent_text((), (Fraction(3, 8),)), exponent_text((Fraction(2),), (Fraction(1, 2), Fraction(1)))
    ('exp(3/8)', 'exp(1/sqrt(2) + 1/2)')
    """
    parts = []
    for atom, a in zip(basis, e[1:]):
        if not a:
            continue
        t = atom_text(atom)
        if isinstance(atom, Fraction):
            body = f"{fraction_text(a)}/sqrt({fraction_text(atom)})"
        else:
            body = t if a == 1 else f"-{t}" if a == -1 else f"{fraction_text(a)}*{t}"
        parts.append(body if not parts or body.startswith("-") else "+ " + body)
    if e[0] or not parts:
        p = fraction_text(e[0])
        parts.append(p if not parts or p.startswith("-") else "+ " + p)
    body = " ".join(parts).replace(" -", " - ").replace("- -", "- ")
    return "1" if body == "0" else f"exp({body})"


def sum_text(terms) -> str:
    """A sum ``c exp(e) + ...`` written by increasing exponent; ``terms`` holds
    ``(sort key, exponent text, rational coefficient)``.

    >>> sum_text([(Fraction(1), "exp(1)", Fraction(1)), (Fraction(0), "1", Fraction(2))])
    '2 + exp(1)'
    """
    out = ""
    for _, t, c in sorted(terms, key=lambda term: term[0]):
        mag = abs(c)
        body = fraction_text(mag) if t == "1" else t if mag == 1 else f"{fraction_text(mag)}*{t}"
        if not out:
            out = ("-" if c < 0 else "") + body
        else:
            out += (" - " if c < 0 else " + ") + body
    return out or "0"
