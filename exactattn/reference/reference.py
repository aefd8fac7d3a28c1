"""The exact answer of one attention call: shares and outputs as exact values, rounded to a dtype.

This is the one exact reference: ``exactattn verify``, the split-merge
checker, the property checks (:mod:`exactattn.properties`) and row blocks
read their exact values from :class:`Reference`.

Scores ``query . key`` are exact rationals (integers over one denominator), or
with RoPE the certified scores of the rotated query and key
(:func:`exactattn.reference.logits.rope_score`, positions from
``Policy.query_position`` and the key index).  Each row is built by
:func:`exactattn.reference.logits.softmax_row`, the one composition (scale, soft-cap,
ALiBi with the head's slope, additive mask offsets, softmax with the sink),
so shares and outputs are exact :class:`~exactattn.numbers.softmax.ExpRatio` values.
Dropout multiplies each key's weight by :func:`exactattn.call.modifiers.dropout_factors`
of the call's keep-mask.  Which keys a query sees comes from
:meth:`Policy.keep <exactattn.call.policy.Policy.keep>` and the call's explicit
:class:`~exactattn.call.policy.Mask`, nothing else.  Call head h is model head
``policy.head + h`` (its ALiBi slope).

:meth:`Reference.rounded_outputs` rounds every output correctly to a float
format from whole-head enclosures (:mod:`exactattn.reference.enclose`); any
output those do not decide goes to its exact ``ExpRatio``: a rational value
(it may sit exactly on a tie) is rounded exactly; an irrational one is never
on a boundary, so tightening its enclosure always ends.

>>> from exactattn.call import Call
>>> c = Call([[0], [0]], [[0]] * 5, [[1], [2], [3], [4], [5]], policy=Policy(causal=True))
>>> Reference(c).output(0, 0, 1, 0).exact()
Fraction(3, 2)
>>> Reference(c.with_policy(Policy(causal=True, alignment="bottom_right"))).output(0, 0, 1, 0).exact()
Fraction(3, 1)
>>> Reference(c.with_policy(Policy(sink="0"))).output(0, 0, 0, 0).exact()      # softmax plus one
Fraction(5, 2)
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ..call.policy import MODIFIER_FIELDS, Policy
from ..errors import InputError
from .logits import rope_row, softmax_row
from ..call.modifiers import dropout_factors
from ..numbers.lse import LogSumExp
from ..numbers.softmax import ExpRatio, SoftmaxRow
from . import enclose
from ..numbers.formats import round_value
from ..call.inputs import Call

__all__ = ["Reference"]

#: the kind of value each modifier gives (the docs' exactness table is checked against it)
MODIFIER_VALUES = {
    "plain": ("exact", "shares are exp of rational exponents (or a/sqrt(D)) over their sum"),
    "window": ("exact rational", "changes only which keys are seen"),
    "query_offset": ("exact rational", "changes only positions"),
    "sink": ("exact rational", "a rational logit that joins the normaliser"),
    "alibi": ("exact algebraic", "slopes 2^(-8k/h): rational for up to 8 heads, "
                                 "2^(-1/2)-type for 12 and 16, 2^(-1/4)-type for 24 and 32"),
    "softcap": ("certified transcendental", "cap * tanh(score / cap)"),
    "rope": ("certified transcendental", "cos and sin of position * theta^(-2k/d)"),
    "dropout": ("exact rational", "weights times keep / (1 - p); rows no longer sum to 1"),
    "lse": ("certified transcendental", "log of the normaliser; exact for one key"),
}


class Reference:
    """The exact shares, outputs, log-sum-exps and gradients of one :class:`~exactattn.call.Call`.

    ``share(b, h, i, j)`` and ``output(b, h, i, c)`` are exact
    :class:`~exactattn.numbers.softmax.ExpRatio` values (certified decimals, closed
    forms, rationality); ``weight`` is the share times its dropout factor;
    ``lse(b, h, i)`` is the row's :class:`~exactattn.numbers.lse.LogSumExp`.  A
    call's mask is read under its policy's ``mask_kind``.  ``macs``
    counts the multiply-adds over visible pairs only: ``scores`` = pairs x E
    and ``mix`` = pairs x E_v.

    Raises:
        InputError: an ``inf``/``nan`` key or value a query sees
            (:meth:`Call.check_nonfinite <exactattn.call.Call.check_nonfinite>`), dropout without a keep-mask or
            a keep-mask without dropout, an ALiBi head past the model's heads.
    """

    def __init__(self, call: Call):
        if not isinstance(call, Call):
            raise InputError(f"Reference takes a Call (got {type(call).__name__}); build one with "
                             "Call(query, key, value, policy=...)")
        self.call = call
        self.policy = policy = call.policy
        call.check_nonfinite()
        if (policy.dropout is None) != (call.dropout_keep is None):
            dropout_factors(policy.dropout, None if call.dropout_keep is None else [True])
        self.exact_call = call.finite()
        sh = call.shape
        self.B, self.Hq, self.Hkv, self.L, self.S = sh["B"], sh["H_q"], sh["H_kv"], sh["L"], sh["S"]
        self.E, self.Ev = sh["E"], sh["E_v"]
        d2 = policy.divisor_squared_for(self.E)
        self.divisor_squared = None if d2 == 1 else d2
        self._policies = [policy.for_head(h) for h in range(self.Hq)]  # a dynamic rope: bound by Call
        self._scores: dict = {}
        self._rows: dict = {}
        self._columns: dict = {}
        self._groups: dict = {}        # the last 64 rows' terms (a dict: no cycle through self)
        self._shared: dict = {}
        self._rotated: dict = {}
        self._visible: dict = {}
        self._masks: dict = {}
        self.pairs = sum(int(self.visible(b, h).sum())
                         for b in range(self.B) for h in range(self.Hq))
        self.macs = {"scores": self.pairs * self.E, "mix": self.pairs * self.Ev}

    # -- structure ------------------------------------------------------
    def head_policy(self, h: int) -> Policy:
        """The policy of query head h: ``head`` set to ``policy.head + h`` under ALiBi."""
        return self._policies[h]

    def kv(self, h: int) -> int:
        """The key/value head query head h reads (the policy's GQA map)."""
        return self.policy.kv_head(h, self.Hq, self.Hkv)

    def mask(self, b: int, h: int):
        """The explicit :class:`~exactattn.call.policy.Mask` of one head, or None."""
        if (b, h) not in self._masks:
            self._masks[(b, h)] = self.call.block_mask(b, h)
        return self._masks[(b, h)]

    def visible(self, b: int, h: int) -> np.ndarray:
        """L x S booleans: which keys each query sees (``Policy.keep`` with the mask)."""
        if (b, h) not in self._visible:
            self._visible[(b, h)] = self.policy.keep(self.L, self.S, self.mask(b, h))
        return self._visible[(b, h)]

    def offsets(self, b: int, h: int, i: int) -> list | None:
        """Row i's additive mask offsets (0 at hidden keys), or None when it adds nothing."""
        m = self.mask(b, h)
        return None if m is None else m.offsets(i)

    def score_ints(self, b: int, h: int):
        """The exact raw scores ``query @ key^T`` of one head (before RoPE) as ``(ints, den)``:
        L x S integers over one denominator, the product of :meth:`Call.numerators
        <exactattn.call.Call.numerators>` (:func:`exactattn.numbers.bulk.exact_matmul`)."""
        key = (b, h)
        if key not in self._scores:
            from ..numbers.bulk import exact_matmul
            (q, qd), (k, kd) = self.call.numerators("query"), self.call.numerators("key")
            self._scores[key] = exact_matmul(q[b, h], k[b, self.kv(h)].T), qd * kd
        return self._scores[key]

    # -- exact rows -----------------------------------------------------
    def raw_row(self, b: int, h: int, i: int) -> list:
        """Row i's raw scores (None where hidden): ``Fraction``, or RoPE's certified scores."""
        vis = self.visible(b, h)[i]
        pol = self.head_policy(h)
        if pol.rope is not None:       # certified rotated scores: each row once (a tuple)
            if (b, h, i) not in self._rotated:
                p = self.exact_call
                keys = p.key[b, self.kv(h)]
                self._rotated[b, h, i] = tuple(rope_row(
                    list(p.query[b, h, i]), lambda j: list(keys[j]),
                    [j for j in range(self.S) if vis[j]], pol, i, self.L, self.S))
            return list(self._rotated[b, h, i])
        (ints, den), known = self.score_ints(b, h), {}    # each distinct score: one Fraction
        return [(known[v] if v in known else known.setdefault(v, Fraction(v, den))) if seen
                else None for v, seen in zip(ints[i].tolist(), vis.tolist())]

    def row(self, b: int, h: int, i: int) -> SoftmaxRow:
        """The exact softmax row of query i of head h (:func:`exactattn.reference.logits.softmax_row`)."""
        key = (b, h, i)
        if key not in self._rows:      # equal scores share one row where no ALiBi moves them
            offsets, pol = self.offsets(b, h, i), self.head_policy(h)
            same = None if pol.alibi or pol.rope or offsets is not None else \
                (b, self.kv(h), tuple(self.call.numerators("query")[0][b, h, i].tolist()),
                 np.packbits(self.visible(b, h)[i]).tobytes())    # equal queries, equal keys seen
            row = self._shared.get(same)
            if row is None:
                row = softmax_row(self.raw_row(b, h, i), self.divisor_squared, pol, i, self.L,
                                  self.S, offsets=offsets)
                if same is not None:
                    self._shared[same] = row
            self._rows[key] = row
        return self._rows[key]

    def factors(self, b: int, h: int, i: int) -> list | None:
        """Row i's dropout factors (``keep / (1 - p)`` per key), or None without dropout."""
        if self.policy.dropout is None:
            return None
        return dropout_factors(self.policy.dropout, list(self.call.dropout_keep[b, h, i]))

    def share(self, b: int, h: int, i: int, j: int) -> ExpRatio:
        """The exact share of key j for query i of head h (before dropout)."""
        return self.row(b, h, i).share(j)

    def dropped_share(self, b: int, h: int, i: int, j: int) -> ExpRatio:
        """The weight key j's value gets: the share times its dropout factor (the share without dropout)."""
        f = self.factors(b, h, i)
        s = self.share(b, h, i, j)
        return s if f is None or f[j] == 1 else self.row(b, h, i).combine(
            [f[j] if k == j else 0 for k in range(self.S)])

    def output(self, b: int, h: int, i: int, c: int) -> ExpRatio:
        """The exact output column c of query i of head h: ``sum_j weights[i][j] value[j][c]``,
        the values' integer numerators added per softmax term (a term of one key reads its
        value), then scaled once per term."""
        if (b, h, i) not in self._groups:
            if len(self._groups) == 64:
                del self._groups[next(iter(self._groups))]
            self._groups[b, h, i] = self._group(b, h, i)
        terms, index, scale = self._groups[b, h, i]
        key = (b, self.kv(h), c)       # a column, kept: every output of that column reads it
        if key not in self._columns:
            num, den = self.call.numerators("value")
            ints = num[b, key[1], :, c].tolist()
            self._columns[key] = ints, [Fraction(v, den) for v in ints], den
        ints, values, den = self._columns[key]
        sums, one = [0] * len(terms), [None] * len(terms)
        for j, k in enumerate(index):
            if k is not None:
                sums[k] += ints[j]
                one[k] = j if one[k] is None else -1
        out = {gap: values[j] if j >= 0 else Fraction(a, den)
               for gap, a, j in zip(terms, sums, one) if a}
        return ExpRatio(out if scale == 1 else {gap: v * scale for gap, v in out.items()},
                        self.row(b, h, i))

    def _group(self, b: int, h: int, i: int) -> tuple:
        """Row i's softmax terms, the term each key adds its value to (None: hidden or dropped)
        and the outputs' scale (``1/(1 - p)`` under dropout, else 1)."""
        row, f = self.row(b, h, i), self.factors(b, h, i)
        terms: dict = {}
        index = [None if gap is None or f is not None and not f[j] else
                 terms.setdefault(gap, len(terms)) for j, gap in enumerate(row.gaps[:row.n_keys])]
        return list(terms), index, next((x for x in f or () if x), 1)

    def counts(self, b: int = 0, h: int = 0) -> tuple[dict, dict]:
        """One head's multiply-adds by stage, as the pencil engine's loops run them, and its
        softmax's exponentials, additions and divisions: ``(macs, ops)``.

        ``scores``: E per visible pair; ``rotation`` (RoPE): 2 E per visible pair; ``mix``:
        E_v per key a row adds a value of (a seen key not dropped; a row that sees no key
        under ``uniform`` adds every key's).  ``ops`` sums the rows' counters.  The ``mix``
        differs from :attr:`macs`' (a dense kernel's: E_v per visible pair) under dropout
        and ``uniform`` empty rows.

        >>> from exactattn.call import Call
        >>> Reference(Call([[1], [0]], [[1], [0]], [[3], [1]], policy=Policy(causal=True))).counts()
        ({'scores': 3, 'mix': 3}, {'exp': 2, 'add': 1, 'div': 3})
        """
        rows, pairs = [self.row(b, h, i) for i in range(self.L)], int(self.visible(b, h).sum())
        macs = {"scores": pairs * self.E, **({"rotation": 2 * pairs * self.E}
                                             if self.policy.rope is not None else {})}
        kept = [r.gaps[:r.n_keys] if f is None else [g for g, x in zip(r.gaps, f) if x]
                for r, f in zip(rows, (self.factors(b, h, i) for i in range(self.L)))]
        macs["mix"] = self.Ev * sum(g is not None for gaps in kept for g in gaps)
        return macs, {op: sum(getattr(r, op + "s") for r in rows) for op in ("exp", "add", "div")}

    def gradients(self, d_out, d_lse=None):
        """The exact dQ, dK and dV (and dP, dS) of the same rows, given the upstream ``d_out``
        (and ``d_lse``, B x H_q x L exact numbers: the upstream gradient of the rows' natural
        log-sum-exps).

        ``d_out`` has the outputs' shape (B x H_q x L x E_v, or the call's
        rank); entries are read exactly (floats as their exact values).  The
        result's ``value(name, b, h, i, c)`` is one exact gradient entry
        (``name`` one of ``dQ``, ``dK``, ``dV``; h is the query head for dQ,
        the key/value head for dK and dV); ``blocks[(b, g)]`` holds the
        :class:`~exactattn.reference.backward.Gradients` of one key/value head, with
        ``P``, ``dP`` and ``dS``.

        Raises:
            ShapeError: ``d_out`` or ``d_lse`` of the wrong shape.

        >>> from exactattn.call import Call
        >>> r = Reference(Call([[0], [0]], [[0], [0]], [[1], [3]], policy=Policy(scale="none")))
        >>> r.gradients([[1], [0]]).value("dV", 0, 0, 0, 0).exact()
        Fraction(1, 2)
        """
        from .backward import ExactGradients, d_out_array
        return ExactGradients(self, d_out_array(self.call, d_out),
                              None if d_lse is None else d_out_array(self.call, d_lse, "d_lse"))

    def lse(self, b: int, h: int, i: int, base: str = "e") -> LogSumExp:
        """Row i's log-sum-exp (natural log, or base 2), the sink included; -inf for no key."""
        return LogSumExp(self.row(b, h, i), base)

    def shares(self, b: int = 0, h: int = 0) -> list[list[ExpRatio]]:
        """Every exact share of one head (L x S)."""
        return [self.row(b, h, i).shares() for i in range(self.L)]

    def dropped_shares(self, b: int = 0, h: int = 0) -> list[list[ExpRatio]]:
        """Every weight of one head (L x S): the shares times the dropout factors."""
        if self.policy.dropout is None:
            return self.shares(b, h)
        return [[self.dropped_share(b, h, i, j) for j in range(self.S)] for i in range(self.L)]

    def outputs(self, b: int = 0, h: int = 0) -> list[list[ExpRatio]]:
        """Every exact output of one head (L x E_v)."""
        return [[self.output(b, h, i, c) for c in range(self.Ev)] for i in range(self.L)]

    def value_kinds(self) -> list[tuple[str, str, str]]:
        """``(modifier, kind, why)`` for each modifier of the policy (:data:`MODIFIER_VALUES`).

        ALiBi is ``exact rational`` when every slope used is rational.
        """
        pol = self.policy
        out = []
        for name in MODIFIER_VALUES:       # the table's order; its Policy fields only
            if name not in MODIFIER_FIELDS or getattr(pol, name) is None:
                continue
            kind, why = MODIFIER_VALUES[name]
            if name == "alibi" and all(isinstance(self.head_policy(h).alibi.slope(
                    self.head_policy(h).head), Fraction) for h in range(self.Hq)):
                kind = "exact rational"
            out.append((name, kind, why))
        return out

    # -- numeric --------------------------------------------------------
    def max_abs_exponent(self) -> float:
        """The largest |logit| over visible pairs (scaled score, soft-cap, ALiBi, mask offset):
        a float, a few digits; inf past float64's range.  On arb balls: no float of the scale
        or of a score is formed, so a scale of 1e300 or scores of 1e600 are read."""
        return enclose.max_abs_logit(self)

    def rounded_outputs(self, dtype: str, *, prec: int = 96):
        """Every output correctly rounded to ``dtype``, with its final enclosure.

        Returns ``(rounded, balls, magnitudes)``: ``rounded`` a float64 array
        of the call's output shape (B x H_q x L x E_v) holding floats of the
        dtype (NaN where the policy's answer is NaN); ``balls`` the ``arb`` ball
        (or ``None`` for NaN) each was decided from, for the relative error;
        ``magnitudes`` the size of the terms each output adds up,
        ``sum_j weights_ij |value_jc|`` (a float, a few digits).
        """
        return enclose.rounded_outputs(self, dtype, prec)

    def rounded_lse(self, dtype: str, base: str = "e", *, prec: int = 96):
        """Every row's log-sum-exp correctly rounded to ``dtype``: ``(rounded, balls)``, B x H_q x L.

        ``-inf`` for a row that sees no key (and has no sink), NaN for a NaN row.

        Raises:
            InputError: ``base`` is not ``e`` or ``2``.
        """
        if str(base) not in ("e", "2"):
            raise InputError(f"lse base must be e or 2 (got {base!r})")
        return enclose.rounded_lse(self, dtype, str(base), prec)

    @staticmethod
    def round_exact(value: ExpRatio, dtype, prec: int = 128):
        """One exact value rounded to ``dtype``: ``(float, ball)``; exactly when it is rational."""
        return round_value(value, dtype, prec)
