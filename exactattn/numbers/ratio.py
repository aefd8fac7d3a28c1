"""The one exact value of attention: :class:`ExpRatio`, ``c + sum_k N_k / Z_k^m`` over softmax rows.

Every share, output and gradient entry of a call is a rational constant plus a sum
over normalisers ``Z_k = sum_j exp(x_kj)`` (one per softmax row, rows with the same
normaliser merged) of ``N_k / Z_k^m``, ``m = 1`` for a share or an output, ``m = 2``
for the backward's entries; dQ and dK also carry the scale ``1/sqrt(D)`` when it is
irrational.  A value is built from a *source* and a *recipe* (atoms with rational
coefficients):

* a :class:`~exactattn.numbers.softmax.SoftmaxRow`: the atoms are the row's gaps g,
  each ``exp(g) / Z`` (:attr:`ExpRatio.numerators`, :attr:`ExpRatio.row`), ``N`` an
  exponential polynomial (:class:`~exactattn.numbers.exponents.ExpPoly`);
* a :class:`~exactattn.reference.backward.Gradients` block: the atoms are its entries
  (``("dQ", i, c)``, ...), ``N`` a polynomial in the block's generators
  (:class:`~exactattn.numbers.terms.Terms`), its enclosures from the block's.

Values of two sources (a share against a backward's P) meet as exponential polynomials.

By the Lindemann-Weierstrass theorem the exponentials of distinct algebraic exponents
are linearly independent over the algebraic numbers (see
:mod:`exactattn.numbers.softmax`), so every test is exact:

* **zero**: no part left after collecting; one part (a non-constant rational function
  of independent exponentials is never 0); otherwise ``R(1) != 0`` (every exponential
  set to 1) proves ``R != 0``; otherwise an enclosure excluding 0; as a last resort the
  numerator over the common denominator, compared with 0 (refused past
  :data:`MAX_TERMS` terms, with a one-line error);
* **rational**: with no part the constant; with one, irrational; with more, only
  ``R(1)`` can be its value, and the zero test of ``R - R(1)`` decides;
* **sign**, ``==``, ``<``: the zero test, then enclosures (which end, the value being
  non-zero), or the sign of the numerator over a common denominator (values of two
  sources: a share against a backward's P);
* **decimals**: rationals round exactly; any other value through
  :func:`exactattn.numbers.digits.certify` with the exact sign as its ``compare``.

Over a row of rotary or soft-capped logits (cosine, sine, tanh atoms) equality is by
structure and signs come from enclosures up to a bound (:meth:`ExpPoly.sign
<exactattn.numbers.exponents.ExpPoly.sign>`).

>>> from exactattn.numbers.softmax import SoftmaxRow
>>> row = SoftmaxRow([Fraction(1), Fraction(0)], None)
>>> row.share(0).text(), row.share(0).decimal(4)
('exp(1)/(1 + exp(1))', '0.7311')
"""

from __future__ import annotations

from fractions import Fraction

from ..errors import ExactAttnError, InputError, Undecided
from ..options import check_choice
from .digits import arb_to_fraction, enclosure_sign, fraction_text, tighten, \
    working_precision
from .exponents import ExpPoly, sum_text
from .exact import fmpq_of, fraction_of
from .real import Real

__all__ = ["ExpRatio"]

#: enclosures tried (bits) before the common-denominator zero test
ZERO_PREC = 4096
#: the most terms the common-denominator zero test may build
MAX_TERMS = 10 ** 6
#: texts reduce N / Z^2 by their gcd up to this degree
TEXT_DEGREE = 4096
#: the atom of the constant 1 (in a block's recipes)
ONE = ("one",)
#: the printed forms of a value: the forward's ``exp(...)`` form, or over the generators
TEXT_STYLES = ("exp", "generators")


def _rational(x) -> bool:
    return isinstance(x, (int, Fraction)) and not isinstance(x, bool)


class ExpRatio(Real):
    """An exact share, output or gradient entry: ``c + sum_k N_k / Z_k^m`` (see the module).

    Behaves like ``fractions.Fraction``: immutable, ``==``/``<`` compare values
    exactly (also against ``Fraction``, ``int`` and values of other rows and calls),
    equal values hash alike, and conversions are explicit (:meth:`rational`,
    :meth:`decimal`, :meth:`text`, :meth:`closed_form`, :meth:`ball`, ``float()``).
    ``+``, ``-`` and rational multiples stay exact over one row (or one call).

    Over a row, ``numerators`` maps each gap g to ``A_g`` (a share has one term with
    coefficient 1; an output adds the values) and ``row`` is the row.

    >>> from exactattn.numbers.softmax import SoftmaxRow
    >>> a = SoftmaxRow([Fraction(1), Fraction(0)], None).share(0)        # e/(1 + e)
    >>> b = SoftmaxRow([Fraction(2), Fraction(1)], None).share(0)        # e^2/(e + e^2)
    >>> a == b, hash(a) == hash(b), a > Fraction(1, 2), a.text()
    (True, True, True, 'exp(1)/(1 + exp(1))')
    >>> from exactattn.call.policy import Policy
    >>> from exactattn.gradients import gradients
    >>> g = gradients([[1]], [[0], [1]], [[0], [1]], [[1]], Policy(scale="none"))
    >>> v = g.dV[1][0]                       # e/(1 + e)
    >>> v.text(), v == a, v.decimal(6), (v + g.dV[0][0]).rational()
    ('exp(1)/(1 + exp(1))', True, '0.731059', Fraction(1, 1))
    >>> v.text(style="generators")
    't/(t + 1) where t = exp(1)'
    """

    __slots__ = ("recipe", "source", "scaled", "forward", "_parts", "_rational", "_zero",
                 "_hash")

    def __init__(self, numerators: dict, row, scaled: bool = False):
        self.recipe = {g: a for g, a in numerators.items() if a != 0}
        self.source = row
        self.scaled = scaled
        #: True for a value over one softmax row (a share or an output)
        self.forward = hasattr(row, "counts")
        self._parts = None
        self._rational = False      # not computed yet (None means irrational)
        self._zero = None
        self._hash = None

    @property
    def row(self):
        """The softmax row of a share or an output (none for a gradient entry)."""
        if not self.forward:
            raise AttributeError("a gradient entry has no softmax row (it sums over rows)")
        return self.source

    @property
    def numerators(self) -> dict:
        """Over a row: gap -> ``A_g`` (none for a gradient entry)."""
        return self.recipe if self.forward else None

    @property
    def nan(self) -> bool:
        """True when the value is NaN (an empty row under ``empty_row='nan'`` feeds it)."""
        if self.forward:
            return self.source.nan
        return any(self.source.atom_nan(a) for a in self.recipe)

    def _nan(self) -> bool:
        return self.nan

    #: True for a gradient entry over rotary or soft-capped logits (a certified block)
    _enclosed = property(lambda self: not self.forward and self.source.certified)
    certified = property(lambda self: self.source.certified,
                         doc="True over rotary or soft-capped logits: signs from enclosures")

    def _bounded(self, other=0) -> int:
        """sign(self - other) of a certified block's entry: 0 when an enclosure is exactly 0
        (a hidden key's entry, equal recipes), else from enclosures up to MAX_PREC bits.

        Raises:
            Undecided: the enclosures still hold 0 at MAX_PREC bits (no theorem decides it).
        """
        from flint import arb
        return enclosure_sign(lambda p: self.ball(p) - (
            other.ball(p) if isinstance(other, ExpRatio) else arb(fmpq_of(Fraction(other)))),
            lambda: "a gradient entry over rotary or soft-capped logits")

    def _check_number(self) -> None:
        if self.nan:
            raise InputError("value must be a number to be compared (got nan: an empty row "
                             "under empty_row='nan' feeds it)")

    # -- exact structure -----------------------------------------------------
    def parts(self) -> tuple[Fraction, dict]:
        """``(c, {class: N})`` of a block's entry: the constant and each normaliser's numerator
        ``N`` over ``Z^2`` in the block's generators (``fmpq_mpoly``; exact, cached); a class
        whose numerator is a rational multiple of ``Z^2`` is folded into c.
        """
        if self._parts is not None:
            return self._parts
        src, const, out = self.source, Fraction(0), {}
        from flint import fmpq
        terms, merged = src.terms, {}
        for atom, coef in self.recipe.items():
            for key, poly in src.atom_parts(atom).items():
                p = poly * fmpq_of(Fraction(coef))
                merged[key] = merged[key] + p if key in merged else p
        for key, poly in merged.items():
            if poly.is_zero():
                continue
            c = fraction_of(sum(poly.coeffs(), fmpq(0))) / (len(key) * len(key))
            if c and poly == terms.normaliser_squared(key) * fmpq_of(c):
                const += c
            else:
                out[key] = poly
        self._parts = (const, out)
        return self._parts

    def _fraction(self) -> tuple[ExpPoly, ExpPoly]:
        """``(N, D)``: the value as ``N / D`` over exponential polynomials (:class:`ExpPoly`),
        ``D > 0``, so that values of any two sources compare: over a row, its normaliser; of
        a block, the product of its squared normalisers (scale left out)."""
        if not self.forward:
            terms = self.source.terms
            return tuple(terms.exp_poly(p) for p in self._over_squares(Fraction(0)))
        src = self.source
        if not src.counts:
            return ExpPoly((), {}), ExpPoly((), {(Fraction(0),): Fraction(1)})
        return src.rel(self.recipe), src.rel(src.counts)

    def _over_squares(self, q: Fraction) -> tuple:
        """``(N, D)`` of a block's ``value - q`` in its generators (``fmpq_mpoly``), ``D`` the
        product of the squared normalisers, within :data:`MAX_TERMS` terms.

        Raises:
            ExactAttnError: ``N`` would pass :data:`MAX_TERMS` terms.
        """
        const, parts = self.parts()
        terms = self.source.terms
        squares = [terms.normaliser_squared(k) for k in parts]
        size = max((len(p) for p in parts.values()), default=1)
        for sq in squares:
            size *= len(sq)
        if size > MAX_TERMS:
            raise ExactAttnError(
                f"value must be decided within {MAX_TERMS} polynomial terms (got about {size}: "
                f"{len(parts)} normalisers that enclosures to {ZERO_PREC} bits did not separate); "
                "use a smaller call")
        den = terms.context.constant(1)
        num = den * fmpq_of(const - q)
        for n, sq in zip(parts.values(), squares):
            num, den = num * sq + n * den, den * sq
        return num, den

    def _at_one(self) -> Fraction:
        """``R(1)``: the value with every generator set to 1 (every score equal)."""
        from flint import fmpq
        const, parts = self.parts()
        return const + sum((fraction_of(sum(p.coeffs(), fmpq(0))) / (len(k) * len(k))
                            for k, p in parts.items()), Fraction(0))

    def is_zero(self) -> bool:
        """True exactly when the value is 0.

        Raises:
            ExactAttnError: neither the structure, enclosures up to :data:`ZERO_PREC` bits
                nor a common denominator of at most :data:`MAX_TERMS` terms decide it.
        """
        if self._zero is None:
            self._check_number()
            self._zero = self.sign() == 0 if self.forward else \
                self._bounded() == 0 if self._enclosed else self._is(Fraction(0))
        return self._zero

    def _is(self, q: Fraction) -> bool:
        """True exactly when a value of a block is q (unscaled, or q = 0)."""
        const, parts = self.parts()
        if not parts:
            return const == q
        if len(parts) == 1 or self._at_one() != q:
            return False
        from flint import arb
        if tighten(lambda p: True if not (self.ball(p) - arb(fmpq_of(q))).contains(0) else None,
                   64, max_prec=ZERO_PREC):
            return False
        return self._over_squares(q)[0].is_zero()

    def rational(self) -> Fraction | None:
        """The value as a ``Fraction`` when it is rational, else None (also for NaN).

        >>> from exactattn.numbers.softmax import SoftmaxRow
        >>> SoftmaxRow([Fraction(0), Fraction(0)], None).share(0).rational()
        Fraction(1, 2)
        """
        if self._rational is not False:
            return self._rational
        if self.nan:
            q = None
        elif self.forward:
            q = self._row_rational()
        elif self._enclosed:         # an exact enclosure is the value (a hidden key's 0)
            with working_precision(64):
                b = self.ball(64)
            q = arb_to_fraction(b.mid()) if b.is_exact() and b.is_finite() else None
        elif self.scaled:
            q = Fraction(0) if self.is_zero() else None
        else:
            const, parts = self.parts()
            q = const if not parts else None
            if len(parts) > 1:
                q1 = self._at_one()
                q = q1 if self._is(q1) else None
        self._rational = q
        return q

    def _row_rational(self) -> Fraction | None:
        """Over a row: rational exactly when ``A_g = q C_g`` for one q."""
        counts = self.source.counts
        if not counts:
            return Fraction(0)
        if self.recipe and len(self.recipe) < len(counts):
            return None  # some gap has A_g = 0 while another has A_g != 0
        q = None
        for g, c in counts.items():
            ratio = Fraction(self.recipe.get(g, 0)) / c
            if q is None:
                q = ratio
            elif ratio != q:
                return None
        return q

    # -- signs and comparisons ---------------------------------------------------
    def sign(self) -> int:
        """-1, 0 or 1, exactly: from enclosures up to MAX_PREC bits, else from the numerator
        over the common denominator (the normalisers and the scale are positive).

        Over rotary or soft-capped logits: 0 when every numerator coefficient is 0,
        else from enclosures up to a bound (:meth:`ExpPoly.sign <exactattn.numbers.exponents.ExpPoly.sign>`).
        """
        self._check_number()
        if self.forward:
            src = self.source
            return src.rel(self.recipe).sign() if src.counts and not src.nan else 0
        if self._enclosed:
            return self._bounded()
        if self.is_zero():
            return 0
        try:
            return enclosure_sign(self.ball, self.text)
        except Undecided:
            return self._fraction()[0].sign()

    def _minus_sign(self, q) -> int:
        """sign(value - q) for a rational q, exactly."""
        self._check_number()
        q = Fraction(q)
        if self._enclosed:
            return self._bounded(q)
        if self.forward or not self.scaled:
            r = self.rational()
            if r is not None:
                return (r > q) - (r < q)
            return (self - q).sign()
        if q == 0:
            return self.sign()
        from flint import arb     # s R(t) is never a non-zero rational: enclosures decide
        return enclosure_sign(lambda p: self.ball(p) - arb(fmpq_of(q)), self.text, bounded=False)

    def _order(self, other) -> int:
        """sign(self - other), exactly."""
        if _rational(other):
            return self._minus_sign(other)
        if not isinstance(other, ExpRatio):
            return NotImplemented
        self._check_number()
        other._check_number()
        if self._enclosed or other._enclosed:      # one block: the difference's recipe first
            same = self.source is other.source and self.scaled == other.scaled
            return (self - other)._bounded() if same else self._bounded(other)
        if not self.forward and self.source is other.source and self.scaled == other.scaled:
            return (self - other).sign()
        q1, q2 = self.rational(), other.rational()
        if q1 is not None and q2 is not None:
            return (q1 > q2) - (q1 < q2)
        if self.scaled != other.scaled:     # one carries the irrational scale: equal only when
            if self.is_zero() and other.is_zero():     # both are 0 (sqrt(D) is algebraic, so
                return 0                               # not a ratio of exponential polynomials)
            return enclosure_sign(lambda p: self.ball(p) - other.ball(p), self.text, bounded=False)
        if self.forward and other.forward and self.row.same_normaliser(other.row):
            if self.recipe == other.recipe:
                return 0
            return (self.row.rel(self.recipe) - other.row.rel(other.recipe)).sign()
        (n1, d1), (n2, d2) = self._fraction(), other._fraction()
        return (n1 * d2 - n2 * d1).sign()

    # -- numeric ------------------------------------------------------------------
    def ball(self, prec: int):
        """An ``arb`` enclosure computed at ``prec`` bits (set by the caller's context)."""
        from flint import arb
        if self.nan:
            return arb.nan()
        src = self.source
        if not self.forward:
            atoms = ((src.atom_ball(atom, prec), c) for atom, c in self.recipe.items())
            return sum((b if c == 1 else b * fmpq_of(Fraction(c)) for b, c in atoms), arb(0))
        if not src.counts:
            return arb(0)
        balls = src.exp_balls(prec)
        num = sum((arb(fmpq_of(Fraction(a))) * balls[g] for g, a in self.recipe.items()), arb(0))
        return num / src.normaliser(prec, balls)

    # -- arithmetic -----------------------------------------------------------------
    def __add__(self, other):
        """``self + other`` exactly: a rational other, or a value over the same normaliser (the
        same call).

        Raises:
            InputError: two values over different normalisers or calls (their sum is not
                a value over one source), or with and without the irrational scale.
        """
        src = self.source
        if _rational(other):
            if not other or (self.forward and src.nan):
                return self
            if not self.forward:
                if self.scaled:
                    raise InputError("value must not carry the scale 1/sqrt(D) to be added to a "
                                     f"rational (got {self.text()} and {other}); add values of "
                                     "one kind")
                return ExpRatio({**self.recipe, ONE: self.recipe.get(ONE, 0) + Fraction(other)},
                                src)
            if not src.counts:                # an empty row's 0, plus q
                return ExpRatio({0: Fraction(other)}, type(src)([Fraction(0)], None))
            return ExpRatio({g: self.recipe.get(g, 0) + other * c
                             for g, c in src.counts.items()}, src)
        if not isinstance(other, ExpRatio):
            return NotImplemented
        if self.forward and other.forward:
            if src.nan or other.row.nan:
                return self if src.nan else other
            q = other.rational()
            if q is not None:
                return self + q
            q = self.rational()
            if q is not None:
                return other + q
            if not src.same_normaliser(other.row):
                raise InputError(f"values must share one softmax normaliser to be added exactly "
                                 f"(got {self.text()} and {other.text()})")
        elif other.source is not src:
            raise InputError("values must come from one call to be added exactly (got two calls)")
        elif self.scaled != other.scaled and self.recipe and other.recipe:
            raise InputError("values must both carry the scale 1/sqrt(D) or both not to be "
                             "added exactly (got one of each)")
        recipe = dict(self.recipe)
        for a, c in other.recipe.items():
            recipe[a] = recipe.get(a, 0) + c
        return ExpRatio(recipe, src, self.scaled or other.scaled)

    __radd__ = __add__

    def __neg__(self) -> "ExpRatio":
        return self * -1

    def __sub__(self, other):
        return self + (-other)

    def __rsub__(self, other):
        return (-self) + other

    def __mul__(self, other):
        if not _rational(other):
            return NotImplemented
        return ExpRatio({a: c * other for a, c in self.recipe.items()}, self.source, self.scaled)

    __rmul__ = __mul__

    # -- views ---------------------------------------------------------------
    def closed_form(self):
        """The sympy closed form, written with the scaled scores (not the gaps)."""
        import sympy
        row = self.source
        if self.nan:
            return sympy.nan
        if not self.forward:      # the text read by sympy (every number in it exact)
            return sympy.sympify(self.text().replace("^", "**"))
        if not row.counts:
            return sympy.Integer(0)
        num = sympy.Add(*[sympy.Rational(a.numerator, a.denominator) * row.term(g)
                          for g, a in self.recipe.items()])
        den = sympy.Add(*[c * row.term(g) for g, c in row.counts.items()])
        return num / den

    def _text(self, style: str = "exp") -> str:
        """The closed form without sympy: a rational as itself (``1/2``); by default in the
        forward's ``exp(...)`` form (``exp(1)/(1 + exp(1))``, terms by increasing exponent,
        the scores written scaled), a gradient's ``N/Z^2`` with its squared normaliser kept
        factored (``2*exp(1)/(1 + exp(1))^2``); ``style="generators"``: a gradient's
        polynomials in the generators with ``where t = ...`` (``(2*t)/(t + 1)^2 where t =
        exp(1)``), shorter over a whole table of one call."""
        check_choice(style, "style", TEXT_STYLES)
        if self.forward:
            row = self.source
            num = row_sum_text(row, self.recipe)
            if len(self.recipe) > 1:
                num = f"({num})"
            return f"{num}/({row_sum_text(row, row.counts)})"
        if self._enclosed:
            raise InputError("value must be over exact logits to be written in closed form (got "
                             "a gradient over rotary or soft-capped scores); use .decimal(places)")
        const, parts = self.parts()
        terms = self.source.terms
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
            body = f"({body})/sqrt({self.source.irrational_scale})"
        return body if style == "exp" else f"{body} where {terms.generator_text()}"

    def __repr__(self) -> str:
        if self._enclosed and self.rational() is None:     # no closed form: its enclosure
            with working_precision(64):
                return f"ExpRatio(in {self.ball(64).str(10)})"
        return f"ExpRatio({self.text()})"


def _paren(poly) -> str:
    text = str(poly)
    bare = len(poly) == 1 and "*" not in text.lstrip("-") and "/" not in text
    return text if bare else f"({text})"


def row_sum_text(row, coefficients: dict) -> str:
    """``sum_g c_g exp(g)`` over a softmax row, written by increasing exponent."""
    return sum_text([(row.order_key(g), row.term_text(g), Fraction(c))
                     for g, c in coefficients.items()])
