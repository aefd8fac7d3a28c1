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
from typing import Sequence

import numpy as np

from ..call.inputs import object_array, reshaped
from ..call.policy import EMPTY_ROWS, Policy
from ..numbers.bulk import mat_ints
from ..numbers.digits import decide, format_scaled, working_precision
from ..errors import InputError, ShapeError, shorten
from ..options import check_choice
from ..numbers.exact import fmpq_mat_of, fmpq_of, fraction_of, rational_sqrt, to_exact
from ..numbers.formats import float_format, round_cells, round_enclosures, round_value
from ..numbers.reals import atom_ball
from ..numbers.ratio import ONE, ExpRatio
from ..numbers.softmax import SoftmaxRow
from ..numbers.terms import Terms, row_kinds


#: the precision (bits) whole matrices are first enclosed at
BULK_PREC = 64
#: the matrices a call's gradients hold: name -> (rows, columns) in words
GRADIENTS = {"dQ": "queries x E", "dK": "keys x E", "dV": "keys x E_v",
             "dS": "queries x keys", "dP": "queries x keys", "D": "queries",
             "P": "queries x keys", "O": "queries x E_v", "dsink": "one number"}
_SCALED = ("dQ", "dK")


def certified(balls, places: int, value, *, nan=None) -> list[list[str]]:
    """Decimals of a matrix from enclosures ``balls[i][j]`` (``arb``).

    Each entry is rounded by :func:`exactattn.numbers.digits.decide` from its ball; an
    entry the ball leaves undecided goes to ``value(i, j).decimal`` (the exact
    path).  ``nan(i, j)`` (optional) marks NaN entries.
    """
    out = []
    for i, brow in enumerate(balls):
        row = []
        for j, b in enumerate(brow):
            if nan is not None and nan(i, j):
                row.append("nan")
                continue
            k = decide(b, places)
            row.append(value(i, j).decimal(places) if k is None else format_scaled(k, places))
        out.append(row)
    return out



class Gradients:
    """The exact gradients of one attention call (one block of query rows against one key set).

    Shapes: ``queries`` R x E, ``keys`` S x E, ``values`` S x E_v, ``d_out``
    R x E_v (lists of ``Fraction``); ``keep`` R x S booleans; ``offsets`` None
    or per row None or S numbers (``Fraction`` or
    :class:`~exactattn.numbers.reals.Surd`) added to the scaled scores (masks, ALiBi);
    ``sink`` None or the sink's logit; ``factors`` None or R x S dropout
    factors ``keep / (1 - p)`` (:func:`exactattn.call.modifiers.dropout_factors`); ``d_lse``
    None or R upstream gradients of the rows' log-sum-exps (``d lse_i / d x_ij = P_ij``, so
    ``dS_ij = P_ij (dP_ij - D_i + dlse_i)``).  A GQA group is one block: the rows of every
    query head that reads the same keys.  ``rows`` are the forward's softmax rows of its
    queries (:meth:`Reference.row <exactattn.verify.Reference.row>`: the one composition; a
    list, or a function that builds it), whose shares every enclosure reads (a block built
    without them reads rows of its own exponents, :class:`~exactattn.numbers.terms.Terms`).

    ``policy`` with a soft-cap or RoPE (``positions`` the rows' query positions): the logits
    are transcendental, so the block is ``certified``: ``rotate`` is the forward's rotation of
    ``arb`` rows (:func:`exactattn.reference.enclose.rotated_balls`), handed in with the rows by
    :meth:`Reference.gradients <exactattn.verify.Reference.gradients>`; values come from
    enclosures, ``dQ = R_i^T scale sum_j dS_ij f_ij R_j k_j`` (``f = 1 - tanh^2(s / cap)``,
    R the rotation at a position; likewise dK), and signs are bounded
    (:class:`~exactattn.errors.Undecided` past the bound).

    Attributes (lists of :class:`~exactattn.numbers.ratio.ExpRatio`, built on access): ``dQ`` R x E,
    ``dK`` S x E, ``dV`` S x E_v, ``dS`` R x S (also the gradient w.r.t. an
    additive mask or bias), ``dP`` R x S (rational), ``D`` R, ``P`` R x S,
    ``O`` R x E_v; ``dsink`` the gradient w.r.t. the sink logit (one value).
    """

    def __init__(self, queries, keys, values, d_out, *, keep, offsets=None,
                 divisor_squared: Fraction | None = None, empty_row: str = "zero",
                 sink=None, factors=None, policy=None, positions=None, d_lse=None, rows=None,
                 rotate=None):
        self.R, self.E = len(queries), len(queries[0])
        self.S, self.Ev = len(keys), len(values[0])
        if tuple(keep.shape) != (self.R, self.S):
            raise ShapeError(f"keep must be {self.R} x {self.S} like queries x keys "
                             f"(got {' x '.join(map(str, keep.shape))})")
        self.sink = sink
        self.empty_row = empty_row
        self.divisor_squared = divisor_squared
        root = None if divisor_squared is None else rational_sqrt(divisor_squared)
        #: D when the scale 1/sqrt(D) is irrational (carried by dQ and dK), else None
        self.irrational_scale = divisor_squared if divisor_squared is not None and root is None \
            else None
        self._scale_q = Fraction(1) if root is None else 1 / root
        self._Q, self._K, self._V, self._dO = queries, keys, values, d_out
        self._keep = keep
        self._offsets = self._given_offsets = offsets
        self._factors = self._given_factors = factors
        #: columns of the block: the keys, then the sink's (value 0, offset the sink)
        self.cols = self.S + (sink is not None)
        if sink is not None:
            zero = Fraction(0)
            self._K = list(keys) + [[zero] * self.E]
            self._V = list(values) + [[zero] * self.Ev]
            self._keep = np.hstack([keep, np.ones((self.R, 1), dtype=bool)])
            given = offsets if offsets is not None else [None] * self.R
            self._offsets = [list(r if r is not None else [zero] * self.S) + [sink] for r in given]
            if factors is not None:
                self._factors = [list(r) + [Fraction(1)] for r in factors]
        self.policy = policy
        #: True over rotary or soft-capped logits (values from enclosures, signs bounded)
        self.certified = policy is not None and (policy.softcap, policy.rope) != (None, None)
        self.positions = positions or [policy.query_position(i, self.R, self.S)
                                       for i in range(self.R)] if policy is not None else None
        self._dlse = None if d_lse is None else [Fraction(x) for x in d_lse]
        if self.certified and rows is None:
            raise InputError(f"policy {'softcap' if policy.softcap else 'rope'} must come with the "
                             "forward's rows for gradients (got none); use Reference(Call(q, k, "
                             "v, policy=...)).gradients(d_out), which certifies them")
        self._rows, self._rotate, self._capped = rows, rotate, None
        self._terms = None
        self._mats = None
        self._dPm_cache = None
        self._balls: dict = {}
        self._parts, self._dP, self._W = {}, {}, {}     # the exact numerators' caches
        self._magnitudes = None
        self._floats = False         # not tried yet (None: not available)
        #: per row ``ok``, or the empty-row answer of a row that sees no key
        self.kinds = row_kinds(self._keep, check_choice(empty_row, "empty_row", EMPTY_ROWS))
        self._nan_rows = {i for i, k in enumerate(self.kinds) if k == "nan"}

    # -- the call, as given ----------------------------------------------------------------
    queries = property(lambda self: self._Q, doc="R x E queries (``Fraction``)")
    keys = property(lambda self: self._K[:self.S], doc="S x E keys (``Fraction``)")
    values = property(lambda self: self._V[:self.S], doc="S x E_v values (``Fraction``)")
    d_out = property(lambda self: self._dO, doc="R x E_v upstream gradient (``Fraction``)")
    keep = property(lambda self: self._keep[:, :self.S], doc="R x S visibility (booleans)")
    plain = property(lambda self: self.sink is None and self._factors is None and (
        self._offsets is None or all(r is None for r in self._offsets)) and not (
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

    # -- lazily built exact pieces ---------------------------------------------------
    @property
    def rows(self) -> list:
        """The forward's softmax rows of the block's queries (the sink's column last), handed in
        by :class:`ExactGradients` (a list, or a function that builds it on first use)."""
        if callable(self._rows):
            self._rows = self._rows()
        elif self._rows is None:      # a block built by hand: rows of its own exponents
            t = self.terms
            self._rows = [None if k in ("zero", "nan") else SoftmaxRow.of_logits(
                [None if t.position(i, j) is None else
                 t.logit(i, t.exponents(i)[t.position(i, j)]) for j in range(self.cols)])
                for i, k in enumerate(t.kinds)]
        return self._rows

    @property
    def terms(self) -> Terms:
        """The exponents as powers of the generators (:class:`Terms`), built on first use."""
        if self._terms is None:
            Qm, Km = self.mats[:2]
            ints, den = mat_ints(Qm * Km.transpose())
            self._terms = Terms(ints, den, self._keep, self._offsets,
                                self.divisor_squared, self.empty_row)
        return self._terms

    @property
    def mats(self) -> list:
        """``fmpq_mat`` of Q, K, V and dO (K and V with the sink's zero row)."""
        if self._mats is None:
            self._mats = [fmpq_mat_of(m) for m in (self._Q, self._K, self._V, self._dO)]
        return self._mats

    @property
    def dP_matrix(self):
        """``M * (dO V^T)`` as an ``fmpq_mat``: the gradient w.r.t. the shares (exact)."""
        if self._dPm_cache is None:
            Vm, dOm = self.mats[2:]
            m = dOm * Vm.transpose()
            if self._factors is not None:
                from flint import fmpq_mat
                m = fmpq_mat(self.R, self.cols,
                             [m[i, j] * fmpq_of(Fraction(self._factors[i][j]))
                              for i in range(self.R) for j in range(self.cols)])
            self._dPm_cache = m
        return self._dPm_cache

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
        check_choice(name, "name", tuple(GRADIENTS))
        if name == "dsink":
            if self.sink is None:
                raise InputError("the call must have a sink for dsink (got none); set "
                                 "Policy(sink=...)")
            return ExpRatio({("dS", i, self.S): 1 for i in rows or range(self.R)}, self)
        scaled = name in _SCALED and self.irrational_scale is not None
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
        from ..options import check_places
        check_places(places, "places")
        if name == "dsink":
            return [self.value(name).decimal(places)]
        self.value(name, 0, 0)            # the name check
        rows, cols = self.shape(name)
        got = self._float_decimals(name, places)
        if got is not None:
            return got
        balls = self.balls(BULK_PREC)[name]
        if cols is None:
            return [r[0] for r in certified([[b] for b in balls], places,
                                            lambda i, j: self.value(name, i),
                                            nan=lambda i, j: self.atom_nan((name, i)))]
        grid = [[balls[i, c] for c in range(cols)] for i in range(rows)]
        return certified(grid, places, lambda i, j: self.value(name, i, j),
                         nan=lambda i, j: self.atom_nan((name, i, j)))

    def enclosures(self) -> dict | None:
        """Certified float64 ``(mid, rad)`` enclosures of every matrix
        (:func:`exactattn.reference.floats.enclose`), or None for a call they do not cover."""
        from . import floats
        if self._floats is False:
            self._floats = floats.enclose(self)
        return self._floats

    def _float_decimals(self, name: str, places: int):
        """Decimals from the certified float64 enclosures, or None where those do not apply."""
        from . import floats
        if self.enclosures() is None or places > floats.MAX_PLACES:
            return None
        mid, rad = self._floats[name]
        rows, cols = self.shape(name)
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
        R, C = self.R, self.cols
        with working_precision(prec):
            dPm = arb_mat(self.dP_matrix)
            flat = dPm.entries()
            zero = arb(0)
            P = [[zero] * C for _ in range(R)]
            dS = [[zero] * C for _ in range(R)]
            D = [zero] * R
            for i in range(R):
                if self.kinds[i] in ("zero", "nan"):
                    continue
                vis = [j for j, g in enumerate(self.rows[i].gaps) if g is not None]
                row = [self.rows[i].share(j).ball(prec) for j in vis]    # the forward's shares
                dPi = [flat[i * C + j] for j in vis]
                Pi = P[i]
                d = arb(0)
                for j, p, x in zip(vis, row, dPi):
                    Pi[j] = p
                    d += p * x
                if self.certified and self.kinds[i] == "ok":   # D = c + sum P (dP - c): a row
                    c = dPi[0]                                # of equal dP gets dS exactly 0
                    d = c + sum((p * (x - c) for p, x in zip(row, dPi)), arb(0))
                D[i] = d
                if self.kinds[i] == "ok":
                    dSi = dS[i]
                    if self._dlse is not None:
                        d = d - arb(fmpq_of(self._dlse[i]))
                    for j, p, x in zip(vis, row, dPi):
                        dSi[j] = p * (x - d)
            Qm, Km, Vm, dOm = (arb_mat(m) for m in self.mats)
            Pm = arb_mat(R, C, [e for r in P for e in r])
            if self._factors is None:
                Wm = Pm
            else:
                Wm = arb_mat(R, C, [P[i][j] * arb(fmpq_of(self.factor(i, j)))
                                    for i in range(R) for j in range(C)])
            dSm = arb_mat(R, C, [e for r in dS for e in r])
            s = arb(fmpq_of(self._scale_q))
            if self.irrational_scale is not None:
                s *= atom_ball(self.irrational_scale)
            dQ, dK = self._chain(dSm, s) if self.certified else \
                ((dSm * Km) * s, (dSm.transpose() * Qm) * s)
            out = {"P": Pm, "dP": dPm, "D": D, "dS": dSm, "O": Wm * Vm,
                   "dQ": dQ, "dK": dK, "dV": Wm.transpose() * dOm}
        if len(self._balls) >= 4:   # the least recently used goes (a report's entries ask
            self._balls.pop(next(iter(self._balls)))    # 64, 128, 256 bits each in turn)
        self._balls[prec] = out
        return out

    def _chain(self, dS, s) -> tuple:
        """dQ and dK of a certified block: each dS_ij times ``f_ij = 1 - tanh^2(s_ij / cap)``
        (``cap tanh(x / cap)``'s derivative; s the scaled score: the tanh atom of the forward
        row's logit, none where s = 0), the queries and keys rotated to their positions and the
        results turned back (``R^T``): at the current precision."""
        from flint import arb, arb_mat
        from ..numbers.reals import Tanh
        pol, keys, rotated_balls = self.policy, list(range(self.cols)), self._rotate
        if pol.rope is None:
            Qr, Kr = (arb_mat(m) for m in self.mats[:2])
        else:
            Qr, Kr = rotated_balls(self._Q, self.positions, pol.rope), \
                rotated_balls(self._K, keys, pol.rope)
        if pol.softcap is not None:
            f = [1 - sum((atom_ball(a) ** 2 for a, _ in getattr(row.gaps[j] if row.certified else
                          None, "terms", ()) if isinstance(a, Tanh)), arb(0))
                 for row in self.rows for j in keys]
            self._capped = [float(b.mid()) for b in f]
            dS = arb_mat(self.R, self.cols, [a * b for a, b in zip(dS.entries(), f)])
        dQ, dK = (dS * Kr) * s, (dS.transpose() * Qr) * s
        if pol.rope is None:
            return dQ, dK
        def back(m, positions):
            rows = [[m[i, c] for c in range(m.ncols())] for i in range(m.nrows())]
            return rotated_balls(rows, [-p for p in positions], pol.rope)
        return back(dQ, self.positions), back(dK, keys)

    def magnitudes(self) -> dict:
        """Float sizes of the terms each entry adds up (for errors in ULPs at the terms).

        ``dV_jc``: sum_i W_ij |dO_ic|; ``dS_ij``: P_ij (|dP|_ij + sum_k P_ik |dP|_ik) with
        ``|dP| = M |dO| |V|^T``; ``dQ``: |scale| |dS| |K|; ``dK``: |scale| |dS|^T |Q|.
        Numpy float64 arrays (a few digits; NaN rows count 0).
        """
        if self._magnitudes is not None:
            return self._magnitudes
        if self.enclosures() is not None:
            P = np.array(self._floats["P"][0], dtype=np.float64)
        else:
            m = self.balls(BULK_PREC)["P"]
            P = np.array([[float(m[i, j].mid()) for j in range(self.cols)]
                          for i in range(self.R)])
        for i in self._nan_rows:
            P[i] = 0
        f = [np.array([[float(e) for e in r] for r in mat], dtype=np.float64)
             for mat in (self._Q, self._K, self._V, self._dO)]
        Q, K, V, dO = (np.abs(a) for a in f)
        M = np.ones(P.shape) if self._factors is None else \
            np.array([[float(x) for x in r] for r in self._factors], dtype=np.float64)
        A = (dO @ V.T) * M
        lse = np.abs(np.array([float(self.d_lse(i)) for i in range(self.R)]))[:, None]
        dS = P * (A + (P * A).sum(axis=1, keepdims=True) + lse)
        for i, k in enumerate(self.kinds):
            if k != "ok":
                dS[i] = 0
        s = float(self._scale_q) / (1.0 if self.irrational_scale is None
                                    else float(self.irrational_scale) ** 0.5)
        pairs = [] if not self.certified or self.policy.rope is None else \
            [p[:2] for p in self.policy.rope.pairs(self.E)]
        mix = np.eye(self.E)      # a rotation mixes a pair: |R x|_a <= |x_a| + |x_b|
        for a, b in pairs:
            mix[a, b] = mix[b, a] = 1
        Q, K = Q @ mix, K @ mix
        # the soft-cap's factor 1 - tanh^2 adds up terms of size 1 + tanh^2 = 2 - f
        dSf = dS if self._capped is None else dS * (2 - np.reshape(self._capped, dS.shape))
        dQ, dK = s * dSf @ K @ mix, s * dSf.T @ Q @ mix
        self._magnitudes = {"dQ": dQ, "dK": dK[:self.S], "dV": ((P * M).T @ dO)[:self.S],
                            "dS": dS}
        return self._magnitudes

    # -- exact numerators: each atom as sum_k N_k / Z_k^2 over the generators (Terms) --------
    def _dP_row(self, i: int) -> list[Fraction]:
        hit = self._dP.get(i)
        if hit is None:
            hit = self._dP[i] = [fraction_of(self.dP_matrix[i, j]) for j in range(self.cols)]
        return hit

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
        hit = self._W.get(i)
        if hit is None:
            hit = self._W[i] = self._row_poly(i, self._dP_row(i))
        return hit

    def _mono(self, i: int, j: int):
        """``t^(a_ij)`` when row i's shares run over key j, else None."""
        terms = self.terms
        k = terms.position(i, j)
        return None if k is None else terms.poly({terms.exponents(i)[k]: Fraction(1)})

    def atom_parts(self, atom: tuple) -> dict:
        """``{class: N}``: the atom as ``sum N / Z^2`` (the rational scale folded in; cached)."""
        hit = self._parts.get(atom)
        if hit is None:
            hit = self._parts[atom] = self._build_parts(atom)
        return hit

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
        return {key: (A * Z - B * self._W_row(i)) * fmpq_of(self.scale_rational)}

    def _column_parts(self, name: str, j: int, c: int) -> dict:
        """dK_jc = scale sum_i Q_ic dS_ij and dV_jc = sum_i dO_ic W_ij, row class by row class."""
        terms = self.terms
        out: dict = {}
        for i in range(self.R):
            kind = terms.kinds[i]
            if kind in ("zero", "nan") or (kind == "uniform" and name == "dK"):
                continue
            w = self.queries[i][c] if name == "dK" else self.d_out[i][c] * self.factor(i, j)
            if not w:
                continue
            mono = self._mono(i, j)
            if mono is None:
                continue
            key = terms.class_of(i)
            Z = terms.normaliser(key)
            if name == "dV":
                piece = mono * Z * fmpq_of(w)
            else:
                q = self._dP_row(i)[j] + self.d_lse(i)
                piece = mono * (Z * fmpq_of(q) - self._W_row(i)) * \
                    fmpq_of(w * self.scale_rational)
            out[key] = out[key] + piece if key in out else piece
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


def check_policy(policy: Policy) -> Policy:
    """``policy`` when the gradients cover it (a field named in ``UNSUPPORTED["gradients"]``,
    none today, is refused with one line).

    >>> check_policy(Policy(causal=True, sink=Fraction(0))).causal
    True
    """
    for name in policy.unsupported("gradients"):
        value = getattr(policy, name)
        if value is not None:
            raise InputError(f"policy {name} must be unset for gradients (got "
                             f"{shorten(str(value))}); the gradients do not take it")
    return policy


class ExactGradients:
    """The exact gradients of every head of a call: one :class:`Gradients` block per (batch,
    key/value head), read from the call's :class:`~exactattn.reference.reference.Reference`:
    which keys each query sees, its offsets (an additive mask, ALiBi) and dropout factors, and
    over soft-capped or rotary logits the forward's rows and rotation."""

    def __init__(self, ref, d_out: np.ndarray, d_lse: np.ndarray | None = None):
        from ..call.modifiers import row_offsets
        from .enclose import rotated_balls
        problem, policy = ref.exact_call, check_policy(ref.policy)
        sh = self.shape = problem.shape
        self.policy = policy
        L, S = sh["L"], sh["S"]
        self.heads = {g: policy.query_heads(g, sh["H_q"], sh["H_kv"]) for g in range(sh["H_kv"])}
        self.blocks = {}
        for b in range(sh["B"]):
            for g, hs in self.heads.items():
                offsets = []
                for h in hs:       # problem head h is model head policy.head + h (ALiBi)
                    hp = ref.head_policy(h)
                    offsets += [ref.offsets(b, h, i) if hp.alibi is None else
                                row_offsets(hp, i, L, S, ref.offsets(b, h, i)) for i in range(L)]
                self.blocks[(b, g)] = Gradients(
                    [r for h in hs for r in problem.query[b, h].tolist()],
                    problem.key[b, g].tolist(), problem.value[b, g].tolist(),
                    [r for h in hs for r in d_out[b, h].tolist()],
                    keep=np.concatenate([ref.visible(b, h) for h in hs]), offsets=offsets,
                    divisor_squared=policy.divisor_squared_for(sh["E"]),
                    empty_row=policy.empty_row, sink=policy.sink,
                    factors=None if policy.dropout is None else
                    [ref.factors(b, h, i) for h in hs for i in range(L)],
                    policy=ref.head_policy(0),
                    positions=[policy.query_position(i, L, S) for i in range(L)] * len(hs),
                    d_lse=None if d_lse is None else [x for h in hs for x in d_lse[b, h].tolist()],
                    rotate=rotated_balls,
                    rows=lambda b=b, hs=hs: [ref.row(b, h, i) for h in hs for i in range(L)])

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
        fmt = float_format(dtype)
        shape = self.shape_of(name)
        rounded = np.empty(shape)
        balls = np.empty(shape, dtype=object)
        mags = np.zeros(shape)
        for b, h in np.ndindex(*shape[:2]):
            block, start, _ = self.locate(name, b, h, 0, 0)
            if name == "dsink":           # one sum per query head: its rows at the sink
                mags[b, h] = block.magnitudes()["dS"][start:start + self.shape["L"], -1].sum()
                rounded[b, h], balls[b, h] = round_value(self.value(name, b, h, 0, 0), fmt,
                                                         prec)
                continue
            mags[b, h] = block.magnitudes()[name][start:start + shape[2]]
            todo = [(i, c) for i in range(shape[2]) for c in range(shape[3])]
            if fmt.name == "float32":
                todo = self._from_floats(block, name, start, shape, (b, h), rounded, balls)
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

    @staticmethod
    def _from_floats(block, name, start, shape, at, rounded, balls) -> list:
        """Round to float32 from the certified float64 enclosures
        (:mod:`exactattn.reference.floats`) where they decide it
        (:func:`~exactattn.numbers.formats.round_enclosures`, their ends pushed two float64s
        outwards); returns the entries left (ends that differ, zeros of uncertain sign, NaN
        rows)."""
        from flint import arb
        got = block.enclosures()
        cells = [(i, c) for i in range(shape[2]) for c in range(shape[3])]
        if got is None:
            return cells
        m, r = (a[start:start + shape[2]] for a in got[name])
        f, ok = round_enclosures(m, r, "float32", steps=2)
        rows = np.array([block.atom_nan((name, start + i, 0)) for i in range(shape[2])])
        ok &= ~rows[:, None]
        left = []
        for i, c in cells:
            if ok[i, c]:
                rounded[at + (i, c)] = float(f[i, c])
                balls[at + (i, c)] = arb(float(m[i, c]), float(r[i, c]))
            else:
                left.append((i, c))
        return left


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


