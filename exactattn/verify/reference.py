"""The exact answer of one attention call: shares and outputs as exact values, rounded to a dtype.

This is the one exact reference: ``exactattn verify`` and the property checks
(:mod:`exactattn.properties`, through
:meth:`AttentionInput.problem <exactattn.properties.AttentionInput.problem>`)
both read their exact values from :class:`Reference`.

Scores ``query . key`` are exact rationals (python-flint ``fmpq_mat``); each
row is a :class:`~exactattn.softmax.SoftmaxRow` (an additive mask is its
``offsets``), so shares and outputs are exact
:class:`~exactattn.softmax.ExpRatio` values.  Which keys a query sees comes
from :meth:`Policy.keep <exactattn.call.Policy.keep>` and the problem's
explicit :class:`~exactattn.call.Mask`, nothing else.

:meth:`Reference.rounded_outputs` rounds every output correctly to a float
format: all outputs of a head are enclosed at once with ``arb_mat`` products,
both ends of each ball are rounded (:func:`~exactattn.verify.formats.round_ball`),
undecided ones are recomputed at twice, then four times the precision, and any
left go to their exact ``ExpRatio``: a rational value (it may sit exactly on a
tie) is rounded exactly; a transcendental one is never on a boundary, so
tightening its enclosure always ends.

>>> from exactattn.verify.problem import Problem
>>> p = Problem.from_arrays([[0], [0]], [[0]] * 5, [[1], [2], [3], [4], [5]])
>>> Reference(p, Policy(causal=True)).output(0, 0, 1, 0).exact()
Fraction(3, 2)
>>> Reference(p, Policy(causal=True, alignment="bottom_right")).output(0, 0, 1, 0).exact()
Fraction(3, 1)
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..call import Policy
from ..digits import tighten, working_precision
from ..exponents import fmpq_of, inv_sqrt_ball
from ..softmax import ExpRatio, SoftmaxRow
from .formats import float_format, round_ball, round_to_format
from .problem import Problem

__all__ = ["Reference"]


class Reference:
    """The exact shares and outputs of a :class:`Problem` under a :class:`~exactattn.call.Policy`.

    ``share(b, h, i, j)`` and ``output(b, h, i, c)`` are exact
    :class:`~exactattn.softmax.ExpRatio` values (certified decimals, closed
    forms, rationality).  A problem with a mask is read under its own
    ``mask_kind`` (``policy.mask_kind`` is set to it).  ``macs`` counts the
    multiply-adds over visible pairs only: ``scores`` = pairs x E and ``mix``
    = pairs x E_v (a causal mask sees n(n+1)/2 pairs, not n^2/2).
    """

    def __init__(self, problem: Problem, policy: Policy | None = None):
        self.problem = problem
        policy = policy or Policy()
        if problem.mask is not None and problem.mask_kind != policy.mask_kind:
            policy = policy.replace(mask_kind=problem.mask_kind)
        self.policy = policy
        sh = problem.shape
        self.B, self.Hq, self.Hkv, self.L, self.S = sh["B"], sh["H_q"], sh["H_kv"], sh["L"], sh["S"]
        self.E, self.Ev = sh["E"], sh["E_v"]
        d2 = policy.divisor_squared(self.E)
        self.divisor_squared = None if d2 == 1 else d2
        self._scores: dict = {}
        self._rows: dict = {}
        self._kv: dict = {}
        self._visible: dict = {}
        self._masks: dict = {}
        self.pairs = sum(int(self.visible(b, h).sum())
                         for b in range(self.B) for h in range(self.Hq))
        self.macs = {"scores": self.pairs * self.E, "mix": self.pairs * self.Ev}

    # -- structure ------------------------------------------------------
    def kv(self, h: int) -> int:
        """The key/value head query head h reads (the policy's GQA map)."""
        return self.policy.kv_head(h, self.Hq, self.Hkv)

    def mask(self, b: int, h: int):
        """The explicit :class:`~exactattn.call.Mask` of one head, or None."""
        if (b, h) not in self._masks:
            self._masks[(b, h)] = self.problem.block_mask(b, h)
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

    def scores(self, b: int, h: int):
        """The exact raw scores ``query @ key^T`` of one head as an L x S ``fmpq_mat``."""
        key = (b, h)
        if key not in self._scores:
            from flint import fmpq_mat
            Q = fmpq_mat(self.L, self.E, [fmpq_of(x) for x in self.problem.query[b, h].reshape(-1)])
            K = self._kv_mats(b, self.kv(h))[0]
            self._scores[key] = Q * K.transpose()
        return self._scores[key]

    def _kv_mats(self, b: int, g: int):
        if (b, g) not in self._kv:
            from flint import fmpq_mat
            K = fmpq_mat(self.S, self.E, [fmpq_of(x) for x in self.problem.key[b, g].reshape(-1)])
            V = fmpq_mat(self.S, self.Ev,
                         [fmpq_of(x) for x in self.problem.value[b, g].reshape(-1)])
            self._kv[(b, g)] = (K, V)
        return self._kv[(b, g)]

    # -- exact rows -----------------------------------------------------
    def row(self, b: int, h: int, i: int) -> SoftmaxRow:
        """The exact softmax row of query i of head h (additive offsets included)."""
        key = (b, h, i)
        if key not in self._rows:
            S_mat = self.scores(b, h)
            vis = self.visible(b, h)[i]
            raw = [Fraction(int(S_mat[i, j].p), int(S_mat[i, j].q)) if vis[j] else None
                   for j in range(self.S)]
            self._rows[key] = SoftmaxRow(raw, self.divisor_squared, self.policy.empty_row,
                                         offsets=self.offsets(b, h, i))
        return self._rows[key]

    def share(self, b: int, h: int, i: int, j: int) -> ExpRatio:
        """The exact share of key j for query i of head h."""
        return self.row(b, h, i).share(j)

    def output(self, b: int, h: int, i: int, c: int) -> ExpRatio:
        """The exact output column c of query i of head h: ``sum_j shares[i][j] value[j][c]``."""
        vals = self.problem.value[b, self.kv(h), :, c]
        return self.row(b, h, i).combine(list(vals))

    def shares(self, b: int = 0, h: int = 0) -> list[list[ExpRatio]]:
        """Every exact share of one head (L x S)."""
        return [self.row(b, h, i).shares() for i in range(self.L)]

    def outputs(self, b: int = 0, h: int = 0) -> list[list[ExpRatio]]:
        """Every exact output of one head (L x E_v)."""
        return [[self.output(b, h, i, c) for c in range(self.Ev)] for i in range(self.L)]

    def max_abs_exponent(self) -> float:
        """The largest |scale * score + mask| over visible pairs (a float, a few digits; inf
        past float64's range).  On arb balls: no float of the scale or of a score is formed,
        so a scale of 1e300 or scores of 1e600 are read, not an overflow."""
        from flint import arb
        top = arb(0)
        d2 = self.divisor_squared
        with working_precision(64):
            scale = arb(1) if d2 is None else inv_sqrt_ball(d2)
            for b in range(self.B):
                for h in range(self.Hq):
                    vis = self.visible(b, h)
                    if not vis.any():
                        continue
                    ents = self.scores(b, h).entries()
                    m = self.mask(b, h)
                    for i, j in zip(*np.nonzero(vis)):
                        x = arb(ents[i * self.S + j]) * scale
                        if m is not None:
                            x += arb(fmpq_of(m.offset(i, j)))
                        top = max(top, abs(x).upper())
            return float(top.upper())      # inf past the largest float64

    # -- numeric --------------------------------------------------------
    def _block_balls(self, b: int, h: int, prec: int, magnitudes: bool = False):
        """L x E_v ``arb`` balls of one head's outputs at ``prec`` bits (None for NaN rows).

        With ``magnitudes`` also the L x E_v floats ``sum_j shares_ij |value_jc|``
        (to a few digits; 0 for empty rows).  Call under ``working_precision(prec)``.
        """
        from flint import arb, arb_mat, fmpq_mat
        L, S = self.L, self.S
        vis = self.visible(b, h)
        V = self._kv_mats(b, self.kv(h))[1]
        empty_row = self.policy.empty_row
        A = arb_mat(self.scores(b, h))
        if self.divisor_squared is not None:
            A = A * inv_sqrt_ball(self.divisor_squared)
        ents = A.entries()
        E = [arb(0)] * (L * S)
        empty = set()
        for i in range(L):
            row_vis = np.flatnonzero(vis[i])
            if len(row_vis) == 0:
                empty.add(i)
                if empty_row == "uniform":
                    E[i * S:(i + 1) * S] = [arb(1)] * S
                continue
            offsets = self.offsets(b, h, i)
            if offsets is not None:
                top = max(offsets[j] for j in row_vis)
                for j in row_vis:
                    E[i * S + j] = (ents[i * S + j] + arb(fmpq_of(offsets[j] - top))).exp()
            else:
                for j in row_vis:
                    E[i * S + j] = ents[i * S + j].exp()
        Em = arb_mat(L, S, E)
        N = Em * arb_mat(V)
        den = Em * arb_mat(S, 1, [1] * S)
        out = [[None] * self.Ev for _ in range(L)]
        for i in range(L):
            if i in empty and empty_row == "nan":
                continue
            if i in empty and empty_row == "zero":
                out[i] = [arb(0)] * self.Ev
                continue
            out[i] = [N[i, c] / den[i, 0] for c in range(self.Ev)]
        if not magnitudes:
            return out
        Va = fmpq_mat(S, self.Ev, [abs(x) for x in V.entries()])
        M = Em * arb_mat(Va)
        mags = np.zeros((L, self.Ev))
        for i in range(L):
            if out[i][0] is None or (i in empty and empty_row == "zero"):
                continue
            mags[i] = [float((M[i, c] / den[i, 0]).mid()) for c in range(self.Ev)]
        return out, mags

    def rounded_outputs(self, dtype: str, *, prec: int = 96):
        """Every output correctly rounded to ``dtype``, with its final enclosure.

        Returns ``(rounded, balls, magnitudes)``: ``rounded`` a float64 array
        of the problem's output shape (B x H_q x L x E_v) holding floats of the
        dtype (NaN where the policy's answer is NaN); ``balls`` the ``arb`` ball
        (or ``None`` for NaN) each was decided from, for the relative error;
        ``magnitudes`` the size of the terms each output adds up,
        ``sum_j shares_ij |value_jc|`` (a float, a few digits).
        """
        fmt = float_format(dtype)
        prec = max(prec, fmt.precision + 64)
        shape = (self.B, self.Hq, self.L, self.Ev)
        rounded = np.empty(shape, dtype=np.float64)
        balls = np.empty(shape, dtype=object)
        mags = np.zeros(shape)
        for b in range(self.B):
            for h in range(self.Hq):
                todo = [(i, c) for i in range(self.L) for c in range(self.Ev)]

                def attempt(p):      # the whole block at p bits; done when <= 8 are left
                    nonlocal todo
                    if p == prec:
                        blk, mags[b, h] = self._block_balls(b, h, p, magnitudes=True)
                    else:
                        blk = self._block_balls(b, h, p)
                    left = []
                    for i, c in todo:
                        ball = blk[i][c]
                        if ball is None:   # the policy's NaN row
                            rounded[b, h, i, c] = math.nan
                            continue
                        f = round_ball(ball, fmt, p)
                        if f is None:
                            left.append((i, c))
                            continue
                        rounded[b, h, i, c] = f
                        balls[b, h, i, c] = ball
                    todo = left
                    return True if len(todo) <= 8 else None
                tighten(attempt, prec, max_prec=4 * prec)
                for i, c in todo:          # rational ties and stragglers, one by one
                    f, ball = self.round_exact(self.output(b, h, i, c), fmt, 8 * prec)
                    rounded[b, h, i, c] = f
                    balls[b, h, i, c] = ball
        return rounded, balls, mags

    @staticmethod
    def round_exact(value: ExpRatio, dtype, prec: int = 128):
        """One exact value rounded to ``dtype``: ``(float, ball)``; exactly when it is rational."""
        from flint import arb
        q = value.rational()
        if q is not None:
            return round_to_format(q, dtype), arb(fmpq_of(q))

        def step(p):     # transcendental: never on a rounding boundary, so this ends
            ball = value.ball(p)
            f = round_ball(ball, dtype, p)
            return None if f is None else (f, ball)
        return tighten(step, prec)
