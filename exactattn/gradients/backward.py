"""The exact backward pass of one attention call: dQ, dK, dV (and dS, dP, D) given dO.

For one call ``O = P V`` with ``P = softmax(x)`` row by row over the visible
keys, ``x = scale * Q K^T + m`` (m an additive mask or bias, 0 without one)
and an upstream gradient ``dO`` (Vaswani et al. 2017, sec. 3.2.1; the
backward pass as in Dao et al. 2022, FlashAttention, Algorithm 4)::

    dV  = P^T dO                     dP  = dO V^T
    D_i = sum_c dO_ic O_ic = sum_j P_ij dP_ij
    dS  = P * (dP - D)               (the gradient w.r.t. the logits x)
    dQ  = scale dS K                 dK  = scale dS^T Q

The gradient with respect to an additive mask or bias entry ``m_ij`` is
``dS_ij`` (0 at hidden pairs); every row of dS sums to 0 exactly.  A row that
sees no key gives dQ = 0 and nothing to dK and dV under ``zero``; under
``uniform`` its shares are the constant 1/S, so it adds ``dO_i / S`` to every
``dV_j`` but nothing to dQ or dK; under ``nan`` it is NaN, and so is every
entry of dK and dV.

Every entry is a :class:`~exactattn.gradients.values.GradValue`: exact
zero, equality, sign and rationality tests as polynomial identities in the
one transcendental ``t`` of :mod:`~exactattn.gradients.terms`, and certified
decimals.  :meth:`Gradients.decimals` certifies a whole matrix at once from
``arb_mat`` products, falling back to the exact per-entry path only for the
entries those enclosures leave undecided.

>>> g = gradients([[0], [1]], [[0], [1]], [[1], [3]], [[1], [1]], Policy(scale="none"))
>>> g.decimals("dV", 4), g.dQ[0][0].rational()
([['0.7689'], ['1.2311']], Fraction(1, 2))
>>> g.dS[1][0].text()
'(-2*t)/(t + 1)^2 where t = exp(1)'
"""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from ..bulk import int_array
from ..call import Policy
from ..digits import certify, working_precision
from ..errors import InputError, ShapeError, shorten
from ..exact import rational_sqrt, to_matrix
from ..exponents import fmpq_of, inv_sqrt_ball
from .terms import Terms
from .values import ONE, GradValue

__all__ = ["BULK_PREC", "GRADIENTS", "Gradients", "UNSUPPORTED", "certified", "check_policy",
           "gradients"]

#: the precision (bits) whole matrices are first enclosed at
BULK_PREC = 64
#: the matrices a call's gradients hold: name -> (rows, columns) in words
GRADIENTS = {"dQ": "queries x E", "dK": "keys x E", "dV": "keys x E_v",
             "dS": "queries x keys", "dP": "queries x keys", "D": "queries",
             "P": "queries x keys", "O": "queries x E_v"}
_SCALED = ("dQ", "dK")
#: policy fields whose gradients are not built yet (must be unset)
UNSUPPORTED = ("softcap", "sink", "alibi", "rope", "dropout")


def check_policy(policy: Policy) -> Policy:
    """``policy`` when exact gradients cover it: scale, causal rule and windows, empty rows,
    masks (additive ones included) and GQA; sinks, ALiBi, soft-capping, RoPE and dropout
    are refused with one line.

    >>> check_policy(Policy(causal=True)).causal
    True
    """
    for name in UNSUPPORTED:
        value = getattr(policy, name, None)
        if value is not None:
            raise InputError(f"policy {name} must be unset for exact gradients (got "
                             f"{shorten(str(value))}); the gradients of sinks, ALiBi, "
                             "soft-capping, RoPE and dropout are not built yet")
    return policy


class _Undecided(Exception):
    """The bulk enclosure did not decide an entry (it goes to the exact path)."""


def certified(balls, places: int, value, *, prec: int = BULK_PREC, nan=None) -> list[list[str]]:
    """Decimals of a matrix from enclosures ``balls[i][j]`` computed at ``prec`` bits.

    Each entry goes through :func:`exactattn.digits.certify` with its bulk
    ball; an entry the ball leaves undecided goes to ``value(i, j).decimal``
    (the exact path).  ``nan(i, j)`` (optional) marks NaN entries.
    """
    out = []
    for i, brow in enumerate(balls):
        row = []
        for j, b in enumerate(brow):
            if nan is not None and nan(i, j):
                row.append("nan")
                continue

            def ball(p, b=b):
                if p > prec:
                    raise _Undecided
                return b
            try:
                row.append(certify(ball, places))
            except _Undecided:
                row.append(value(i, j).decimal(places))
        out.append(row)
    return out


def _fmpq_mat(rows: Sequence[Sequence[Fraction]]):
    from flint import fmpq, fmpq_mat
    return fmpq_mat(len(rows), len(rows[0]),
                    [fmpq(e.numerator, e.denominator) for r in rows for e in r])


class Gradients:
    """The exact gradients of one attention call (one block of query rows against one key set).

    Shapes: ``queries`` R x E, ``keys`` S x E, ``values`` S x E_v, ``d_out``
    R x E_v (lists of ``Fraction``); ``keep`` R x S booleans; ``offsets`` None
    or per row None or S rationals added to the scaled scores.  A GQA group is
    one block: the rows of every query head that reads the same keys.

    Attributes (lists of :class:`GradValue`, built on access): ``dQ`` R x E,
    ``dK`` S x E, ``dV`` S x E_v, ``dS`` R x S (also the gradient w.r.t. an
    additive mask or bias), ``dP`` R x S (rational), ``D`` R, ``P`` R x S,
    ``O`` R x E_v.
    """

    def __init__(self, queries, keys, values, d_out, *, keep, offsets=None,
                 divisor_squared: Fraction | None = None, empty_row: str = "zero"):
        self.R, self.E = len(queries), len(queries[0])
        self.S, self.Ev = len(keys), len(values[0])
        if tuple(keep.shape) != (self.R, self.S):
            raise ShapeError(f"keep must be {self.R} x {self.S} like queries x keys "
                             f"(got {' x '.join(map(str, keep.shape))})")
        self._Q, self._K, self._V, self._dO = queries, keys, values, d_out
        self._mats = [_fmpq_mat(m) for m in (queries, keys, values, d_out)]
        Qm, Km, Vm, dOm = self._mats
        scores = Qm * Km.transpose()
        num, den = scores.numer_denom()
        ints = int_array(num.entries(), (self.R, self.S))
        self.divisor_squared = divisor_squared
        root = None if divisor_squared is None else rational_sqrt(divisor_squared)
        #: D when the scale 1/sqrt(D) is irrational (carried by dQ and dK), else None
        self.irrational_scale = divisor_squared if divisor_squared is not None and root is None \
            else None
        self._scale_q = Fraction(1) if root is None else 1 / root
        self.terms = Terms(ints, int(den), keep, offsets, divisor_squared, empty_row)
        self._dPm = dOm * Vm.transpose()
        self._dP = None
        self._nan_rows = {i for i, k in enumerate(self.terms.kinds) if k == "nan"}
        self._balls: dict = {}
        self._parts: dict = {}
        self._W: dict = {}
        self._magnitudes = None

    # -- values -----------------------------------------------------------------------
    def value(self, name: str, *index: int) -> GradValue:
        """One entry, e.g. ``value("dQ", i, c)``, ``value("D", i)``."""
        if name not in GRADIENTS:
            raise InputError(f"name must be one of {', '.join(GRADIENTS)} "
                             f"(got {shorten(name, quote=True)})")
        scaled = name in _SCALED and self.irrational_scale is not None
        return GradValue(self, {(name, *index): 1}, scaled)

    def matrix(self, name: str) -> list:
        """Every entry of one gradient (a list for ``D``, else a list of rows)."""
        rows, cols = self.shape(name)
        if cols is None:
            return [self.value(name, i) for i in range(rows)]
        return [[self.value(name, i, c) for c in range(cols)] for i in range(rows)]

    def shape(self, name: str) -> tuple[int, int | None]:
        """(rows, columns) of a gradient (columns None for the vector ``D``)."""
        return {"dQ": (self.R, self.E), "dK": (self.S, self.E), "dV": (self.S, self.Ev),
                "dS": (self.R, self.S), "dP": (self.R, self.S), "D": (self.R, None),
                "P": (self.R, self.S), "O": (self.R, self.Ev)}[name]

    dQ = property(lambda self: self.matrix("dQ"), doc="R x E exact dQ = scale dS K")
    dK = property(lambda self: self.matrix("dK"), doc="S x E exact dK = scale dS^T Q")
    dV = property(lambda self: self.matrix("dV"), doc="S x E_v exact dV = P^T dO")
    dS = property(lambda self: self.matrix("dS"), doc="R x S exact dS = P * (dP - D)")
    dP = property(lambda self: self.matrix("dP"), doc="R x S exact dP = dO V^T (rational)")
    D = property(lambda self: self.matrix("D"), doc="R exact D_i = sum_c dO_ic O_ic")
    P = property(lambda self: self.matrix("P"), doc="R x S exact shares")
    O = property(lambda self: self.matrix("O"), doc="R x E_v exact outputs")

    def decimals(self, name: str, places: int) -> list:
        """Every entry of one gradient, correctly rounded to ``places`` decimals, in bulk."""
        balls = self.balls(BULK_PREC)[name]
        if name == "D":
            return [r[0] for r in certified([[b] for b in balls], places,
                                            lambda i, j: self.value(name, i),
                                            nan=lambda i, j: self.atom_nan((name, i)))]
        rows, cols = self.shape(name)
        grid = [[balls[i, c] for c in range(cols)] for i in range(rows)]
        return certified(grid, places, lambda i, j: self.value(name, i, j),
                         nan=lambda i, j: self.atom_nan((name, i, j)))

    # -- what the values ask for ----------------------------------------------------------
    def atom_nan(self, atom: tuple) -> bool:
        """True when an atom (``("dQ", i, c)``, ...) is NaN: an empty row under ``nan`` feeds it."""
        name = atom[0]
        if name in ("dK", "dV"):
            return bool(self._nan_rows)
        if name in ("P", "O", "D", "dS", "dQ"):
            return atom[1] in self._nan_rows
        return False

    def atom_ball(self, atom: tuple, prec: int):
        """An ``arb`` enclosure of one atom from the whole matrices at ``prec`` bits."""
        from flint import arb
        if atom == ONE:
            return arb(1)
        got = self.balls(prec)[atom[0]]
        return got[atom[1]] if atom[0] == "D" else got[atom[1], atom[2]]

    def balls(self, prec: int) -> dict:
        """``arb`` enclosures of every matrix at ``prec`` bits: ``arb_mat`` (a list for ``D``)."""
        hit = self._balls.get(prec)
        if hit is not None:
            return hit
        from flint import arb, arb_mat
        R, S = self.R, self.S
        terms = self.terms
        shares = terms.shares(prec)
        with working_precision(prec):
            dPm = arb_mat(self._dPm)
            P = [[arb(0)] * S for _ in range(R)]
            dS = [[arb(0)] * S for _ in range(R)]
            D = [arb(0)] * R
            for i in range(R):
                row = shares[i]
                if row is None:
                    continue
                vis = terms.visible(i)
                Pi = P[i]
                for j, p in zip(vis, row):
                    Pi[j] = p
                d = sum((p * dPm[i, j] for j, p in zip(vis, row)), arb(0))
                D[i] = d
                if terms.kinds[i] == "ok":
                    dSi = dS[i]
                    for j, p in zip(vis, row):
                        dSi[j] = p * (dPm[i, j] - d)
            Qm, Km, Vm, dOm = (arb_mat(m) for m in self._mats)
            Pm = arb_mat(R, S, [e for r in P for e in r])
            dSm = arb_mat(R, S, [e for r in dS for e in r])
            s = arb(fmpq_of(self._scale_q))
            if self.irrational_scale is not None:
                s *= inv_sqrt_ball(self.irrational_scale)
            out = {"P": Pm, "dP": dPm, "D": D, "dS": dSm, "O": Pm * Vm,
                   "dQ": (dSm * Km) * s, "dK": (dSm.transpose() * Qm) * s,
                   "dV": Pm.transpose() * dOm}
        if len(self._balls) >= 4:
            self._balls.pop(min(self._balls))
        self._balls[prec] = out
        return out

    def magnitudes(self) -> dict:
        """Float sizes of the terms each entry adds up (for errors in ULPs at the terms).

        ``dV_jc``: sum_i P_ij |dO_ic|; ``dS_ij``: P_ij (|dP|_ij + sum_k P_ik |dP|_ik) with
        ``|dP| = |dO| |V|^T``; ``dQ``: |scale| |dS| |K|; ``dK``: |scale| |dS|^T |Q|.
        Numpy float64 arrays (a few digits; NaN rows count 0).
        """
        if self._magnitudes is not None:
            return self._magnitudes
        import numpy as np
        m = self.balls(BULK_PREC)
        P = np.array([[float(m["P"][i, j].mid()) for j in range(self.S)] for i in range(self.R)])
        for i in self._nan_rows:
            P[i] = 0
        f = [np.array([[float(e) for e in r] for r in mat], dtype=np.float64)
             for mat in (self._Q, self._K, self._V, self._dO)]
        Q, K, V, dO = (np.abs(a) for a in f)
        A = dO @ V.T
        dS = P * (A + (P * A).sum(axis=1, keepdims=True))
        for i, k in enumerate(self.terms.kinds):
            if k != "ok":
                dS[i] = 0
        s = float(self._scale_q) / (1.0 if self.irrational_scale is None
                                    else float(self.irrational_scale) ** 0.5)
        self._magnitudes = {"dQ": s * dS @ K, "dK": s * dS.T @ Q, "dV": P.T @ dO}
        return self._magnitudes

    # -- exact numerators -------------------------------------------------------------------
    def _dP_row(self, i: int) -> list[Fraction]:
        if self._dP is None:
            self._dP = {}
        hit = self._dP.get(i)
        if hit is None:
            m = self._dPm
            hit = self._dP[i] = [Fraction(int(m[i, j].p), int(m[i, j].q)) for j in range(self.S)]
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
        """``{class: N}``: the atom as ``sum N / Z^2`` (the rational scale folded in)."""
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
            return {key: self._row_poly(i, [r[atom[2]] for r in self._V]) * Z}
        if name == "D":
            return {key: self._W_row(i) * Z}
        if name == "dS":
            mono = self._mono(i, atom[2])
            if mono is None:
                return {}
            q = self._dP_row(i)[atom[2]]
            return {key: mono * (Z * _fq(q) - self._W_row(i))}
        # dQ_ic = scale sum_j K_jc dS_ij
        c = atom[2]
        dP = self._dP_row(i)
        Kc = [r[c] for r in self._K]
        A = self._row_poly(i, [k * d for k, d in zip(Kc, dP)])
        B = self._row_poly(i, Kc)
        return {key: (A * Z - B * self._W_row(i)) * _fq(self._scale_q)}

    def _column_parts(self, name: str, j: int, c: int) -> dict:
        """dK_jc = scale sum_i Q_ic dS_ij and dV_jc = sum_i dO_ic P_ij, row class by row class."""
        terms = self.terms
        out: dict = {}
        for i in range(self.R):
            kind = terms.kinds[i]
            if kind in ("zero", "nan") or (kind == "uniform" and name == "dK"):
                continue
            w = self._Q[i][c] if name == "dK" else self._dO[i][c]
            if not w:
                continue
            mono = self._mono(i, j)
            if mono is None:
                continue
            key = terms.class_of(i)
            Z = terms.normaliser(key)
            if name == "dV":
                piece = mono * Z * _fq(w)
            else:
                piece = mono * (Z * _fq(self._dP_row(i)[j]) - self._W_row(i)) * \
                    _fq(w * self._scale_q)
            out[key] = out[key] + piece if key in out else piece
        return out


def _fq(q: Fraction):
    from flint import fmpq
    return fmpq(q.numerator, q.denominator)


def gradients(queries, keys, values, d_out, policy: Policy | None = None, mask=None, *,
              floats: str | None = None) -> Gradients:
    """The exact gradients of one head's call ``softmax(scale Q K^T + mask) V`` given ``dO``.

    Shapes: queries L x E, keys S x E, values S x E_v, d_out L x E_v (any
    exact numbers :func:`~exactattn.exact.to_matrix` reads); ``mask`` an
    L x S :class:`~exactattn.call.Mask` (an additive one adds its offsets).
    ``policy`` gives the scale, the causal rule and the empty-row answer.

    Raises:
        ShapeError: shapes that do not match.
        InputError, FloatInputError: entries that are not exact numbers; a policy
            with sinks, ALiBi, soft-capping, RoPE or dropout (:func:`check_policy`).

    >>> g = gradients([[1, 0]], [[1, 0], [0, 1]], [[1], [0]], [[1]], Policy(scale="1"))
    >>> g.dV[0][0].text()
    't/(t + 1) where t = exp(1)'
    """
    from ..masks import Mask
    if policy is not None and not isinstance(policy, Policy):
        raise InputError(f"policy must be a Policy or None (got {shorten(repr(policy))}); "
                         "e.g. Policy(scale='none', causal=True)")
    if mask is not None and not isinstance(mask, Mask):
        raise InputError(f"mask must be a Mask or None (got {shorten(repr(mask))}); "
                         "e.g. Mask('bool_keep', rows)")
    Q = to_matrix(queries, name="queries", floats=floats)
    E = len(Q[0])
    K = to_matrix(keys, name="keys", shape=(None, E), floats=floats)
    V = to_matrix(values, name="values", shape=(len(K), None), floats=floats)
    dO = to_matrix(d_out, name="d_out", shape=(len(Q), len(V[0])), floats=floats)
    policy = check_policy(policy or Policy())
    L, S = len(Q), len(K)
    if mask is not None and (mask.n_queries, mask.n_keys) != (L, S):
        raise ShapeError(f"mask must be {L} x {S} like queries x keys "
                         f"(got {mask.n_queries} x {mask.n_keys})")
    offsets = None
    if mask is not None and mask.kind == "additive":
        offsets = [mask.offsets(i) for i in range(L)]
    return Gradients(Q, K, V, dO, keep=policy.keep(L, S, mask), offsets=offsets,
                     divisor_squared=policy.divisor_squared(E), empty_row=policy.empty_row)
