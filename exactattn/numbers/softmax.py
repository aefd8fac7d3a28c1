"""Exact shares: the row-wise softmax of scaled scores, as values like ``Fraction``.

For a row of raw scores ``r_j`` (rational; ``None`` where the key is hidden),
a divisor ``sqrt(D)`` (``D`` rational, so sqrt(d_k) stays exact) and optional
additive offsets ``m_j`` (an additive mask, a bias), the share of key j is::

    shares[j] = exp(r_j / sqrt(D) + m_j) / sum_k exp(r_k / sqrt(D) + m_k)

Every share and every output ``sum_j shares[j] * values[j]`` has the form
``sum_e A_e exp(e) / sum_e C_e exp(e)`` where ``e`` runs over the distinct
exponents of the row, ``C_e`` counts the keys at exponent e and ``A_e`` adds
their values.  :class:`ExpRatio` holds exactly that, relative to the row's
largest exponent (the gaps, all <= 0).  By the Lindemann-Weierstrass theorem
the powers ``exp(e)`` for distinct algebraic e are linearly independent over
the algebraic numbers, so:

* such a ratio is rational exactly when ``A_e = q C_e`` for one rational q
  (:meth:`ExpRatio.rational`);
* two ratios are equal exactly when ``num1 den2 - num2 den1`` collects to the
  zero exponential polynomial, and otherwise its sign is decided by ball
  arithmetic at a precision that always suffices (:meth:`ExpRatio.sign`);
* every certified rounding terminates: a value on a rounding boundary is
  rational, and one beside it is decided by the exact sign of its distance to
  the boundary (:meth:`ExpRatio.decimal`).

Exponents are exact (rationals, or ``a / sqrt(D) + b``; see
:mod:`exactattn.numbers.exponents`).

Exactness: the values are exact; decimals are certified (correctly rounded).
The row maximum is subtracted on the rationals, before any exponential, so no
enclosure overflows (``exp(800)`` is never formed).

Reference: Vaswani et al. 2017, "Attention is all you need", sec. 3.2.1.

>>> row = SoftmaxRow([Fraction(25, 8), Fraction(0), Fraction(3, 4), Fraction(0)], Fraction(4))
>>> row.share(0).text()
'exp(25/16)/(2 + exp(3/8) + exp(25/16))'
>>> [row.share(j).decimal(4) for j in range(4)]
['0.5800', '0.1216', '0.1769', '0.1216']
>>> row.share(1) == row.share(3), row.share(1) < row.share(2), row.sum_is_one()
(True, True, True)
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from operator import sub
from typing import Sequence

from ..options import EMPTY_ROWS, check_choice
from .digits import arb_to_fraction, working_precision
from .exact import rational_sqrt
from .reals import Surd, align, atom_ball, real_ball, real_compare, real_text
from .exponents import ExpPoly, exp_polys, exponent_text, exponent_value
from .exact import fmpq_of
from .ratio import ExpRatio

__all__ = ["SoftmaxRow"]


# --------------------------------------------------------------------------- rows
class _Gap(Fraction):
    """A score gap: a ``Fraction`` whose hash is computed once (a row's gaps key the
    numerators of every output over it, so each is hashed once per output otherwise)."""

    __slots__ = ("_hash",)

    def __hash__(self):
        try:
            return self._hash
        except AttributeError:
            self._hash = h = Fraction.__hash__(self)
            return h

    def __repr__(self):
        return f"Fraction({self.numerator}, {self.denominator})"


class SoftmaxRow:
    """The exact softmax of one row of raw scores divided by ``sqrt(D)``, plus offsets.

    Args:
        raw: the row's raw scores (``Fraction``); ``None`` marks a hidden key.
        divisor_squared: ``D`` as a ``Fraction`` (the divisor is ``sqrt(D)``),
            or None for no scaling.
        empty_row: what a row with every key hidden gives: ``"zero"`` (shares
            and output 0), ``"uniform"`` (1/n each) or ``"nan"``.
        offsets: optional rationals added to the scaled scores (an additive
            mask or bias), one per key.

    ``gaps[j]`` is key j's exponent minus the row's largest, None if hidden:
    a ``Fraction`` g (exponent ``g / sqrt(D)``, or ``g`` with no divisor); with
    offsets and an irrational divisor the logits ``r / sqrt(D) + m`` are exact
    values and the row is one of :meth:`of_logits`.  ``counts`` maps each gap to
    its number of keys.

    Counters (reported, not MACs): ``exps`` exponentials, ``adds`` additions
    in the normaliser, ``divs`` divisions, one per visible share.
    """

    def __init__(self, raw: Sequence[Fraction | None], divisor_squared: Fraction | None,
                 empty_row: str = "zero", offsets: Sequence[Fraction] | None = None, *,
                 sink: Fraction | None = None):
        raw = self._answer(raw, empty_row, sink)
        offsets = None if self.empty else offsets
        self.general = self.certified = False
        self.basis = ()
        if sink is not None:     # a key with raw score 0, offset s and no value
            offsets = [Fraction(0)] * len(raw) + [Fraction(sink)] if offsets is None \
                else list(offsets) + [Fraction(sink)]
            raw = raw + [Fraction(0)]
        root = None if divisor_squared is None else rational_sqrt(divisor_squared)
        if offsets is not None and any(m for r, m in zip(raw, offsets) if r is not None):
            if divisor_squared is None:
                raw = [None if r is None else r + m for r, m in zip(raw, offsets)]
            elif root is not None:       # r/root + m = (r + m root)/root
                raw = [None if r is None else r + m * root for r, m in zip(raw, offsets)]
            else:                        # r/sqrt(D) + m: logits keyed (m, r) over the basis (1/sqrt(D))
                self._logits(None, (divisor_squared,), [None if r is None else (Fraction(m), r)
                                                        for r, m in zip(raw, offsets)])
                return
        self.raw = raw
        self.divisor_squared = divisor_squared
        self._root = root
        visible = [r for r in raw if r is not None]
        self.max_raw = max(visible) if visible else None
        self.gaps = [None if r is None else _Gap(r - self.max_raw) for r in raw]
        self._count(visible)

    @classmethod
    def of_logits(cls, logits: Sequence, empty_row: str = "zero", *, sink=None) -> "SoftmaxRow":
        """The softmax of logits that are already scaled and modified.

        Each logit is None (hidden), a ``Fraction`` or a :class:`~exactattn.numbers.reals.Surd`:
        exact algebraic (an ALiBi slope such as 2^(-1/2)) or over cosine, sine and
        tanh atoms (a rotary or soft-capped score, in canonical form).  ``sink`` is a
        logit that joins the normaliser and carries no value (an attention sink; 0
        gives "softmax plus one").

        Equal logits are equal forms, so ties are exact.  With algebraic logits
        every value is decided exactly (Lindemann-Weierstrass); with a cosine, sine
        or tanh atom (``certified``), digits come from enclosures and a comparison
        of forms that differ is bounded (:class:`~exactattn.errors.Undecided`).

        >>> from exactattn.numbers.reals import two_power
        >>> row = SoftmaxRow.of_logits([Fraction(0), -two_power(Fraction(-1, 2))])
        >>> row.share(0).text(), row.share(0).decimal(6)
        ('1/(exp(-1/sqrt(2)) + 1)', '0.669762')
        >>> SoftmaxRow.of_logits([Fraction(1), Fraction(0)], sink=Fraction(0)).sink_share().text()
        '1/(2 + exp(1))'
        """
        self = cls.__new__(cls)
        logits = self._answer(logits, empty_row, sink)
        if sink is not None:
            logits.append(sink)
        self._logits(logits)
        return self

    def _logits(self, logits: list | None, basis: tuple = (), keys: list | None = None) -> None:
        """The row of exact logits (sink included), or of their ``keys`` over ``basis``
        (:func:`~exactattn.numbers.reals.align`'s form): gaps over one basis."""
        self.divisor_squared, self._root, self.general = None, None, True
        self.certified = False
        if keys is None:
            visible = [x for x in logits if x is not None]
            # a cosine, sine or tanh atom: the logits stay values (their canonical forms hash
            # and compare exactly, so ties share one gap); digits come from enclosures, and
            # signs of differing forms are bounded
            self.certified = any(isinstance(x, Surd) and x.transcendental for x in visible)
            if self.certified:
                self.basis = ()
                self.raw = self.gaps = logits
                with working_precision(64):
                    self.max_raw = max(arb_to_fraction(real_ball(x, 64).mid()) for x in visible)
                self._count(visible)
                return
            basis, keys = align(logits)
        visible = [k for k in keys if k is not None]
        self.basis = basis
        self.raw = keys
        top = None
        for k in keys:        # the largest logit, compared exactly
            if k is not None and (top is None or
                                  exponent_value(basis, tuple(map(sub, k, top))).sign() > 0):
                top = k
        self.max_raw = top
        self.gaps = [None if k is None else tuple(a - b for a, b in zip(k, top)) for k in keys]
        self._count(visible)

    def _answer(self, values, empty_row: str, sink) -> list:
        """The row's values, or what an empty row (every key hidden, no sink) reads under
        ``empty_row``: a ``uniform`` row sees every key at 0 (shares 1/n), the others none."""
        check_choice(empty_row, "empty_row", EMPTY_ROWS)
        values = list(values)
        self.n_keys, self.empty_row = len(values), empty_row
        self.empty = all(x is None for x in values) and sink is None
        return [Fraction(0)] * len(values) if self.empty and empty_row == "uniform" else values

    def _count(self, visible) -> None:
        self.counts = counts = dict(Counter(g for g in self.gaps if g is not None))
        self.exps = len(counts)
        self.adds = max(len(visible) - 1, 0)
        self.divs = len([g for g in self.gaps[:self.n_keys] if g is not None])

    @property
    def has_sink(self) -> bool:
        return len(self.gaps) > self.n_keys

    def sink_share(self) -> "ExpRatio":
        """The share the sink takes (0 without a sink): 1 minus the keys' shares."""
        g = self.gaps[self.n_keys] if self.has_sink else None
        return ExpRatio({} if g is None else {g: Fraction(1)}, self)

    def same_normaliser(self, other: "SoftmaxRow") -> bool:
        """True when both rows have the same normaliser term by term (so values over them add)."""
        return self is other or (self.counts == other.counts and self.max_raw == other.max_raw
                                 and self.divisor_squared == other.divisor_squared
                                 and self.general == other.general and self.basis == other.basis
                                 and self.certified == other.certified)

    def __len__(self) -> int:
        return self.n_keys

    @property
    def nan(self) -> bool:
        return self.empty and self.empty_row == "nan"

    def combine(self, values: Sequence[Fraction]) -> "ExpRatio":
        """``sum_j shares[j] * values[j]`` as an exact ratio (hidden keys skipped)."""
        num: dict = {}
        for g, w in zip(self.gaps, values):
            if g is not None:
                a = num.get(g)
                num[g] = w if a is None else a + w
        return ExpRatio(num, self)

    def share(self, j: int, factor: Fraction = Fraction(1)) -> "ExpRatio":
        """The exact share of key ``j``, times ``factor`` (a dropout weight: ``keep / (1 - p)``)."""
        g = self.gaps[j]
        return ExpRatio({} if g is None else {g: Fraction(factor)}, self)

    def shares(self) -> list["ExpRatio"]:
        return [self.share(j) for j in range(self.n_keys)]

    def largest(self) -> list[int]:
        """The keys with the largest share, in order (a sink is not a key: when its logit is
        the row's largest, the keys are compared among themselves, exactly).

        >>> SoftmaxRow([Fraction(1), Fraction(0)], None, sink=Fraction(5)).largest()
        [0]
        """
        gaps = self.gaps[:self.n_keys]
        if self.certified or self.has_sink and \
                not any(g is not None and g == self.zero_gap for g in gaps):
            seen, top = [(j, self.logit(g)) for j, g in enumerate(gaps) if g is not None], None
            for _, x in seen:          # the keys' largest logit, compared exactly
                if top is None or real_compare(x, top) > 0:
                    top = x
            return [j for j, x in seen if real_compare(x, top) == 0]
        return [j for j, g in enumerate(gaps) if g is not None and g == self.zero_gap]

    @property
    def zero_gap(self):
        """The gap of the row's largest logit (0 in the gaps' own form; rows of exact gaps)."""
        return (Fraction(0),) * (len(self.basis) + 1) if self.general else Fraction(0)

    def shift_ball(self, prec: int):
        """An enclosure of what :meth:`exp_balls` subtracts from every exponent (about the
        row's largest logit), so ``log(normaliser) = shift + log(sum of the balls)``."""
        if self.certified:
            return real_ball(self.max_raw, prec)
        return real_ball(self.logit(self.zero_gap), prec)

    def sum_is_one(self) -> bool:
        """True: the numerators of the shares add up to the normaliser term by term.

        Each visible key contributes ``exp(g_j)`` once to the numerators and
        once to the normaliser, so the two sums are the same multiset of terms;
        the check compares them exactly (it is a proof, not a float sum).
        An empty row under the ``zero`` policy sums to 0 and returns False.
        """
        total = Counter(g for g in self.gaps[:self.n_keys] if g is not None)
        return bool(total) and total == self.counts

    # -- exact exponents -----------------------------------------------------
    def exponent(self, g) -> tuple[tuple, tuple]:
        """The absolute exponent of gap ``g`` as ``(basis, (p, a_1, ...))``: ``p + sum a_k basis[k]``.

        A basis entry is a ``Fraction`` D (the atom ``1/sqrt(D)``) or a ``2^f`` atom (not
        over rotary or soft-capped logits, whose gaps are the logits themselves).
        """
        if self.general:
            return self.basis, tuple(a + b for a, b in zip(g, self.max_raw))
        s = g + self.max_raw
        if self.divisor_squared is None:
            return (), (s,)
        if self._root is not None:
            return (), (s / self._root,)
        return (self.divisor_squared,), (Fraction(0), s)

    def logit(self, g):
        """The absolute exponent of gap ``g`` as a value: a ``Fraction`` when rational, else a
        :class:`~exactattn.numbers.reals.Surd`.

        >>> SoftmaxRow([Fraction(3), Fraction(1)], Fraction(2)).logit(Fraction(-2))
        Surd(1/sqrt(2))
        """
        if self.certified:
            return g
        basis, e = self.exponent(g)
        return Surd(e[0], tuple(zip(basis, e[1:]))) if any(e[1:]) else Fraction(e[0])

    def poly(self, coefficients: dict) -> ExpPoly:
        """``sum_g c_g exp(g)`` as an exact :class:`~exactattn.numbers.exponents.ExpPoly`, over
        the absolute exponents (the scaled scores), of a row that sees a key."""
        if self.certified:           # one basis for every logit of the sum
            return exp_polys([(coefficients, coefficients.values())])[0]
        basis, top = self.exponent(self.zero_gap)
        return self.rel(coefficients) * ExpPoly(basis, {top: Fraction(1)})

    def rel(self, coefficients: dict) -> ExpPoly:
        """``sum_g c_g exp(g)`` over the gaps themselves (the row's largest logit, a factor of
        every term, left out; over rotary or soft-capped logits, the logits) as an ExpPoly."""
        D, root = self.divisor_squared, self._root
        if self.certified:
            return self.poly(coefficients)
        if self.general:
            return ExpPoly(self.basis, coefficients)
        if D is not None and root is None:
            return ExpPoly((D,), {(Fraction(0), g): c for g, c in coefficients.items()})
        return ExpPoly((), {(g if root is None else g / root,): c
                            for g, c in coefficients.items()})

    # -- numeric evaluation --------------------------------------------------
    def exp_balls(self, prec: int) -> dict:
        """``{gap: ball of exp(gap exponent)}`` at ``prec`` bits (cached per precision)."""
        cache = getattr(self, "_ball_cache", None)
        if cache is None:     # one dict per precision: the certified digits of a row's shares
            cache = self._ball_cache = {}      # alternate between a few precisions
        elif prec in cache:
            return cache[prec]
        elif len(cache) >= 16:        # 64 .. 2^16 bits: eleven
            cache.pop(next(iter(cache)))
        from flint import arb
        if self.certified:
            shift = real_ball(self.max_raw, prec)
            balls = {g: (real_ball(g, prec) - shift).exp() for g in self.counts}
        elif self.general:
            balls = {g: exponent_value(self.basis, g).ball().exp() for g in self.counts}
        else:
            D = self.divisor_squared
            inv = None if D is None else atom_ball(D)
            # a term below exp(-K) (K = prec + 64 > (prec + 64) ln 2) is enclosed by [0, 2^-K]
            # without computing exp to the precision its exponent would need: a gap of
            # 10^8000 costs no more than a gap of 1
            K = prec + 64
            bound, negligible = K * K * (1 if D is None else D), arb(0, arb(2) ** -K)
            balls = {g: negligible if g < -K and g * g > bound else
                     (arb(fmpq_of(g)) if inv is None else arb(fmpq_of(g)) * inv).exp()
                     for g in self.counts}
        cache[prec] = balls
        return balls

    def normaliser(self, prec: int, balls: dict):
        """``sum_g C_g exp(g)`` as a ball, summed once per row and precision."""
        cache = getattr(self, "_den_cache", None)
        if cache is not None and cache[0] == prec and cache[1] is balls:
            return cache[2]
        from flint import arb
        den = sum((c * balls[g] for g, c in self.counts.items()), arb(0))
        self._den_cache = (prec, balls, den)
        return den

    def term(self, g):
        """The sympy closed form of ``exp`` at gap g's absolute exponent (scaled score)."""
        import sympy
        x = self.logit(g)
        return sympy.exp(x.sympy() if isinstance(x, Surd) else
                         sympy.Rational(x.numerator, x.denominator))

    def order_key(self, g):
        """A key that sorts gaps by their exponent (for writing sums in order)."""
        if self.general:     # a rational within 2^-60 of the exponent: order for text only
            with working_precision(128):
                x = real_ball(g if self.certified else exponent_value(self.basis, g), 128)
                return arb_to_fraction(x.mid())
        return g      # the exponent is g / sqrt(D) or g (no offsets here: they make logits)

    def term_text(self, g) -> str:
        """``exp(...)`` of gap g's absolute exponent, written with the scaled score."""
        if self.certified:
            text = real_text(g)
            return "1" if text == "0" else f"exp({text})"
        return exponent_text(*self.exponent(g))
