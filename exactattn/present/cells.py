"""The text of one table cell: exact rationals, scaled scores, shares and vectors.

Every number a table prints is exact or certified:

* a rational prints as a fraction, with its decimal when it terminates
  (``25/8 = 3.125``) or a correctly rounded one when it does not (``1/3 ~
  0.3333``);
* a score divided by an irrational divisor prints as ``c*sqrt(m)`` (the
  spelling sympy uses, built here without sympy) with a certified decimal;
* a row of integers over one denominator (a trace's raw scores,
  :meth:`~exactattn.engines.trace.Trace.raw_score_ints`) prints entry by entry the same way, with
  one gcd per entry, decimals rounded in numpy int64 when every product fits
  (:func:`fraction_texts`);
* a value too long to print whole (an integer past Python's 4,300-digit
  limit on int-to-str conversion, e.g. the score of two entries ``1e2200``)
  prints in scientific form with 16 correctly rounded significant digits,
  marked ``~``: ``~1.000000000000000e+4400``.  It never raises.

Rounding is exact (ties to even), as :func:`exactattn.numbers.digits.round_fraction`
does it, and irrational values go through :func:`exactattn.numbers.digits.certify`.

>>> from fractions import Fraction as F
>>> with_decimal(F(25, 8), 4), with_decimal(F(1, 3), 4), with_decimal(F(3), 4)
('25/8 = 3.125', '1/3 ~ 0.3333', '3')
>>> exact_text(F(10) ** 4400)
'~1.000000000000000e+4400'
>>> Scaler(F(2)).text(F(-33, 25), 4)
'-33*sqrt(2)/50 ~ -0.9334'
"""

from __future__ import annotations

import sys
from collections import Counter
from fractions import Fraction

from ..call.policy import divisor_text
from ..numbers.digits import format_scaled, round_fraction, terminating_places
from ..numbers.exact import fraction_of, rational_sqrt
from ..numbers.formats import LOG10_2, exponent10, scientific_parts, scientific_text
from ..engines.head import scaled_score
from ..numbers.exponents import sum_text
from ..numbers.ratio import row_sum_text
from ..numbers.reals import Surd, square_free
from ..numbers.softmax import SoftmaxRow
from .render import Cell, Vector, reader_text

#: significant digits of a value too long to print whole
SCI_DIGITS = 16
#: digits kept free below Python's limit: a decimal adds up to 50 places to a value's digits
_MARGIN = 64
#: fewer bits than this print whole under any limit Python allows (its least is 640 digits)
_SHORT_BITS = 1900
#: rows whose integers stay below this are reduced and rounded in numpy int64
INT64 = 1 << 62


def is_long(q) -> bool:
    """True when the numerator or denominator of ``q`` has too many digits for ``str``."""
    return isinstance(q, (int, Fraction)) and too_long(q.numerator, q.denominator)


def too_long(*ints: int) -> bool:
    """True when any of ``ints`` has too many digits to print whole (with a decimal)."""
    bits = max(abs(v).bit_length() for v in ints)
    if bits < _SHORT_BITS:
        return False
    limit = sys.get_int_max_str_digits()         # 0: no limit
    return bool(limit) and bits * LOG10_2 + 1 >= limit - _MARGIN


def magnitude(ints: list) -> int:
    """The largest ``|v|`` of the integers (None skipped; 0 for none)."""
    seen = [v for v in ints if v is not None]
    return max(max(seen), -min(seen)) if seen else 0


def fraction_texts(ints: list, den: int, places: int | None, top: int | None = None) -> list:
    """``ints[j] / den`` as exact texts (``3/8``, ``1``), with ``= 0.375`` / ``~ 0.3333``
    decimals when ``places`` is given; None stays None.  Entries must be short enough
    to print (see :func:`is_long`).

    >>> fraction_texts([3, -1, 8, None], 8, 4)
    ['3/8 = 0.375', '-1/8 = -0.125', '1', None]
    >>> fraction_texts([1, 2], 3, 4), fraction_texts([1, 2], 3, None)
    (['1/3 ~ 0.3333', '2/3 ~ 0.6667'], ['1/3', '2/3'])

    A row whose integers (times ``10**places``) fit in 62 bits is reduced and
    rounded with numpy, exactly; others entry by entry in Python integers.
    """
    scale = 1 if places is None else 10 ** places
    top = magnitude(ints) if top is None else top
    if len(ints) >= 32 and den < INT64 and top * scale < INT64 // 4:
        return _vector_texts(ints, den, places)
    return [None if v is None else _text(v, den, places) for v in ints]


def with_rounded(text: str, num: int, den: int, places: int = 0, *, rounded: str | None = None,
                 exact: bool = True) -> str:
    """The one spelling of an exact fraction with its decimal: ``text = 0.375`` or ``text ~ 0.3333``.

    ``num/den`` in lowest terms: ``=`` and its exact decimal when that
    terminates (and ``exact``), else ``~`` and ``rounded`` (a certified decimal
    at hand) or ``num/den`` rounded to ``places``, ties to even
    (:func:`~exactattn.numbers.digits.round_fraction`).

    >>> with_rounded("3/8", 3, 8), with_rounded("2/3", 2, 3, 4)
    ('3/8 = 0.375', '2/3 ~ 0.6667')
    """
    t = terminating_places(den) if exact else None
    if t is not None:
        return f"{text} = {format_scaled(num * (10 ** t // den), t)}"
    return f"{text} ~ {round_fraction(Fraction(num, den), places) if rounded is None else rounded}"


def _text(v: int, den: int, places: int | None) -> str:
    q = Fraction(v, den)
    return exact_text(q) if places is None else with_decimal(q, places)


def _vector_texts(ints: list, den: int, places: int | None) -> list:
    """:func:`fraction_texts` of a row in int64 (every product proved below 2^62)."""
    import numpy as np
    a = np.array([0 if v is None else v for v in ints], dtype=np.int64)
    g = np.gcd(a, np.int64(den))
    p, q = a // g, np.int64(den) // g
    ps, qs = p.tolist(), q.tolist()
    if places is None:
        out = [str(x) if y == 1 else f"{x}/{y}" for x, y in zip(ps, qs)]
    else:
        scale = 10 ** places
        num = p * scale
        k = num // q                                     # floor
        r = num - k * q
        k += (2 * r > q) | ((2 * r == q) & (k % 2 == 1))  # to nearest, ties to even
        sign = np.where(k < 0, "-", "").tolist()
        whole, frac = np.divmod(np.abs(k), scale)
        exact = [u for u in np.unique(q).tolist() if u == 1 or terminating_places(u) is not None]
        special = np.isin(q, exact).tolist() if exact else [False] * len(ps)
        tails = [f".{f:0{places}d}" for f in frac.tolist()] if places else [""] * len(ps)
        out = [f"{x}/{y} ~ {s}{w}{t}" for x, y, s, w, t in zip(ps, qs, sign, whole.tolist(), tails)]
        for j, hit in enumerate(special):
            if hit:
                out[j] = _text(ps[j], qs[j], places)
    return [None if v is None else t for v, t in zip(ints, out)]


def sci_text(q, digits: int = SCI_DIGITS) -> str:
    """``q`` in scientific form with ``digits`` correctly rounded significant digits, marked ``~``.

    Exact integer arithmetic throughout (no float, no int-to-str of a long
    number), ties to even: :func:`~exactattn.numbers.formats.scientific_parts`.

    >>> sci_text(Fraction(-2, 3), 4), sci_text(Fraction(10) ** 5000 + 5, 4)
    ('~-6.667e-1', '~1.000e+5000')
    """
    if q == 0:
        return "0"
    return "~" + scientific_text(*scientific_parts(q, digits), digits, padded=False)


def sci_root_text(c: Fraction, m: int, digits: int = SCI_DIGITS) -> str:
    """``c*sqrt(m)`` (m > 1 not a square, so irrational) in scientific form, correctly rounded.

    Exact integer arithmetic on the square ``c^2 m``: never on a rounding boundary.

    >>> sci_root_text(Fraction(10) ** 5000, 2, 4)
    '~1.414e+5000'
    """
    from math import isqrt
    sign, y = ("-" if c < 0 else ""), c * c * m          # value^2
    e = exponent10(y) // 2                               # floor(log10 |value|)
    Y = y * Fraction(10) ** (2 * (digits - 1 - e))       # (value * 10^(digits-1-e))^2
    k = isqrt(Y.numerator // Y.denominator)
    if 4 * Y > (2 * k + 1) ** 2:
        k += 1
    return "~" + scientific_text(sign, k, e, digits, padded=False)


def exact_text(q) -> str:
    """A rational as text: ``'25/8'``, ``'3'``, ``'-1/2'``; sympy values via ``str``.

    A rational too long to print whole gives :func:`sci_text` (marked ``~``).
    """
    if isinstance(q, Fraction):
        num, den = q.numerator, q.denominator
        if (num.bit_length() >= _SHORT_BITS or den.bit_length() >= _SHORT_BITS) and is_long(q):
            return sci_text(q)
        return str(num) if den == 1 else f"{num}/{den}"
    if isinstance(q, int) and not isinstance(q, bool):
        return sci_text(q) if is_long(q) else str(q)
    return str(q)


def with_decimal(q, places: int) -> str:
    """``25/8 = 3.125`` (a terminating decimal), ``1/3 ~ 0.3333`` (rounded), ``3``.

    A value too long to print whole gives its scientific form alone.
    """
    if not isinstance(q, Fraction) or q.denominator == 1 or is_long(q):
        return exact_text(q)
    return with_rounded(str(q), q.numerator, q.denominator, places)


def _root_form(value) -> tuple[Fraction, int] | None:
    """``(c, m)`` with value = ``c*sqrt(m)``, m > 1 free of square factors, for a
    :class:`~exactattn.numbers.reals.Surd` ``a/sqrt(D)``; None for any other value."""
    if not isinstance(value, Surd) or value.p or len(value.terms) != 1 or \
            not isinstance(value.terms[0][0], Fraction):
        return None
    (D, a), = value.terms
    c, m = square_free(D)         # a/sqrt(D) = (a c / m) sqrt(m)
    return (a * c / m, m) if m > 1 else None


def root_text(value) -> str:
    """The exact text of a scaled score as sympy spells it: ``25/16``, ``-33*sqrt(2)/50``.

    ``value``: a ``Fraction``, a :class:`~exactattn.numbers.reals.Surd` (``a/sqrt(D)``
    written ``c*sqrt(m)``; other Surds as their own text) or a sympy value.

    >>> root_text(Surd(0, ((Fraction(2), Fraction(-33, 25)),))), root_text(Fraction(25, 16))
    ('-33*sqrt(2)/50', '25/16')
    """
    if isinstance(value, Surd) and value.rational() is not None:
        value = value.rational()
    if not isinstance(value, Surd):
        return exact_text(value)
    form = _root_form(value)
    return value.text() if form is None else _spelled(*form)


def _spelled(c: Fraction, m: int) -> str:
    """``c*sqrt(m)`` as sympy spells it: ``sqrt(2)``, ``-33*sqrt(2)/50``."""
    if is_long(c):
        return f"{sci_text(c)}*sqrt({m})"
    sign, u, w = ("-" if c < 0 else ""), abs(c.numerator), c.denominator
    body = f"sqrt({m})" if u == 1 else f"{u}*sqrt({m})"
    return f"{sign}{body}" if w == 1 else f"{sign}{body}/{w}"


class Scaler:
    """Raw scores divided by ``sqrt(D)`` as exact text: ``25/16`` or ``-33*sqrt(2)/50``.

    ``D`` is the divisor squared (None: no divisor).  The value is the
    engines' (:func:`exactattn.engines.head.scaled_score`: a ``Fraction``, a
    :class:`~exactattn.numbers.reals.Surd` ``a/sqrt(D)`` or sympy); this class only
    writes it (:func:`root_text`), with a certified decimal.
    """

    def __init__(self, divisor_squared: Fraction | None):
        self.D = divisor_squared
        self.root = None if divisor_squared is None else rational_sqrt(divisor_squared)
        #: every scaled score is rational (no divisor, or a rational one)
        self.rational = self.D is None or self.root is not None

    def value(self, raw):
        """``raw / divisor``: :func:`exactattn.engines.head.scaled_score`."""
        return scaled_score(raw, self.D)

    def exact(self, raw) -> str:
        """The exact text of ``raw / divisor``."""
        return root_text(self.value(raw))

    def row(self, ints: list, den: int, places: int | None) -> list:
        """The cells of raw scores ``ints[j] / den`` (None where hidden stays None).

        ``places`` None: exact texts (:meth:`exact`); else cells with their
        decimals (:meth:`text`).  A rational divisor writes the row from
        integers (:func:`~exactattn.present.cells.fraction_texts`): no ``Fraction``.
        """
        a, b = (1, 1) if self.root is None else (self.root.numerator, self.root.denominator)
        top = magnitude(ints)
        if self.rational and not too_long(top * b, den * a):
            return fraction_texts(ints if b == 1 else [None if v is None else v * b
                                                       for v in ints], den * a, places, top * b)
        if places is None and not self.rational:     # the text of a/sqrt(D) straight from integers
            c, m = square_free(self.D)
            return [None if v is None else "0" if v == 0 else _spelled(Fraction(v, den) * c / m, m)
                    for v in ints]
        one = self.exact if places is None else (lambda r: self.text(r, places))
        return [None if v is None else one(Fraction(v, den)) for v in ints]

    def text(self, raw, places: int) -> str:
        """The cell of a scaled score: exact, with its decimal (certified when irrational)."""
        v = self.value(raw)
        if isinstance(v, Surd) and v.rational() is not None:
            v = v.rational()
        if isinstance(v, Fraction):
            return with_decimal(v, places)
        if not isinstance(v, Surd):                   # sympy: a symbolic trace
            if getattr(v, "is_Rational", False):
                return with_decimal(fraction_of(v), places)
            if getattr(v, "free_symbols", None):      # a symbolic score has no decimal
                return str(v)
            from ..engines.trace import SymbolicValue
            return f"{v} ~ {SymbolicValue(v).decimal(places)}"
        form = _root_form(v)
        if form is not None and is_long(form[0]):
            return f"{root_text(v)} ~ {sci_root_text(*form)[1:]}"
        return f"{root_text(v)} ~ {v.decimal(places)}"


def value_cell(value, decimal: str, masked: bool = False, *, short: bool = False) -> str:
    """The cell of a share or output: its certified ``decimal``; for readers, exact values marked.

    ``masked``: the key is hidden from the query (the share is exactly 0).
    An exact rational reads ``1/2 = 0.5`` (``1/3 ~ 0.3333`` when its decimal
    does not terminate), or ``1/2`` alone with ``short`` (inside a vector).
    """
    if masked:
        return Cell(decimal, "masked")
    q = value.rational()
    if q is None:
        return decimal
    text = exact_text(q)
    if q.denominator == 1 or short:
        return Cell(decimal, text)
    return Cell(decimal, with_rounded(text, q.numerator, q.denominator, rounded=decimal,
                                      exact=not is_long(q)))


def at_keys(cell: str, where) -> Cell:
    """``0.5800 at key 1``; for readers the cell's exact text (``1/2 = 0.5 at key 2, 3``)."""
    keys = "key " + ", ".join(str(j + 1) for j in where)
    return Cell(f"{cell} at {keys}", f"{reader_text(cell)} at {keys}")


def certified_cell(value, places: int, readers: bool = True) -> str:
    """The cell of a certified value (a sink's share, a row's sum after dropout): its decimal
    at ``places``, for readers an exact value marked (:func:`value_cell`)."""
    decimal = value.decimal(places)
    return value_cell(value, decimal) if readers else decimal


def vector(v, limit: int | None = None) -> str:
    """``(0, 3, 1/2, 0)``: exact entries as fractions, cells as they are (for each reader).

    With ``limit``, a longer vector shows its first ``limit`` entries and how
    many more there are: ``(1, 2, ..., +56 more)``.
    """
    parts = [p if isinstance(p, str) else exact_text(p) for p in v]
    tail = []
    if limit is not None and len(parts) > limit:
        tail = [f"... +{len(parts) - limit} more"]
        parts = parts[:limit]
    readers = [getattr(p, "reader", p) for p in parts]
    machine = "(" + ", ".join([str.__str__(p) for p in parts] + tail) + ")"
    reader = "(" + ", ".join(readers + tail) + ")"
    short = [t if len(t) <= _SHORT_ENTRY or not isinstance(q, (int, Fraction)) else
             sci_text(Fraction(q), 4) for t, q in zip(readers, v)]
    return Vector(machine, reader, readers, len(v) - len(parts), short)


#: a vector entry longer than this may be shown in short form when a text table is cut
_SHORT_ENTRY = 16


def divisor_words(head, places: int = 4) -> str:
    """The head's divisor in words: ``'sqrt(d_k) = sqrt(4) = 2'``, ``'3'``, ``'none (unscaled)'``,
    ``'sqrt(2) ~ 1.4142 (irrational: scaled scores stay exact)'``."""
    d2 = head.divisor_squared
    if d2 is None:
        return "none (unscaled)"
    text = divisor_text(d2)
    of_dk = "sqrt(d_k) = " if d2 == head.d_k else ""
    if text.startswith("sqrt("):      # irrational: sqrt(D) = D/sqrt(D), a certified decimal
        dec = Surd(0, ((d2, d2),)).decimal(places)
        return f"{of_dk}{text} ~ {dec} (irrational: scaled scores stay exact)"
    return f"{of_dk}sqrt({exact_text(d2)}) = {text}" if of_dk else text


# --------------------------------------------------------------------------- closed forms
#: an output's numerator is written out for rows of at most this many distinct scores
OUTPUT_TERMS = 16


class RowForms:
    """The closed forms of one trace's rows (numeric engines) as text, one row at a time.

    Row i of a head's shares is ``shares[i][j] = numerators[i][j] / normaliser[i]``
    with ``numerators[i][j] = exp(s_ij)`` (``s_ij`` the key's logit; ``0`` for a
    hidden key) and ``normaliser[i] = sum_j exp(s_ij)``, its equal terms
    collected (``2 + exp(3/8) + exp(25/16)``, by increasing exponent).  An output
    is ``sum_j numerators[i][j] values[j][c] / normaliser[i]``; its numerator has
    one term per distinct logit of the row, so it is written out only for rows
    of at most :data:`OUTPUT_TERMS` distinct logits (longer rows: the formula and
    the exact values say it, and a file of n tokens grows like n^2 numbers, not
    n^3 terms).

    The texts are those of :meth:`exactattn.numbers.softmax.ExpRatio.text`: each
    ``exp(...)`` is :meth:`~exactattn.numbers.softmax.SoftmaxRow.term_text` of the
    logit and the sums are :func:`exactattn.numbers.exponents.sum_text`.  A plain
    head's logits are its scaled scores, read from integers
    (:meth:`~exactattn.engines.trace.Trace.raw_score_ints`) without building a softmax row; a modified head's (a sink,
    ALiBi, soft-capping, RoPE, dropout) are read from the trace's softmax rows
    (:meth:`~exactattn.engines.trace.Trace.row`): an ALiBi bias, a capped or rotated
    score included, the sink's term in the normaliser, and an output's numerator that
    of :meth:`~exactattn.engines.trace.Trace.output` (after dropout).

    >>> from exactattn.examples import chronicle
    >>> from exactattn.engines.head import Head, attend
    >>> ex = chronicle()
    >>> forms = RowForms(attend(ex.head, ex.x))
    >>> forms.normaliser(1), forms.numerators(1)
    ('2 + exp(3/8) + exp(25/16)', ['exp(25/16)', '1', 'exp(3/8)', '1'])
    >>> forms.output_numerators(1)[3]
    '1 + exp(3/8) + 1/2*exp(25/16)'
    >>> h = Head([[1]], [[1]], [[1]], divisor=None)
    >>> forms = RowForms(attend(h.with_policy(h.policy.replace(sink=Fraction(0))), [[0], [1]]))
    >>> forms.normaliser(1), forms.numerators(1), forms.output_numerators(1)
    ('2 + exp(1)', ['1', 'exp(1)'], ['exp(1)'])

    The last row read is kept (a normaliser and its numerators are read
    together), and each row's number of distinct logits; nothing else.
    """

    def __init__(self, trace):
        self.trace = trace
        self.modified = trace.policy.modified
        d2 = trace.head.divisor_squared
        #: a row whose maximum is 0: its term_text(s) is exp of the scaled score s
        self._unit = SoftmaxRow([Fraction(0)], d2)
        self._scaler = Scaler(d2)
        #: the last row read and each row's number of distinct logits
        self._last, self._terms = None, {}

    def _texts(self, distinct: list[int], L: int) -> list[str]:
        """``exp(...)`` of each raw score ``v / L`` divided by the divisor.

        A rational divisor (or none) gives ``exp(p/q)`` (``1`` for 0), the scaled score as
        the score table writes it (:meth:`~exactattn.present.cells.Scaler.row`, from
        integers); an irrational one goes through
        :meth:`~exactattn.numbers.softmax.SoftmaxRow.term_text`.
        """
        if self._scaler.rational:
            return ["1" if t == "0" else f"exp({t})" for t in self._scaler.row(distinct, L, None)]
        term = self._unit.term_text
        D = self.trace.head.divisor_squared
        return [f"exp({exact_text(Fraction(v, L))}/sqrt({D}))"
                if is_long(Fraction(v, L)) else term(Fraction(v, L)) for v in distinct]

    def _row(self, i: int):
        """``(texts, counts, keys)`` of row i: the distinct exponents (increasing), their
        counts, and each key's index into them (None: hidden)."""
        if self._last is not None and self._last[0] == i:
            return self._last[1]
        if self.modified:
            row = self.trace.row(i)
            distinct, ints = sorted(row.counts, key=row.order_key), row.gaps[:row.n_keys]
            counted, texts = row.counts, [row.term_text(g) for g in distinct]
        else:
            ints, L = self.trace.raw_score_ints(i)
            if all(v is None for v in ints):
                row = self.trace.row(i)           # empty: the policy's answer, from the core
                if row.counts:                    # "uniform": every key at gap 0
                    ints, L = [0] * len(ints), 1
            counted = Counter(v for v in ints if v is not None)
            distinct = sorted(counted)
            texts = self._texts(distinct, L)
        where = {v: k for k, v in enumerate(distinct)}
        keys = [None if v is None else where[v] for v in ints]
        counts = [counted[v] for v in distinct]
        self._terms[i] = len(distinct)
        self._last = (i, (texts, counts, keys))
        return self._last[1]

    def normaliser(self, i: int) -> str | None:
        """``sum_j exp(s_ij)`` with equal terms collected, by increasing exponent (as
        :func:`~exactattn.numbers.exponents.sum_text` writes it); None for a row with no
        term (its shares are the empty-row policy's 0 or nan)."""
        texts, counts, _ = self._row(i)
        if not texts:
            return None
        return " + ".join(str(c) if t == "1" else t if c == 1 else f"{c}*{t}"
                          for t, c in zip(texts, counts))

    def numerators(self, i: int) -> list[str]:
        """``exp(s_ij)`` for each key j (``1`` for a zero logit, ``0`` for a hidden key)."""
        texts, _, keys = self._row(i)
        return ["0" if k is None else texts[k] for k in keys]

    def terms(self, i: int) -> int:
        """The number of distinct exponents of row i (terms of its normaliser)."""
        return self._terms[i] if i in self._terms else len(self._row(i)[0])

    def output_numerators(self, i: int) -> list[str] | None:
        """``sum_j exp(s_ij) values[j][c]`` for each column c, collected; None for a row of
        more than :data:`OUTPUT_TERMS` distinct logits or one with no term."""
        if not 0 < self.terms(i) <= OUTPUT_TERMS:
            return None
        d_v = self.trace.head.d_v
        if self.modified:
            row = self.trace.row(i)
            return [row_sum_text(row, self.trace.output(i, c).numerators) for c in range(d_v)]
        texts, _, keys = self._row(i)
        sums = [[Fraction(0)] * d_v for _ in texts]
        for k, v in zip(keys, self.trace.values):      # the trace keeps them
            if k is not None:
                acc = sums[k]
                for c in range(d_v):
                    acc[c] += v[c]
        return [sum_text([_term(k, texts[k], sums[k][c]) for k in range(len(texts))
                          if sums[k][c] != 0]) for c in range(d_v)]


def _term(key: int, text: str, coefficient: Fraction) -> tuple:
    """A term for :func:`~exactattn.numbers.exponents.sum_text`; a coefficient too long to print
    whole is written into the text in scientific form (``~1.0e+4400*exp(1)``)."""
    if not is_long(coefficient):
        return key, text, coefficient
    sign = -1 if coefficient < 0 else 1
    body = exact_text(abs(coefficient))
    return key, body if text == "1" else f"{body}*{text}", Fraction(sign)
