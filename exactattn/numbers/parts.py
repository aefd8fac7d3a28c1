"""The exact numerators of a call's gradients: each entry as ``sum_k N_k(t) / Z_k(t)^2``.

For row i with normaliser ``Z_i = sum_j t^(a_ij)`` (:mod:`~exactattn.numbers.terms`)
and ``W_i = sum_j dP_ij t^(a_ij)`` (so ``D_i = W_i / Z_i``)::

    P_ij  = t^(a_ij) Z_i / Z_i^2           O_ic  = (sum_j M_ij V_jc t^(a_ij)) Z_i / Z_i^2
    D_i   = W_i Z_i / Z_i^2                dS_ij = t^(a_ij) (dP_ij Z_i - W_i) / Z_i^2
    dQ_ic = scale (A_ic Z_i - B_ic W_i) / Z_i^2   with A_ic = sum_j K_jc dP_ij t^(a_ij),
                                                  B_ic = sum_j K_jc t^(a_ij)
    J_ijk = t^(a_ij) (delta_jk Z_i - t^(a_ik)) / Z_i^2   (the softmax Jacobian)

(with an upstream ``dlse_i``, ``dP_ij + dlse_i`` in dS's and A's place of ``dP_ij``, W kept)
and the columns ``dK_jc = scale sum_i Q_ic dS_ij``, ``dV_jc = sum_i dO_ic M_ij P_ij``
summed class by class (rows with one normaliser add their numerators).  A
rational scale is folded into the numerators; an irrational one is carried by
:class:`~exactattn.numbers.ratio.ExpRatio` (``scaled``).

Reference: Dao et al. 2022 (FlashAttention), Algorithm 4, for the backward pass.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from .exact import fmpq_of, fraction_of
from .ratio import ONE


class Numerators:
    """The numerator polynomials of every atom of one :class:`~exactattn.reference.backward.Gradients`
    (built on demand, cached)."""

    def __init__(self, g):
        self.g = g
        self._parts: dict = {}
        self._dP: dict = {}
        self._W: dict = {}

    def _dP_row(self, i: int) -> list[Fraction]:
        hit = self._dP.get(i)
        if hit is None:
            m = self.g.dP_matrix
            hit = self._dP[i] = [fraction_of(m[i, j])
                                 for j in range(self.g.cols)]
        return hit

    def _row_poly(self, i: int, weights: Sequence[Fraction]):
        """``sum_j weights[j] t^(a_ij)`` over row i's visible keys."""
        terms = self.g.terms
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
        terms = self.g.terms
        k = terms.position(i, j)
        return None if k is None else terms.poly({terms.exponents(i)[k]: Fraction(1)})

    def parts(self, atom: tuple) -> dict:
        """``{class: N}``: the atom as ``sum N / Z^2`` (the rational scale folded in)."""
        hit = self._parts.get(atom)
        if hit is None:
            hit = self._parts[atom] = self._build_parts(atom)
        return hit

    def _build_parts(self, atom: tuple) -> dict:
        terms = self.g.terms
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
            return {key: self._row_poly(i, [r[c] * self.g.factor(i, j)
                                            for j, r in enumerate(self.g.block_values)]) * Z}
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
            q = self._dP_row(i)[atom[2]] + self.g.d_lse(i)
            return {key: mono * (Z * fmpq_of(q) - self._W_row(i))}
        # dQ_ic = scale sum_j K_jc dS_ij
        c = atom[2]
        dP = self._dP_row(i)
        Kc = [r[c] for r in self.g.block_keys]
        lse = self.g.d_lse(i)
        A = self._row_poly(i, [k * (d + lse) for k, d in zip(Kc, dP)])
        B = self._row_poly(i, Kc)
        return {key: (A * Z - B * self._W_row(i)) * fmpq_of(self.g.scale_rational)}

    def _column_parts(self, name: str, j: int, c: int) -> dict:
        """dK_jc = scale sum_i Q_ic dS_ij and dV_jc = sum_i dO_ic W_ij, row class by row class."""
        terms = self.g.terms
        out: dict = {}
        for i in range(self.g.R):
            kind = terms.kinds[i]
            if kind in ("zero", "nan") or (kind == "uniform" and name == "dK"):
                continue
            w = self.g.queries[i][c] if name == "dK" else self.g.d_out[i][c] * self.g.factor(i, j)
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
                q = self._dP_row(i)[j] + self.g.d_lse(i)
                piece = mono * (Z * fmpq_of(q) - self._W_row(i)) * \
                    fmpq_of(w * self.g.scale_rational)
            out[key] = out[key] + piece if key in out else piece
        return out
