"""Exact gradient entries: rational functions of one transcendental t, with certified decimals.

Every entry of a gradient of one attention call is ``s * R(t)`` where ``s`` is
1 or the scale ``1/sqrt(D)`` (dQ, dK and what is built from them, when sqrt(D)
is irrational; a rational scale is folded into R), and ``R`` is a sum over
normaliser classes (:mod:`exactattn.gradients.terms`)::

    R = c + sum_k N_k(t) / Z_k(t)^2          (c rational, N_k polynomials)

A :class:`GradValue` holds that as python-flint ``fmpq_mpoly`` numerators, built
on demand, and decides exactly:

* **zero**: no class left after collecting; one class left (its ``N/Z^2`` is a
  non-constant rational function, never 0 at a transcendental t); otherwise
  ``R(1) != 0`` proves ``R != 0`` (a rational function that is 0 is 0 at 1, and
  ``Z_k(1) > 0``); otherwise an enclosure excluding 0 proves it, and as a last
  resort every class is put over one common denominator and the numerator
  compared with 0 (refused past :data:`MAX_TERMS` terms, with a one-line error);
* **rational**: a class whose numerator is ``q Z^2`` is the constant q; a value
  with no other class is rational, with exactly one other it is not (a
  non-constant rational function of a transcendental number is
  transcendental); with more, the only candidate is ``R(1)`` (the value at equal
  scores) and the zero test of ``R - R(1)`` decides.  With an irrational s the
  value is rational only when it is 0;
* **sign**, ``==``, ``<``: the zero test, then enclosures (which always end,
  the value being non-zero);
* **decimals**: rationals round exactly; any other value through
  :func:`exactattn.numbers.digits.certify` with the exact sign as its ``compare``.

Arithmetic: ``+``, ``-`` and rational multiples of values of one call (what the
weight gradients and the property checks need).

Reference: Lindemann-Weierstrass (Baker 1975, Theorem 1.4); Ziv 1991 for the
rounding loop.
"""

from __future__ import annotations

from fractions import Fraction

from ..numbers.digits import arb_to_fraction, enclosure_sign, fraction_text, tighten
from ..errors import ExactAttnError, InputError, Undecided
from ..numbers.real import Real
from ..options import check_choice
from ..numbers.exact import fmpq_of, fraction_of


#: enclosures tried (bits) before the common-denominator zero test
ZERO_PREC = 4096
#: the most terms the common-denominator zero test may build
MAX_TERMS = 10 ** 6
#: texts reduce N / Z^2 by their gcd up to this degree
TEXT_DEGREE = 4096
#: the atom of the constant 1
ONE = ("one",)
#: the printed forms of a value: the forward's ``exp(...)`` form, or over the generators
TEXT_STYLES = ("exp", "generators")


def _rational(x) -> bool:
    return isinstance(x, (int, Fraction)) and not isinstance(x, bool)


class GradValue(Real):
    """One exact gradient entry (or a rational combination of entries of one call).

    ``block`` is the :class:`~exactattn.gradients.backward.Gradients` it comes
    from, ``recipe`` maps atoms (``("dQ", i, c)``, ...) to rational
    coefficients, ``scaled`` says whether the value carries the irrational
    scale ``1/sqrt(D)``.  Values are immutable and compare like ``Fraction``.

    >>> from exactattn.call.policy import Policy
    >>> from exactattn.gradients import gradients
    >>> g = gradients([[1]], [[0], [1]], [[0], [1]], [[1]], Policy(scale="none"))
    >>> v = g.dV[1][0]                       # e/(1 + e)
    >>> v.text(), v.decimal(6), v > Fraction(1, 2), (v + g.dV[0][0]).rational()
    ('exp(1)/(1 + exp(1))', '0.731059', True, Fraction(1, 1))
    >>> v.text(style="generators")
    't/(t + 1) where t = exp(1)'
    """

    __slots__ = ("block", "recipe", "scaled", "_parts", "_rational", "_zero", "_hash")

    def __init__(self, block, recipe: dict, scaled: bool = False):
        self.block = block
        self.recipe = {a: Fraction(c) for a, c in recipe.items() if c}
        self.scaled = scaled
        self._parts = None
        self._rational = False      # not computed yet (None means irrational)
        self._zero = None
        self._hash = None

    # -- structure --------------------------------------------------------------
    @property
    def nan(self) -> bool:
        """True when the value is NaN (an empty row under ``empty_row='nan'`` feeds it)."""
        return any(self.block.atom_nan(a) for a in self.recipe)

    def _check_number(self) -> None:
        if self.nan:
            raise InputError("value must be a number to be compared (got nan: an empty row "
                             "under empty_row='nan' feeds it)")

    def parts(self) -> tuple[Fraction, dict]:
        """``(c, {class: N})``: the constant and the numerators over ``Z^2`` (exact, cached).

        A class whose numerator is a rational multiple of ``Z^2`` is folded into c.
        """
        if self._parts is not None:
            return self._parts
        from flint import fmpq
        terms = self.block.terms
        merged: dict = {}
        for atom, coef in self.recipe.items():
            for key, poly in self.block.atom_parts(atom).items():
                p = poly * fmpq_of(coef)
                merged[key] = merged[key] + p if key in merged else p
        const = Fraction(0)
        out = {}
        for key, poly in merged.items():
            if poly.is_zero():
                continue
            if poly.is_constant() and key == terms.one:
                const += fraction_of(poly.leading_coefficient())
                continue
            c = fraction_of(sum(poly.coeffs(), fmpq(0))) / (len(key) * len(key))
            if c and poly == terms.normaliser_squared(key) * fmpq_of(c):
                const += c
                continue
            out[key] = poly
        self._parts = (const, out)
        return self._parts

    def _at_one(self) -> Fraction:
        """``R(1)``: the value with every generator set to 1 (every score equal)."""
        from flint import fmpq
        const, parts = self.parts()
        total = const
        for key, poly in parts.items():
            total += fraction_of(sum(poly.coeffs(), fmpq(0))) / (len(key) * len(key))
        return total

    def is_zero(self) -> bool:
        """True exactly when the value is 0.

        Raises:
            ExactAttnError: neither the structure, enclosures up to
                :data:`ZERO_PREC` bits nor a common denominator of at most
                :data:`MAX_TERMS` terms decide it.
        """
        if self._zero is None:
            self._zero = self._decide_zero()
        return self._zero

    def _decide_zero(self) -> bool:
        self._check_number()
        const, parts = self.parts()
        if not parts:
            return const == 0
        if len(parts) == 1 or self._at_one() != 0:
            return False

        def apart(p):
            b = self.ball(p)
            return True if not b.contains(0) else None
        if tighten(apart, 64, max_prec=ZERO_PREC):
            return False
        return self._common_denominator_zero(const, parts)

    def _common_denominator_zero(self, const: Fraction, parts: dict) -> bool:
        return common_denominator_zero(self.block.terms, const, parts)

    def rational(self) -> Fraction | None:
        """The value as a ``Fraction`` when it is rational, else None (also for NaN)."""
        if self._rational is not False:
            return self._rational
        if self.nan:
            q = None
        elif self.scaled:
            q = Fraction(0) if self.is_zero() else None
        else:
            const, parts = self.parts()
            if not parts:
                q = const
            elif len(parts) == 1:
                q = None
            else:
                q1 = self._at_one()
                q = q1 if (self - q1).is_zero() else None
        self._rational = q
        return q

    # -- numeric ------------------------------------------------------------------
    def ball(self, prec: int):
        """An ``arb`` enclosure of the value from enclosures at ``prec`` bits."""
        from flint import arb
        if self.nan:
            return arb.nan()
        total = arb(0)
        for atom, coef in self.recipe.items():
            b = self.block.atom_ball(atom, prec)
            total += b if coef == 1 else b * fmpq_of(coef)
        return total

    def sign(self) -> int:
        """-1, 0 or 1, exactly: from enclosures up to MAX_PREC bits, else from the numerator's
        exponential polynomial (the denominator and the scale are positive): a value whose every
        term is below 2^-MAX_PREC (scores astronomically apart, each share enclosed by [0, 2^-K])
        would need as many bits as the gap itself."""
        if self.is_zero():
            return 0
        try:
            return enclosure_sign(self.ball, self.text)
        except Undecided:
            return self._exp_polys()[0].sign()

    def _minus_sign(self, q) -> int:
        """sign(value - q) for a rational q, exactly."""
        q = Fraction(q)
        self._check_number()
        if not self.scaled:
            return (self - q).sign()
        if q == 0:
            return self.sign()
        from flint import arb     # s R(t) is never a non-zero rational: enclosures decide
        return enclosure_sign(lambda p: self.ball(p) - arb(fmpq_of(q)), self.text, bounded=False)

    def _exp_polys(self):
        """``(num, den)``: the unscaled value ``R`` as a ratio of exponential polynomials
        (:class:`~exactattn.numbers.exponents.ExpPoly`, the forward's form), ``den > 0``:
        each generator's monomial ``t^a`` is ``exp(a c atom)``."""
        from ..numbers.exponents import ExpPoly
        const, parts = self.parts()
        num, den = fmpq_of(const), 1
        for key, poly in parts.items():
            z2 = self.block.terms.normaliser_squared(key)
            num, den = num * z2 + poly * den, den * z2
        gens = self.block.terms.generators
        basis = tuple(atom for _, atom in gens if atom is not None)
        where = [None if atom is None else basis.index(atom) for _, atom in gens]

        def exp_poly(p):
            if not hasattr(p, "monoms"):          # no class: a rational constant
                return ExpPoly(basis, {(Fraction(0),) * (1 + len(basis)): fraction_of(p)})
            out: dict = {}
            for exps, c in zip(p.monoms(), p.coeffs()):
                key = [Fraction(0)] * (1 + len(basis))
                for a, (f, _), k in zip(exps, gens, where):
                    key[0 if k is None else 1 + k] += int(a) * f
                out[tuple(key)] = out.get(tuple(key), 0) + fraction_of(c)
            return ExpPoly(basis, out)
        return exp_poly(num), exp_poly(den)

    def _forward_sign(self, other) -> int:
        """sign(self - other) for a forward value (:class:`~exactattn.numbers.ratio.ExpRatio`):
        cross-multiplied in the forward's exponential polynomials, decided exactly; with the
        irrational scale, equal only when both are 0 (sqrt(D) is no ratio of them)."""
        if self.scaled:
            return self._mixed_sign(other)
        self._check_number()
        other._check_number()
        num, den = self._exp_polys()
        n2, d2 = other._polys()
        return num.times_minus(d2, n2, den).sign()

    def _compare(self, other) -> int:
        if _rational(other):
            return self._minus_sign(other)
        from ..numbers.ratio import ExpRatio
        if isinstance(other, ExpRatio):
            return self._forward_sign(other)
        if not isinstance(other, GradValue):
            return NotImplemented
        if other.block is not self.block:
            q1, q2 = self.rational(), other.rational()
            if q1 is not None and q2 is not None:
                return (q1 > q2) - (q1 < q2)
            raise InputError("values must come from one call to be compared exactly (got two "
                             "calls); compare their decimals instead")
        return (self - other).sign() if self.scaled == other.scaled else \
            self._mixed_sign(other)

    def _mixed_sign(self, other) -> int:
        """sign(self - other) when one carries the irrational scale and the other (a
        GradValue or a forward value) does not: equal only when both are 0 (sqrt(D) is
        algebraic, so not a ratio of polynomials in the generators)."""
        self._check_number()
        other._check_number()
        if self.is_zero() and other.sign() == 0:
            return 0
        return enclosure_sign(lambda p: self.ball(p) - other.ball(p), self.text, bounded=False)

    def _order(self, other) -> int:
        return self._compare(other)

    def _nan(self) -> bool:
        return self.nan

    def __float__(self) -> float:
        """A float within an ULP of the value (from an enclosure 2^-64 relative wide); nan for NaN."""
        if self.nan:
            return float("nan")
        q = self.rational()
        if q is not None:
            return float(q)

        def step(p):
            b = self.ball(p)
            return b.mid() if b.rad() * 2 ** 64 < abs(b.mid()) else None
        return float(arb_to_fraction(tighten(step, 64)))

    # -- arithmetic -----------------------------------------------------------------
    def _combine(self, other, sign: int) -> "GradValue":
        if _rational(other):
            if other == 0:
                return self
            if self.scaled:
                raise InputError("value must not carry the scale 1/sqrt(D) to be added to a "
                                 f"rational (got {self.text()} and {other}); add values of one kind")
            recipe = dict(self.recipe)
            recipe[ONE] = recipe.get(ONE, 0) + sign * Fraction(other)
            return GradValue(self.block, recipe, False)
        if not isinstance(other, GradValue):
            return NotImplemented
        if other.block is not self.block:
            raise InputError("values must come from one call to be added exactly (got two calls)")
        if self.scaled != other.scaled and self.recipe and other.recipe:
            raise InputError("values must both carry the scale 1/sqrt(D) or both not to be "
                             "added exactly (got one of each)")
        recipe = dict(self.recipe)
        for a, c in other.recipe.items():
            recipe[a] = recipe.get(a, 0) + sign * c
        return GradValue(self.block, recipe, self.scaled or other.scaled)

    def __add__(self, other):
        return self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other):
        return self._combine(other, -1)

    def __rsub__(self, other):
        return (-self)._combine(other, 1)

    def __neg__(self) -> "GradValue":
        return GradValue(self.block, {a: -c for a, c in self.recipe.items()}, self.scaled)

    def __mul__(self, other):
        if not _rational(other):
            return NotImplemented
        return GradValue(self.block, {a: c * other for a, c in self.recipe.items()}, self.scaled)

    __rmul__ = __mul__

    # -- views ----------------------------------------------------------------------
    def closed_form(self):
        """The sympy closed form: :meth:`text` read by sympy (every number in it exact)."""
        import sympy
        return sympy.sympify(self.text().replace("^", "**"))

    def _text(self, style: str = "exp") -> str:
        """The closed form without sympy: a rational as itself (``1/2``); by default in the
        forward's ``exp(...)`` form, each ``N/Z^2`` with its squared normaliser kept factored
        (``2*exp(1)/(1 + exp(1))^2``) and a share or an output written as the forward writes
        it (``exp(1)/(1 + 2*exp(1))``); ``style="generators"``: polynomials in the generators
        with ``where t = ...`` (``(2*t)/(t + 1)^2 where t = exp(1)``), shorter over a whole
        table of one call."""
        check_choice(style, "style", TEXT_STYLES)
        const, parts = self.parts()
        terms = self.block.terms
        pieces = [fraction_text(const)] if const else []
        for key, num in parts.items():
            if style == "exp":
                pieces.append(terms.part_text(key, num))
                continue
            z = terms.normaliser(key)
            den = terms.normaliser_squared(key)
            if max(num.total_degree(), den.total_degree()) <= TEXT_DEGREE:
                g = num.gcd(den)       # small degrees only: flint's gcd is dense
                num, den = num / g, den / g
            below = f"{_paren(z)}^2" if den == z * z else _paren(den)
            pieces.append(f"{_paren(num)}/{below}")
        body = pieces[0]
        for piece in pieces[1:]:
            body += f" - {piece[1:]}" if style == "exp" and piece.startswith("-") else \
                f" + {piece}"
        if self.scaled:
            body = f"({body})/sqrt({self.block.irrational_scale})"
        return body if style == "exp" else f"{body} where {terms.generator_text()}"

    def __repr__(self) -> str:
        return f"GradValue({self.text()})"


def _paren(poly) -> str:
    text = str(poly)
    bare = len(poly) == 1 and "*" not in text.lstrip("-") and "/" not in text
    return text if bare else f"({text})"




def common_denominator_zero(terms, const: Fraction, parts: dict) -> bool:
    """True exactly when ``const + sum_k N_k / Z_k^2`` is 0 (``parts`` maps a normaliser key k
    to N_k), over one common denominator of at most :data:`MAX_TERMS` terms.

    Raises:
        ExactAttnError: the common denominator would pass :data:`MAX_TERMS` terms.
    """
    squares = {k: terms.normaliser_squared(k) for k in parts}
    size = max(len(p) for p in parts.values())
    for sq in squares.values():
        size *= len(sq)
    if size > MAX_TERMS:
        raise ExactAttnError(
            f"value must be decided within {MAX_TERMS} polynomial terms (got about {size}: "
            f"{len(parts)} normalisers that enclosures to {ZERO_PREC} bits did not separate); "
            "use a smaller call")
    total = None
    for k, num in parts.items():
        prod = num
        for other, sq in squares.items():
            if other != k:
                prod = prod * sq
        total = prod if total is None else total + prod
    if const:
        prod = fmpq_of(const)
        for sq in squares.values():
            prod = prod * sq
        total = total + prod
    return total.is_zero()
