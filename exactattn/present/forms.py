"""Closed forms of shares and outputs as text, row by row, without sympy.

Row i of a head's shares is ``shares[i][j] = numerators[i][j] / normaliser[i]``
with ``numerators[i][j] = exp(s_ij)`` (``s_ij`` the scaled score; ``0`` for a
hidden key) and ``normaliser[i] = sum_j exp(s_ij)``, its equal terms
collected (``2 + exp(3/8) + exp(25/16)``, by increasing exponent).  An output
is ``sum_j numerators[i][j] values[j][c] / normaliser[i]``; its numerator has
one term per distinct score of the row, so it is written out only for rows
of at most :data:`OUTPUT_TERMS` distinct scores (longer rows: the formula and
the exact values say it, and a file of n tokens grows like n^2 numbers, not
n^3 terms).

The texts are those of :meth:`exactattn.numbers.softmax.ExpRatio.text`: each
``exp(...)`` is :meth:`~exactattn.numbers.softmax.SoftmaxRow.term_text` of the
scaled score and the sums are :func:`exactattn.numbers.exponents.sum_text`.

>>> from exactattn.examples import chronicle
>>> from exactattn.engines.head import attend
>>> ex = chronicle()
>>> forms = RowForms(attend(ex.head, ex.x))
>>> forms.normaliser(1), forms.numerators(1)
('2 + exp(3/8) + exp(25/16)', ['exp(25/16)', '1', 'exp(3/8)', '1'])
>>> forms.output_numerators(1)[3]
'1 + exp(3/8) + 1/2*exp(25/16)'
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

from .cells import Scaler, exact_text, is_long
from ..numbers.exponents import sum_text
from ..numbers.ratio import row_sum_text
from .rowints import score_rows
from ..numbers.softmax import SoftmaxRow

#: an output's numerator is written out for rows of at most this many distinct scores
OUTPUT_TERMS = 16


class RowForms:
    """The closed forms of one trace's rows (numeric engines), one row at a time.

    The last row read is kept (a normaliser and its numerators are read
    together), and each row's number of distinct scores; nothing else.
    """

    def __init__(self, trace):
        self.trace = trace
        d2 = trace.head.divisor_squared
        #: a row whose maximum is 0: its term_text(s) is exp of the scaled score s
        self._unit = SoftmaxRow([Fraction(0)], d2)
        self._scaler = Scaler(d2)
        self._last: tuple | None = None
        self._terms: dict[int, int] = {}
        self._values: list | None = None

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
        ints, L = score_rows(self.trace).row(i)
        if all(v is None for v in ints):
            row = self.trace.row(i)           # empty: the policy's answer, from the core
            if row.counts:                    # "uniform": every key at gap 0
                ints, L = [0] * len(ints), 1
        counted = Counter(v for v in ints if v is not None)
        distinct = sorted(counted)
        where = {v: k for k, v in enumerate(distinct)}
        keys = [None if v is None else where[v] for v in ints]
        texts = self._texts(distinct, L)
        counts = [counted[v] for v in distinct]
        self._terms[i] = len(distinct)
        self._last = (i, (texts, counts, keys))
        return self._last[1]

    def normaliser(self, i: int) -> str | None:
        """``sum_j exp(s_ij)`` with equal terms collected, by increasing exponent (as
        :func:`~exactattn.numbers.exponents.sum_text` writes it); None for a row that sees no key
        (its shares are the empty-row policy's 0 or nan)."""
        texts, counts, _ = self._row(i)
        if not texts:
            return None
        return " + ".join(str(c) if t == "1" else t if c == 1 else f"{c}*{t}"
                          for t, c in zip(texts, counts))

    def numerators(self, i: int) -> list[str]:
        """``exp(s_ij)`` for each key j (``1`` for a zero score, ``0`` for a hidden key)."""
        texts, _, keys = self._row(i)
        return ["0" if k is None else texts[k] for k in keys]

    def terms(self, i: int) -> int:
        """The number of distinct exponents of row i (terms of its normaliser)."""
        known = self._terms.get(i)
        return known if known is not None else len(self._row(i)[0])

    def output_numerators(self, i: int) -> list[str] | None:
        """``sum_j exp(s_ij) values[j][c]`` for each column c, collected; None for a row of
        more than :data:`OUTPUT_TERMS` distinct scores or one that sees no key."""
        if not 0 < self.terms(i) <= OUTPUT_TERMS:
            return None
        texts, _, keys = self._row(i)
        if self._values is None:
            self._values = self.trace.values
        d_v = self.trace.head.d_v
        sums = [[Fraction(0)] * d_v for _ in texts]
        for k, v in zip(keys, self._values):
            if k is not None:
                acc = sums[k]
                for c in range(d_v):
                    acc[c] += v[c]
        return [sum_text([_term(k, texts[k], sums[k][c]) for k in range(len(texts))
                          if sums[k][c] != 0]) for c in range(d_v)]


class LogitForms:
    """The closed forms of a modified head's rows (a sink, ALiBi, soft-capping, RoPE, dropout).

    The same texts as :class:`RowForms`, read from the trace's softmax rows
    (:meth:`~exactattn.engines.trace.Trace.row`) and outputs: each ``exp(...)`` is
    :meth:`~exactattn.numbers.softmax.SoftmaxRow.term_text` of the key's logit (an
    ALiBi bias, a capped or rotated score included), the normaliser holds the
    sink's term, and an output's numerator is that of
    :meth:`~exactattn.engines.trace.Trace.output` (after dropout).

    >>> from exactattn.call.policy import Policy
    >>> from exactattn.engines.head import Head, attend
    >>> h = Head([[1]], [[1]], [[1]], divisor=None)
    >>> forms = LogitForms(attend(h.with_policy(h.policy.replace(sink=Fraction(0))), [[0], [1]]))
    >>> forms.normaliser(1), forms.numerators(1), forms.output_numerators(1)
    ('2 + exp(1)', ['1', 'exp(1)'], ['exp(1)'])
    """

    def __init__(self, trace):
        self.trace = trace

    def normaliser(self, i: int) -> str | None:
        """Row i's normaliser (the sink's term included); None for a row with no term."""
        row = self.trace.row(i)
        return row_sum_text(row, row.counts) if row.counts else None

    def numerators(self, i: int) -> list[str]:
        """``exp(logit_ij)`` for each key j (``0`` for a hidden key)."""
        row = self.trace.row(i)
        return ["0" if g is None else row.term_text(g) for g in row.gaps[:row.n_keys]]

    def terms(self, i: int) -> int:
        """The number of distinct terms of row i's normaliser."""
        return len(self.trace.row(i).counts)

    def output_numerators(self, i: int) -> list[str] | None:
        """Each output column's numerator over row i's normaliser; None for a row of more
        than :data:`OUTPUT_TERMS` terms or one with none."""
        if not 0 < self.terms(i) <= OUTPUT_TERMS:
            return None
        row = self.trace.row(i)
        return [row_sum_text(row, self.trace.output(i, c).numerators)
                for c in range(self.trace.head.d_v)]


def row_forms(trace):
    """The closed forms of ``trace``'s rows: :class:`RowForms` for a plain head,
    :class:`LogitForms` under modifiers (their logits are not the scaled scores)."""
    return LogitForms(trace) if trace.policy.modified else RowForms(trace)


def _term(key: int, text: str, coefficient: Fraction) -> tuple:
    """A term for :func:`~exactattn.numbers.exponents.sum_text`; a coefficient too long to print
    whole is written into the text in scientific form (``~1.0e+4400*exp(1)``)."""
    if not is_long(coefficient):
        return key, text, coefficient
    sign = -1 if coefficient < 0 else 1
    body = exact_text(abs(coefficient))
    return key, body if text == "1" else f"{body}*{text}", Fraction(sign)
