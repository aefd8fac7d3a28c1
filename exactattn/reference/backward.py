"""The exact backward pass of one attention call: dQ, dK, dV (and dS, dP, D, a sink's) given dO.

For one call ``O = W V`` with shares ``P = softmax(x)`` row by row over the
visible keys (and the sink, when there is one), ``x = scale * Q K^T + m`` (m
an additive mask or bias, ALiBi included; 0 without one), weights ``W = P *
M`` (``M = keep / (1 - p)`` under dropout, else 1) and an upstream gradient
``dO`` (Vaswani et al. 2017, sec. 3.2.1; the backward pass as in Dao et al.
2022, FlashAttention, Algorithm 4)::

    dV  = W^T dO                     dP  = M * (dO V^T)   (the gradient w.r.t. P)
    D_i = sum_j P_ij dP_ij = sum_c dO_ic O_ic
    dS  = P * (dP - D)               (the gradient w.r.t. the logits x)
    dQ  = scale dS K                 dK  = scale dS^T Q

The gradient with respect to an additive mask or bias entry ``m_ij`` is
``dS_ij`` (0 at hidden pairs).  A sink logit ``s`` is one more key column with
value 0 and offset s: its ``dP`` is 0, so ``dsink = sum_i dS_i,sink = -sum_i
P_i,sink D_i``; every row of dS, the sink's column included, sums to 0.  A row
that sees no key gives dQ = 0 and nothing to dK and dV under ``zero``; under
``uniform`` its shares are the constant 1/S, so it adds ``W_ij dO_i`` to every
``dV_j`` but nothing to dQ or dK; under ``nan`` it is NaN, and so is every
entry of dK and dV.  (With a sink no row is empty.)

Every entry is an :class:`~exactattn.numbers.ratio.ExpRatio` over the forward's
softmax rows, the shares' own value type: exact zero, equality, sign and rationality
tests, and certified decimals.  Exactly, each is ``sum_k N_k(t) / Z_k(t)^2`` over the
generators t of :class:`~exactattn.numbers.terms.Terms`: for row i with normaliser
``Z_i = sum_j t^(a_ij)`` and ``W_i = sum_j dP_ij t^(a_ij)`` (so ``D_i = W_i / Z_i``)::

    P_ij  = t^(a_ij) Z_i / Z_i^2           O_ic  = (sum_j M_ij V_jc t^(a_ij)) Z_i / Z_i^2
    D_i   = W_i Z_i / Z_i^2                dS_ij = t^(a_ij) (dP_ij Z_i - W_i) / Z_i^2
    dQ_ic = scale (A_ic Z_i - B_ic W_i) / Z_i^2   with A_ic = sum_j K_jc dP_ij t^(a_ij),
                                                  B_ic = sum_j K_jc t^(a_ij)
    J_ijk = t^(a_ij) (delta_jk Z_i - t^(a_ik)) / Z_i^2   (the softmax Jacobian)

(with an upstream ``dlse_i``, ``dP_ij + dlse_i`` in dS's and A's place of ``dP_ij``, W kept)
and the columns ``dK_jc = scale sum_i Q_ic dS_ij``, ``dV_jc = sum_i dO_ic M_ij P_ij``
summed class by class (rows with one normaliser add their numerators).  A rational scale
is folded into the numerators; an irrational one is carried by the value (``scaled``).
:meth:`Gradients.decimals` rounds a whole matrix at once: from certified
float64 enclosures (:mod:`~exactattn.reference.floats`) for a plain call,
else from ``arb_mat`` products; only the entries an enclosure leaves undecided
take the exact per-entry path.

The numeric formulas (D, dS, dQ, dK, dV, O, with each modifier's backward: the soft-cap's
``1 - tanh^2``, RoPE's rotation and its transpose, dlse, the sink's column) are written once,
:func:`compose`, over three contexts: ``arb`` balls (:meth:`Gradients.balls`), float64
intervals (:func:`exactattn.reference.floats.enclose`) and the float sizes of the terms
(:attr:`Gradients.magnitudes`).  The exact values are built entry by entry, on demand, as
numerators over the rows' ``Z^2`` (:meth:`Gradients.atom_parts`), not matrix by matrix.

>>> from exactattn.call.policy import Policy
>>> from exactattn.gradients import gradients
>>> g = gradients([[0], [1]], [[0], [1]], [[1], [3]], [[1], [1]], Policy(scale="none"))
>>> g.decimals("dV", 4), g.dQ[0][0].rational()
([['0.7689'], ['1.2311']], Fraction(1, 2))
>>> g.dS[1][0].text()
'-2*exp(1)/(1 + exp(1))^2'
"""

from __future__ import annotations

from fractions import Fraction
from functools import cached_property
from typing import Sequence

import numpy as np

from ..call.inputs import object_array, reshaped
from ..numbers.bulk import mat_ints
from ..numbers.digits import decide, format_scaled, working_precision
from ..errors import InputError
from ..options import check_choice, check_places
from ..numbers.exact import fmpq_mat_of, fmpq_of, fraction_of, rational_sqrt, to_exact
from ..numbers.formats import float_format, round_cells, round_enclosures, round_value
from ..numbers.reals import Tanh, atom_ball
from ..numbers.ratio import ONE, ExpRatio
from ..numbers.terms import Terms, row_kinds
from . import floats


#: the precision (bits) whole matrices are first enclosed at
BULK_PREC = 64
#: the matrices a call's gradients hold (their shapes: :meth:`Gradients.shape`)
GRADIENTS = ("dQ", "dK", "dV", "dS", "dP", "D", "P", "O", "dsink")


def certified(balls, places: int, value, *, nan=None) -> list[list[str]]:
    """Decimals of a matrix from enclosures ``balls[i][j]`` (``arb``).

    Each entry is rounded by :func:`exactattn.numbers.digits.decide` from its ball; an
    entry the ball leaves undecided goes to ``value(i, j).decimal`` (the exact
    path).  ``nan(i, j)`` (optional) marks NaN entries.
    """
    def one(i, j, b):
        if nan is not None and nan(i, j):
            return "nan"
        k = decide(b, places)
        return value(i, j).decimal(places) if k is None else format_scaled(k, places)
    return [[one(i, j, b) for j, b in enumerate(r)] for i, r in enumerate(balls)]



def compose(x, P, dP, Q, K, V, dO, *, ok, s, W=None, dlse=None, f=None, turn=None) -> dict:
    """The backward's formulas, once, over a context ``x``: its ``dot`` (row sums of a
    product), ``mul`` and ``sub`` (entrywise, a column or a scalar broadcast), ``matmul``,
    ``T`` and ``where`` (rows kept, others 0): :class:`_Balls` (``arb``), :data:`_Sizes`
    (float sizes of the terms) and :mod:`~exactattn.reference.floats`' intervals.

    ``P`` the shares (hidden pairs 0), ``dP`` the gradient w.r.t. them, ``W`` the weights
    (``P`` times the dropout factors; ``P`` without), ``ok`` the rows whose dS is kept (R x 1),
    ``s`` the scale, ``dlse`` the rows' upstream log-sum-exp gradients (R x 1), ``f`` the
    soft-cap's ``1 - tanh^2`` per pair, ``turn`` ``(rotate, query positions, key positions)``
    of RoPE (``rotate(m, positions)``; negative positions turn back).
    """
    D = x.dot(P, dP)                                        # D_i = sum_j P_ij dP_ij
    dS = x.where(ok, x.mul(P, x.sub(dP, D if dlse is None else x.sub(D, dlse))))
    dSf = dS if f is None else x.mul(dS, f)
    if turn is not None:
        rotate, at_q, at_k = turn
        Q, K = rotate(Q, at_q), rotate(K, at_k)
    dQ, dK = x.mul(x.matmul(dSf, K), s), x.mul(x.matmul(x.T(dSf), Q), s)
    if turn is not None:                                    # R^T: back from the positions
        dQ, dK = rotate(dQ, [-p for p in at_q]), rotate(dK, [-p for p in at_k])
    W = P if W is None else W
    return {"P": P, "dP": dP, "D": D, "dS": dS, "dQ": dQ, "dK": dK, "dV": x.matmul(x.T(W), dO),
            "O": x.matmul(W, V)}


def _objects(m) -> np.ndarray:
    """An ``arb_mat`` as a numpy object array of its ``arb`` entries."""
    return np.array(m.entries(), dtype=object).reshape(m.nrows(), m.ncols())


class _Balls:
    """:func:`compose` over ``arb`` balls (numpy object arrays, products through ``arb_mat``) at
    the current precision; ``centre``: (row, its first visible column) whose D is taken as
    ``c + sum_j P_j (dP_j - c)``, c that column's dP (a row of equal dP gets dS exactly 0)."""
    mul, sub, T = np.multiply, np.subtract, staticmethod(np.transpose)

    def __init__(self, centre):
        self.centre = centre

    def dot(self, P, dP):
        from flint import arb
        D = (P * dP).sum(axis=1, keepdims=True, initial=arb(0))
        for i, j in self.centre:
            c = dP[i, j]
            D[i, 0] = c + sum(P[i] * (dP[i] - c), arb(0))
        return D

    @staticmethod
    def matmul(a, b):
        from flint import arb_mat
        return _objects(arb_mat(*a.shape, a.ravel().tolist()) * arb_mat(*b.shape, b.ravel().tolist()))

    @staticmethod
    def where(ok, a):
        from flint import arb
        return np.where(ok, a, arb(0))


class _Sizes:
    """:func:`compose` over float sizes (``|dP|``, ...): a difference adds."""
    mul, sub, matmul, T = np.multiply, np.add, np.matmul, np.transpose
    dot = staticmethod(lambda P, A: (P * A).sum(axis=1, keepdims=True))
    where = staticmethod(lambda ok, a: np.where(ok, a, 0.0))


class Gradients:
    """The exact gradients of one block of a call: batch ``b``, the query heads ``hs`` that
    read one key/value head (a GQA group), read from the call's
    :class:`~exactattn.reference.reference.Reference` ``ref``: its R = len(hs) L query rows
    (head by head), S keys, visibility, offsets (masks, ALiBi), sink and dropout factors.
    ``d_out`` (B x H_q x L x E_v) and ``d_lse`` (None or B x H_q x L: the upstream gradients of
    the rows' log-sum-exps, ``d lse_i / d x_ij = P_ij``, so ``dS_ij = P_ij (dP_ij - D_i +
    dlse_i)``) are exact object arrays (:func:`d_out_array`).  Every enclosure reads the shares
    of the forward's softmax rows (:meth:`Reference.row <exactattn.verify.Reference.row>`: the
    one composition).

    With a soft-cap or RoPE (``positions`` the rows' query positions) the logits
    are transcendental, so the block is ``certified`` (its arb rows rotated as the forward
    rotates them: :func:`exactattn.reference.enclose.rotated_balls`); values come from
    enclosures, ``dQ = R_i^T scale sum_j dS_ij f_ij R_j k_j`` (``f = 1 - tanh^2(s / cap)``,
    R the rotation at a position; likewise dK), and signs are bounded
    (:class:`~exactattn.errors.Undecided` past the bound).

    Attributes (lists of :class:`~exactattn.numbers.ratio.ExpRatio`, built on access): ``dQ`` R x E,
    ``dK`` S x E, ``dV`` S x E_v, ``dS`` R x S (also the gradient w.r.t. an
    additive mask or bias), ``dP`` R x S (rational), ``D`` R, ``P`` R x S,
    ``O`` R x E_v; ``dsink`` the gradient w.r.t. the sink logit (one value).
    """

    def __init__(self, ref, b: int, hs: list, d_out, d_lse=None):
        from ..call.modifiers import row_offsets
        call, policy, L, S = ref.exact_call, ref.policy, ref.L, ref.S
        queries = [r for h in hs for r in call.query[b, h].tolist()]
        keys, values = call.key[b, ref.kv(hs[0])].tolist(), call.value[b, ref.kv(hs[0])].tolist()
        keep = np.concatenate([ref.visible(b, h) for h in hs])
        self.R, self.E, self.S, self.Ev = len(queries), ref.E, S, ref.Ev
        #: what the block reads: the reference, batch, query heads and upstream gradients
        self.source = ref, b, hs, d_out, d_lse
        self.sink = sink = policy.sink
        self.empty_row = policy.empty_row
        self.divisor_squared = divisor_squared = policy.divisor_squared_for(ref.E)
        root = None if divisor_squared is None else rational_sqrt(divisor_squared)
        #: D when the scale 1/sqrt(D) is irrational (carried by dQ and dK), else None
        self.irrational_scale = divisor_squared if divisor_squared is not None and root is None \
            else None
        self._scale_q = Fraction(1) if root is None else 1 / root
        self._Q, self._K, self._V, self._keep = queries, keys, values, keep
        self._dO = [r for h in hs for r in d_out[b, h].tolist()]
        # problem head h is model head policy.head + h (ALiBi)
        offsets = [ref.offsets(b, h, i) if ref.head_policy(h).alibi is None else
                   row_offsets(ref.head_policy(h), i, L, S, ref.offsets(b, h, i))
                   for h in hs for i in range(L)]
        factors = None if policy.dropout is None else \
            [ref.factors(b, h, i) for h in hs for i in range(L)]
        self._offsets = self._given_offsets = offsets
        self._factors = self._given_factors = factors
        #: columns of the block: the keys, then the sink's (value 0, offset the sink)
        self.cols = self.S + (sink is not None)
        if sink is not None:
            zero = Fraction(0)
            self._K = list(keys) + [[zero] * self.E]
            self._V = list(values) + [[zero] * self.Ev]
            self._keep = np.hstack([keep, np.ones((self.R, 1), dtype=bool)])
            self._offsets = [list(r if r is not None else [zero] * self.S) + [sink] for r in offsets]
            if factors is not None:
                self._factors = [list(r) + [Fraction(1)] for r in factors]
        self.positions = [policy.query_position(i, L, S) for i in range(L)] * len(hs)
        self.policy = policy = ref.head_policy(0)
        #: True over rotary or soft-capped logits (values from enclosures, signs bounded)
        self.certified = (policy.softcap, policy.rope) != (None, None)
        self._dlse = None if d_lse is None else [Fraction(x) for h in hs for x in d_lse[b, h].tolist()]
        self._capped = None
        self._balls: dict = {}
        self._parts, self._dP, self._W = {}, {}, {}     # the exact numerators' caches
        #: per row ``ok``, or the empty-row answer of a row that sees no key
        self.kinds = row_kinds(self._keep, self.empty_row)
        self._nan_rows = {i for i, k in enumerate(self.kinds) if k == "nan"}

    # -- the call, as given ----------------------------------------------------------------
    queries = property(lambda self: self._Q, doc="R x E queries (``Fraction``)")
    keys = property(lambda self: self._K[:self.S], doc="S x E keys (``Fraction``)")
    values = property(lambda self: self._V[:self.S], doc="S x E_v values (``Fraction``)")
    d_out = property(lambda self: self._dO, doc="R x E_v upstream gradient (``Fraction``)")
    keep = property(lambda self: self._keep[:, :self.S], doc="R x S visibility (booleans)")
    plain = property(lambda self: self.sink is None and self._factors is None and all(
        r is None for r in self._offsets) and not (
        self.certified or self._dlse), doc="True without offsets, sink, dropout, soft-cap, "
        "RoPE or dlse (the float enclosures' calls)")
    offsets = property(lambda self: self._given_offsets,
                       doc="per row None or S offsets added to the scaled scores (None: none)")
    factors = property(lambda self: self._given_factors,
                       doc="R x S dropout factors keep / (1 - p), or None")
    nan_rows = property(lambda self: frozenset(self._nan_rows),
                        doc="the rows that see no key under empty_row='nan'")
    scale_rational = property(lambda self: self._scale_q,
                              doc="the rational part of the scale (1/sqrt(D) when rational)")

    def __setattr__(self, name, value):    # the lazy pieces below are read-only, as the inputs
        if name in ("rows", "terms", "dP_matrix", "enclosures", "magnitudes"):
            raise AttributeError(f"{name} is read-only (computed from the gradients' inputs)")
        super().__setattr__(name, value)

    # -- lazily built exact pieces ---------------------------------------------------
    @cached_property
    def rows(self) -> list:
        """The forward's softmax rows of the block's queries (the sink's column last), built on
        first use."""
        ref, b, hs = self.source[:3]
        return [ref.row(b, h, i) for h in hs for i in range(ref.L)]

    @cached_property
    def terms(self) -> Terms:
        """The exponents as powers of the generators (:class:`Terms`), built on first use."""
        ints, den = mat_ints(fmpq_mat_of(self._Q) * fmpq_mat_of(self._K).transpose())
        return Terms(ints, den, self._keep, self._offsets, self.divisor_squared, self.empty_row)

    @cached_property
    def dP_matrix(self):
        """``M * (dO V^T)`` as an ``fmpq_mat``: the gradient w.r.t. the shares (exact)."""
        m = fmpq_mat_of(self._dO) * fmpq_mat_of(self._V).transpose()
        if self._factors is not None:
            from flint import fmpq_mat
            m = fmpq_mat(self.R, self.cols, [m[i, j] * fmpq_of(Fraction(self._factors[i][j]))
                                             for i in range(self.R) for j in range(self.cols)])
        return m

    def d_lse(self, i: int) -> Fraction:
        """Row i's upstream gradient of its log-sum-exp (0 without one)."""
        return Fraction(0) if self._dlse is None else self._dlse[i]

    def factor(self, i: int, j: int) -> Fraction:
        """The dropout factor of pair (i, j) (1 without dropout)."""
        return Fraction(1) if self._factors is None else Fraction(self._factors[i][j])

    # -- values -----------------------------------------------------------------------
    def value(self, name: str, *index: int, rows=None) -> ExpRatio:
        """One entry, e.g. ``value("dQ", i, c)``, ``value("D", i)``, ``value("dsink")`` (over
        ``rows``, default every row: one query head's rows of a GQA block)."""
        check_choice(name, "name", GRADIENTS)
        if name == "dsink":
            if self.sink is None:
                raise InputError("the call must have a sink for dsink (got none); set "
                                 "Policy(sink=...)")
            return ExpRatio({("dS", i, self.S): 1 for i in rows or range(self.R)}, self)
        scaled = name in ("dQ", "dK") and self.irrational_scale is not None
        return ExpRatio({(name, *index): 1}, self, scaled)

    def matrix(self, name: str) -> list:
        """Every entry of one gradient (a list for ``D`` and ``dsink``, else a list of rows)."""
        rows, cols = self.shape(name)
        if name == "dsink":
            return [self.value(name)]
        if cols is None:
            return [self.value(name, i) for i in range(rows)]
        return [[self.value(name, i, c) for c in range(cols)] for i in range(rows)]

    def shape(self, name: str) -> tuple[int, int | None]:
        """(rows, columns) of a gradient (columns None for the vectors ``D`` and ``dsink``)."""
        return {"dQ": (self.R, self.E), "dK": (self.S, self.E), "dV": (self.S, self.Ev),
                "dS": (self.R, self.S), "dP": (self.R, self.S), "D": (self.R, None),
                "P": (self.R, self.S), "O": (self.R, self.Ev), "dsink": (1, None)}[name]

    dQ = property(lambda self: self.matrix("dQ"), doc="R x E exact dQ = scale dS K")
    dK = property(lambda self: self.matrix("dK"), doc="S x E exact dK = scale dS^T Q")
    dV = property(lambda self: self.matrix("dV"), doc="S x E_v exact dV = W^T dO")
    dS = property(lambda self: self.matrix("dS"), doc="R x S exact dS = P * (dP - D)")
    dP = property(lambda self: self.matrix("dP"), doc="R x S exact dP = M * (dO V^T) (rational)")
    D = property(lambda self: self.matrix("D"), doc="R exact D_i = sum_c dO_ic O_ic")
    P = property(lambda self: self.matrix("P"), doc="R x S exact shares")
    O = property(lambda self: self.matrix("O"), doc="R x E_v exact outputs")
    dsink = property(lambda self: self.value("dsink"),
                     doc="the gradient w.r.t. the sink logit: -sum_i P_i,sink D_i")

    def decimals(self, name: str, places: int) -> list:
        """Every entry of one gradient, correctly rounded to ``places`` decimals, in bulk."""
        check_places(places, "places")
        if name == "dsink":
            return [self.value(name).decimal(places)]
        self.value(name, 0, 0)            # the name check
        rows, cols = self.shape(name)
        got = self._float_decimals(name, places)
        if got is not None:
            return got
        balls = self.balls(BULK_PREC)[name]
        at = (lambda i, j: (i,)) if cols is None else (lambda i, j: (i, j))    # D: a vector
        got = certified([[balls[i]] if cols is None else [balls[i, c] for c in range(cols)]
                         for i in range(rows)], places, lambda i, j: self.value(name, *at(i, j)),
                        nan=lambda i, j: self.atom_nan((name, *at(i, j))))
        return [r[0] for r in got] if cols is None else got

    @cached_property
    def enclosures(self) -> dict | None:
        """Certified float64 ``(mid, rad)`` enclosures of every matrix
        (:func:`exactattn.reference.floats.enclose`), or None for a call they do not cover."""
        return floats.enclose(self)

    def _float_decimals(self, name: str, places: int):
        """Decimals from the certified float64 enclosures, or None where those do not apply."""
        if self.enclosures is None or places > floats.MAX_PLACES:
            return None
        mid, rad = self.enclosures[name]
        texts, undecided = floats.round_balls(mid, rad, places)
        for idx in zip(*undecided.nonzero()):
            idx = tuple(int(x) for x in idx)
            atom = (name, *idx)
            texts[idx] = "nan" if self.atom_nan(atom) else \
                self.value(name, *idx).decimal(places)
        for i in self._nan_rows:
            if name in ("dK", "dV"):
                texts[...] = "nan"
            elif name != "dP":
                texts[i] = "nan"
        return texts.tolist()

    # -- what the values ask for ----------------------------------------------------
    def atom_nan(self, atom: tuple) -> bool:
        """True when an atom (``("dQ", i, c)``, ...) is NaN: an empty row under ``nan`` feeds it."""
        name = atom[0]
        if name in ("dK", "dV"):
            return bool(self._nan_rows)
        if name in ("P", "O", "D", "dS", "dQ", "J"):
            return atom[1] in self._nan_rows
        return False

    def atom_ball(self, atom: tuple, prec: int):
        """An ``arb`` enclosure of one atom from the whole matrices at ``prec`` bits."""
        from flint import arb
        if atom == ONE:
            return arb(1)
        if atom[0] == "J":
            _, i, j, k = atom
            P = self.balls(prec)["P"]
            return P[i, j] * ((1 if j == k else 0) - P[i, k])
        got = self.balls(prec)[atom[0]]
        return got[atom[1]] if atom[0] == "D" else got[atom[1], atom[2]]

    def balls(self, prec: int) -> dict:
        """``arb`` enclosures of every matrix at ``prec`` bits or more: ``arb_mat`` (a list for
        ``D``); the enclosures of the nearest precision at or above ``prec`` computed so far
        (four are kept) when there are any.

        With a sink the matrices carry its column (index S) and row of ``dK``/``dV``.
        """
        # enclosures at more bits are enclosures at ``prec`` too (tighter): the nearest kept
        above = [p for p in self._balls if p >= prec]
        if above:
            near = min(above)
            hit = self._balls[near] = self._balls.pop(near)    # now the most recently used
            return hit
        from flint import arb, arb_mat
        from .enclose import rotated_balls
        R, C = self.R, self.cols
        with working_precision(prec):
            P = np.full((R, C), arb(0), dtype=object)
            for i in range(R):
                if self.kinds[i] not in ("zero", "nan"):    # the forward's shares
                    for j, g in enumerate(self.rows[i].gaps):
                        if g is not None:
                            P[i, j] = self.rows[i].share(j).ball(prec)
            Q, K, V, dO, M, dlse = self._inputs(lambda x: arb(fmpq_of(x)), object)
            s = arb(fmpq_of(self._scale_q))
            if self.irrational_scale is not None:
                s *= atom_ball(self.irrational_scale)
            centre = [(i, next(j for j, g in enumerate(self.rows[i].gaps) if g is not None))
                      for i in range(R) if self.certified and self.kinds[i] == "ok"]
            out = compose(_Balls(centre), P, _objects(arb_mat(self.dP_matrix)), Q, K, V, dO,
                          ok=self._ok, s=s, W=P if M is None else P * M, dlse=dlse,
                          f=self._cap_factor(), turn=self._turn(lambda m, at: _objects(
                              rotated_balls(list(m), at, self.policy.rope))))
            out = {k: list(v[:, 0]) if k == "D" else arb_mat(*v.shape, v.ravel().tolist())
                   for k, v in out.items()}
        if len(self._balls) >= 4:   # the least recently used goes (a report's entries ask
            self._balls.pop(next(iter(self._balls)))    # 64, 128, 256 bits each in turn)
        self._balls[prec] = out
        return out

    _ok = property(lambda self: np.array([[k == "ok"] for k in self.kinds]))
    compose = staticmethod(compose)       # for reference.floats, without an import cycle

    def _inputs(self, number, dtype) -> list:
        """Q, K, V, dO (K and V with the sink's row), the dropout factors and dlse (R x 1; None
        without them) as arrays of ``number(x)``."""
        return [None if m is None else np.array([[number(x) for x in r] for r in m], dtype=dtype)
                for m in (self._Q, self._K, self._V, self._dO, self._factors,
                          None if self._dlse is None else [[x] for x in self._dlse])]

    def _cap_factor(self):
        """A soft-capped block's ``f_ij = 1 - tanh^2(s_ij / cap)`` (``cap tanh(x / cap)``'s
        derivative; s the scaled score: the tanh atom of the forward row's logit, none where
        s = 0) as ``arb`` at the current precision, or None without a soft-cap."""
        from flint import arb
        if not self.certified or self.policy.softcap is None:
            return None
        f = [1 - sum((atom_ball(a) ** 2 for a, _ in getattr(row.gaps[j] if row.certified else
                      None, "terms", ()) if isinstance(a, Tanh)), arb(0))
             for row in self.rows for j in range(self.cols)]
        self._capped = [float(b.mid()) for b in f]
        return np.array(f, dtype=object).reshape(self.R, self.cols)

    def _turn(self, rotate):
        """``(rotate, query positions, key positions)`` of a rotary block, else None."""
        if not self.certified or self.policy.rope is None:
            return None
        return rotate, self.positions, list(range(self.cols))

    @cached_property
    def magnitudes(self) -> dict:
        """Float sizes of the terms each entry adds up (for errors in ULPs at the terms).

        ``dV_jc``: sum_i W_ij |dO_ic|; ``dS_ij``: P_ij (|dP|_ij + sum_k P_ik |dP|_ik) with
        ``|dP| = M |dO| |V|^T``; ``dQ``: |scale| |dS| |K|; ``dK``: |scale| |dS|^T |Q|: the
        formulas of :func:`compose` over sizes (a difference adds).  Numpy float64 arrays (a
        few digits; NaN rows count 0).
        """
        if self.enclosures is not None:
            P = np.array(self.enclosures["P"][0], dtype=np.float64)
        else:
            m = self.balls(BULK_PREC)["P"]
            P = np.array([[float(m[i, j].mid()) for j in range(self.cols)]
                          for i in range(self.R)])
        for i in self._nan_rows:
            P[i] = 0
        Q, K, V, dO, M, dlse = (a if a is None else np.abs(a) for a in self._inputs(float, float))
        M = np.ones(P.shape) if M is None else M
        s = float(self._scale_q) / (1.0 if self.irrational_scale is None
                                    else float(self.irrational_scale) ** 0.5)
        mix = np.eye(self.E)      # a rotation mixes a pair: |R x|_a <= |x_a| + |x_b|
        for a, b, *_ in self.policy.rope.pairs(self.E) if self._turn(0) else ():
            mix[a, b] = mix[b, a] = 1
        got = compose(_Sizes, P, (dO @ V.T) * M, Q, K, V, dO, ok=self._ok, s=s, W=P * M, dlse=dlse,
                      # the soft-cap's factor 1 - tanh^2 adds up terms of size 1 + tanh^2 = 2 - f
                      f=None if self._capped is None else 2 - np.reshape(self._capped, P.shape),
                      turn=self._turn(lambda m, _: m @ mix))
        return {"dQ": got["dQ"], "dK": got["dK"][:self.S], "dV": got["dV"][:self.S],
                "dS": got["dS"]}

    # -- exact numerators: each atom as sum_k N_k / Z_k^2 over the generators (Terms) --------
    def _dP_row(self, i: int) -> list[Fraction]:
        if i not in self._dP:
            self._dP[i] = [fraction_of(self.dP_matrix[i, j]) for j in range(self.cols)]
        return self._dP[i]

    def _row_poly(self, i: int, weights: Sequence[Fraction]):
        """``sum_j weights[j] t^(a_ij)`` over row i's visible keys."""
        terms = self.terms
        coef: dict = {}
        for j, e in zip(terms.visible(i), terms.exponents(i)):
            w = weights[j]
            if w:
                coef[e] = coef.get(e, 0) + w
        return terms.poly(coef)

    def _W_row(self, i: int):
        """``W_i = sum_j dP_ij t^(a_ij)`` (``D_i = W_i / Z_i``)."""
        if i not in self._W:
            self._W[i] = self._row_poly(i, self._dP_row(i))
        return self._W[i]

    def _mono(self, i: int, j: int):
        """``t^(a_ij)`` when row i's shares run over key j, else None."""
        terms = self.terms
        k = terms.position(i, j)
        return None if k is None else terms.poly({terms.exponents(i)[k]: Fraction(1)})

    def atom_parts(self, atom: tuple) -> dict:
        """``{class: N}``: the atom as ``sum N / Z^2`` (the rational scale folded in; cached)."""
        if atom not in self._parts:
            self._parts[atom] = self._build_parts(atom)
        return self._parts[atom]

    def _build_parts(self, atom: tuple) -> dict:
        terms = self.terms
        name = atom[0]
        if atom == ONE:
            return {terms.one: terms.poly({terms.one[0]: Fraction(1)})}
        if name == "dP":
            q = self._dP_row(atom[1])[atom[2]]
            return {terms.one: terms.poly({terms.one[0]: q})} if q else {}
        if name in ("dK", "dV"):
            return self._column_parts(name, atom[1], atom[2])
        i = atom[1]
        kind, key = terms.kinds[i], terms.class_of(i)
        if kind in ("zero", "nan") or (kind == "uniform" and name in ("dS", "dQ")):
            return {}
        Z = terms.normaliser(key)
        if name == "P":
            mono = self._mono(i, atom[2])
            return {} if mono is None else {key: mono * Z}
        if name == "O":
            c = atom[2]
            return {key: self._row_poly(i, [r[c] * self.factor(i, j)
                                            for j, r in enumerate(self._V)]) * Z}
        if name == "D":
            return {key: self._W_row(i) * Z}
        if name == "J":                 # P_ij (delta_jk - P_ik) = t^a_j (delta_jk Z - t^a_k) / Z^2
            mj, mk = self._mono(i, atom[2]), self._mono(i, atom[3])
            if mj is None:
                return {}
            inner = Z if atom[2] == atom[3] else Z * 0
            return {key: mj * (inner - (mk if mk is not None else Z * 0))}
        if name == "dS":
            mono = self._mono(i, atom[2])
            if mono is None:
                return {}
            q = self._dP_row(i)[atom[2]] + self.d_lse(i)
            return {key: mono * (Z * fmpq_of(q) - self._W_row(i))}
        # dQ_ic = scale sum_j K_jc dS_ij
        c = atom[2]
        dP = self._dP_row(i)
        Kc = [r[c] for r in self._K]
        lse = self.d_lse(i)
        A = self._row_poly(i, [k * (d + lse) for k, d in zip(Kc, dP)])
        B = self._row_poly(i, Kc)
        return {key: (A * Z - B * self._W_row(i)) * fmpq_of(self._scale_q)}

    def _column_parts(self, name: str, j: int, c: int) -> dict:
        """dK_jc = scale sum_i Q_ic dS_ij and dV_jc = sum_i dO_ic W_ij, row class by row class."""
        out: dict = {}
        for i in range(self.R):
            w = self._Q[i][c] * self._scale_q if name == "dK" else \
                self._dO[i][c] * self.factor(i, j)
            for key, piece in self._build_parts(("dS" if name == "dK" else "P", i, j)).items() \
                    if w else ():
                out[key] = out[key] + piece * fmpq_of(w) if key in out else piece * fmpq_of(w)
        return out

    def row_sum(self, i: int) -> ExpRatio:
        """``sum_j dS_ij`` over every column of row i (the sink's included): 0 exactly."""
        return ExpRatio({("dS", i, j): 1 for j in range(self.cols)}, self)

    def jacobian(self, i: int) -> list:
        """Row i's softmax Jacobian ``J_jk = dP_ij / dx_ik = P_ij (delta_jk - P_ik)`` as
        values, over every column of the block (the sink's last): symmetric, rows summing to 0,
        and ``sum_k J_jk dP_ik = dS_ij``."""
        return [[ExpRatio({("J", i, j, k): 1}, self) for k in range(self.cols)]
                for j in range(self.cols)]


class ExactGradients:
    """The exact gradients of every head of a call: one :class:`Gradients` block per (batch,
    key/value head), read from the call's :class:`~exactattn.reference.reference.Reference`:
    which keys each query sees, its offsets (an additive mask, ALiBi) and dropout factors, and
    over soft-capped or rotary logits the forward's rows and rotation."""

    def __init__(self, ref, d_out: np.ndarray, d_lse: np.ndarray | None = None):
        self.shape, self.policy = sh, policy = ref.exact_call.shape, ref.policy
        self.heads = {g: policy.query_heads(g, sh["H_q"], sh["H_kv"]) for g in range(sh["H_kv"])}
        self.blocks = {(b, g): Gradients(ref, b, hs, d_out, d_lse)
                       for b in range(sh["B"]) for g, hs in self.heads.items()}

    def locate(self, name: str, b: int, h: int, i: int, c: int):
        """(block, row, column) of one entry (h is the query head for dQ, else the kv head)."""
        if name in ("dQ", "dsink"):
            g = self.policy.kv_head(h, self.shape["H_q"], self.shape["H_kv"])
            return self.blocks[(b, g)], self.heads[g].index(h) * self.shape["L"] + i, c
        return self.blocks[(b, h)], i, c

    def value(self, name: str, b: int, h: int, i: int, c: int):
        """One entry; ``dsink`` (at i = c = 0) is query head h's: its rows' sum."""
        block, row, col = self.locate(name, b, h, i, c)
        if name == "dsink":
            return block.value(name, rows=range(row, row + self.shape["L"]))
        return block.value(name, row, col)

    def shape_of(self, name: str) -> tuple:
        sh = self.shape
        return {"dQ": (sh["B"], sh["H_q"], sh["L"], sh["E"]),
                "dK": (sh["B"], sh["H_kv"], sh["S"], sh["E"]),
                "dV": (sh["B"], sh["H_kv"], sh["S"], sh["E_v"]),
                "dsink": (sh["B"], sh["H_q"], 1, 1)}[name]

    def rounded(self, name: str, dtype, prec: int):
        """``(floats, balls, magnitudes)`` of one gradient, correctly rounded to ``dtype``.

        Whole blocks are enclosed at ``prec`` bits, then at twice that; what is left
        (exact zeros, ties, stragglers) is rounded entry by entry from its exact value
        (:func:`~exactattn.numbers.formats.round_cells`).
        """
        from flint import arb
        fmt = float_format(dtype)
        shape = self.shape_of(name)
        rounded = np.empty(shape)
        balls = np.empty(shape, dtype=object)
        mags = np.zeros(shape)
        for b, h in np.ndindex(*shape[:2]):
            block, start, _ = self.locate(name, b, h, 0, 0)
            if name == "dsink":           # one sum per query head: its rows at the sink
                mags[b, h] = block.magnitudes["dS"][start:start + self.shape["L"], -1].sum()
                rounded[b, h], balls[b, h] = round_value(self.value(name, b, h, 0, 0), fmt,
                                                         prec)
                continue
            mags[b, h] = block.magnitudes[name][start:start + shape[2]]
            todo = [(i, c) for i in range(shape[2]) for c in range(shape[3])]
            got = block.enclosures if fmt.name == "float32" else None
            # float32 from the certified float64 enclosures (reference.floats) where they decide
            # it, their ends pushed two float64s outwards; NaN rows and the rest go on below
            if got is not None:
                m, r = (a[start:start + shape[2]] for a in got[name])
                f, ok = round_enclosures(m, r, "float32", steps=2)
                ok &= ~np.array([block.atom_nan((name, start + i, 0))
                                 for i in range(shape[2])], dtype=bool)[:, None]
                for i, c in todo:
                    if ok[i, c]:
                        rounded[b, h, i, c] = float(f[i, c])
                        balls[b, h, i, c] = arb(float(m[i, c]), float(r[i, c]))
                todo = [(i, c) for i, c in todo if not ok[i, c]]
            if not todo:
                continue

            def balls_at(p):
                mat = block.balls(p)[name]
                return lambda cell: None if block.atom_nan((name, start + cell[0], cell[1])) \
                    else mat[start + cell[0], cell[1]]
            round_cells(todo, balls_at, lambda cell: block.value(name, start + cell[0], cell[1]),
                        fmt, prec, (rounded[b, h], balls[b, h]), max_prec=2 * prec,
                        exact_prec=4 * prec)
        return rounded, balls, mags


def d_out_array(problem, d_out, name: str = "d_out") -> np.ndarray:
    """``d_out`` (the output's shape), or with ``name="d_lse"`` the rows' log-sum-exp gradients
    (B x H_q x L in the call's rank), as an object array of exact numbers."""
    sh = problem.shape
    lse = name == "d_lse"
    want = (sh["B"], sh["H_q"], sh["L"]) + (() if lse else (sh["E_v"],))
    arr = reshaped(np.array(d_out, dtype=object), want, problem.rank - lse, name, tail=not lse,
                   like=" like the log-sum-exp" if lse else " like the output")
    flat = [v if type(v) is Fraction else to_exact(v.item() if isinstance(v, np.generic) else v,
                                                    name=name, floats="exact")
            for v in arr.reshape(-1)]
    return object_array(flat, want)


