"""The exact properties of a call's gradients: the property checks of exactattn's backward.

Each ``check_*`` takes the exact gradients of one call (one block of
:meth:`Reference(call).gradients(d_out) <exactattn.verify.Reference.gradients>`,
read through its public methods) and returns a
:class:`~exactattn.properties.inputs.Check`, the one result of every property
check (``holds``, and one line per finding); every test is
exact (polynomial identities in the transcendentals of the call) or, for the
finite difference, certified by interval arithmetic:

* :func:`check_rows_sum_to_zero`: ``sum_j dS_ij = 0`` for every row (the
  sink's column included): ``sum_j P_ij (dP_ij - D_i) = D_i - D_i``;
* :func:`check_jacobian`: the softmax Jacobian ``J = diag(p) - p p^T`` of each
  row is symmetric, its rows sum to 0, and ``J dP = dS``;
* :func:`check_key_bias`: the gradient of a key bias, ``sum_j dK_j = scale
  sum_i q_i sum_j dS_ij``, is exactly 0; with a sink it is ``-scale sum_i q_i
  dS_i,sink`` instead (the sink's logit does not move with the bias);
* :func:`check_gradient_shift_invariance`: adding one constant to every logit of the
  call (the sink's too) changes no gradient;
* :func:`check_finite_difference`: ``(L(x + h) - L(x - h)) / 2h`` for the loss
  ``L = sum dO * O``, enclosed in ``arb`` from the forward pass alone, agrees
  with the gradient to within ``h M2`` (mean value theorem), where ``M2``
  bounds ``|L''|`` near x: the shares of a row are a softmax whose logits move
  along ``a x``, so ``L_i'' = E[(g - Eg)(a - Ea)^2]`` (a third joint
  cumulant) and ``|L_i''| <= range(g) range(a)^2 / 4`` (Popoviciu), with ``g``
  the row's weights' coefficients ``sum_c dO_ic M_ij V_jc``.

:func:`softmax_backward` and :func:`softmax_jacobian` are the rules the checks
state, written for any numbers (sympy expressions included), for the proofs.

>>> from exactattn import Call, Policy, Reference
>>> call = Call([[1], [2]], [[1], [0]], [[1], [3]], policy=Policy(scale="none"))
>>> g = Reference(call).gradients([[2], [1]]).blocks[(0, 0)]
>>> check_rows_sum_to_zero(g).holds, check_key_bias(g).holds
(True, True)
>>> check_finite_difference(g, ("Q", 1, 0)).lines[0]
'dL/dQ[1][0]: gradient -0.2100, finite difference within 2^-32 * 0.5000 + 2^-80 of it (certified)'
"""

from __future__ import annotations

from fractions import Fraction
from typing import Callable, Sequence

import numpy as np
from flint import arb

from ..errors import InputError
from ..numbers.digits import certify, round_fraction, tighten
from ..numbers.exact import fmpq_of
from .inputs import Check

#: what a finite difference may perturb: an entry of Q, K, V, an offset m_ij, the sink
WRT = ("Q", "K", "V", "m", "sink")


def softmax_backward(shares: Sequence, d_shares: Sequence) -> list:
    """``dS_j = P_j (dP_j - sum_k P_k dP_k)``: the gradient w.r.t. a row's logits from the
    gradient w.r.t. its shares (any numbers: Fraction, sympy).

    >>> softmax_backward([Fraction(1, 2), Fraction(1, 2)], [1, 3])
    [Fraction(-1, 2), Fraction(1, 2)]
    """
    d = sum(p * x for p, x in zip(shares, d_shares))
    return [p * (x - d) for p, x in zip(shares, d_shares)]


def softmax_jacobian(shares: Sequence) -> list[list]:
    """``J_jk = P_j (delta_jk - P_k)``, i.e. ``diag(p) - p p^T`` (any numbers)."""
    return [[p * ((1 if j == k else 0) - q) for k, q in enumerate(shares)]
            for j, p in enumerate(shares)]


def _rows(g) -> list[int]:
    return [i for i in range(g.R) if i not in g.nan_rows]


def check_rows_sum_to_zero(g) -> Check:
    """Every row of dS (the sink's column included) sums to exactly 0."""
    bad = [f"row {i}: sum_j dS = {t.text()}" for i, t in ((i, g.row_sum(i)) for i in _rows(g))
           if not t.is_zero()]
    return Check("gradient rows sum to zero", "every row of dS sums to exactly 0", not bad,
                 bad or [f"{len(_rows(g))} rows: sum_j dS_ij = 0 exactly"])


def check_jacobian(g, rows: Sequence[int] | None = None) -> Check:
    """Each row's softmax Jacobian is symmetric, its rows sum to 0, and ``J dP = dS``."""
    bad = []
    rows = _rows(g) if rows is None else rows
    for i in rows:
        J = g.jacobian(i)
        n = len(J)                      # the keys, and the sink's column (its dP is 0)
        dP = [g.value("dP", i, k).rational() for k in range(g.S)]
        for j in range(n):
            bad += [f"row {i}: J[{j}][{k}] != J[{k}][{j}]" for k in range(j + 1, n)
                    if not (J[j][k] - J[k][j]).is_zero()]
            if not sum(J[j][1:], J[j][0]).is_zero():
                bad.append(f"row {i}: row {j} of J does not sum to 0")
            applied = sum(J[j][k] * dP[k] for k in range(g.S))
            if not (applied - g.value("dS", i, j)).is_zero():
                bad.append(f"row {i}: (J dP)[{j}] != dS[{i}][{j}]")
    return Check("gradient jacobian", "diag(p) - p p^T is symmetric, its rows sum to 0, and "
                 "J dP = dS", not bad, bad or [f"rows {', '.join(map(str, rows))}: symmetric, "
                                             "rows sum to 0, J dP = dS, exactly"])


def check_key_bias(g) -> Check:
    """``sum_j dK_jc`` (the key bias's gradient) is 0 exactly; with a sink, it has the sign
    of ``-sum_i Q_ic dS_i,sink`` and is 0 exactly when that is."""
    bad = []
    for c in range(g.E):
        db = sum(g.value("dK", j, c) for j in range(g.S))
        if g.sink is None:
            if not db.is_zero():
                bad.append(f"column {c}: sum_j dK = {db.text()}, not 0")
            continue
        other = sum(-g.queries[i][c] * g.value("dS", i, g.S) for i in _rows(g))
        if db.sign() != other.sign():
            bad.append(f"column {c}: sum_j dK has sign {db.sign()}, -sum_i q_i dS_i,sink "
                       f"sign {other.sign()}")
    return Check("gradient key bias", "the gradient of a key bias is exactly 0 (without a sink)",
                 not bad, bad or [f"{g.E} columns: sum_j dK_jc = 0 exactly" if g.sink is None else
                                  f"{g.E} columns: sum_j dK_jc = -scale sum_i Q_ic dS_i,sink "
                                  "(signs agree; the sink keeps the key bias from cancelling)"])


def check_gradient_shift_invariance(g, shift: Fraction = Fraction(7, 3)) -> Check:
    """The gradients of the call with ``shift`` added to every logit (and to the sink) are
    exactly those of the call."""
    other = _moved(g, delta=lambda r, j: shift, sink=None if g.sink is None else g.sink + shift)
    bad = [f"{name}: {x.text()} != {y.text()}" for name in ("dQ", "dK", "dV", "dS")
           for a, b in zip(g.matrix(name), other.matrix(name))
           for x, y in zip(a, b) if not x == y]    # exact, across the two calls
    if g.sink is not None and not g.dsink == other.dsink:
        bad.append("dsink changed")
    return Check("gradient shift invariance",
                 "adding one constant to every logit changes no gradient", not bad, bad[:5] or [f"shift {shift}: dQ, dK, dV, dS identical, exactly"])


# --------------------------------------------------------------------------- finite differences
def _exact_loss(g):
    """Refuse a block whose statements here do not hold or cannot be rebuilt exactly: soft-cap
    and RoPE (certified enclosures, no exact rebuild) and a d_lse (the loss gains an lse term:
    rows of dS sum to d_lse, and the finite difference would miss it)."""
    why = ("soft-cap" if g.policy.softcap is not None else "RoPE") if g.certified else \
        "a d_lse" if any(g.d_lse(i) for i in range(g.R)) else None
    if why:
        raise InputError(f"the gradient checks need exact gradients of the loss sum dO*O "
                         f"(got {why}); check the call without it")


def _moved(g, delta=None, **changes):
    """The exact gradients of ``g``'s call with ``changes`` (``queries``, ``keys``, ``values``:
    the block's, ``sink``) and ``delta(r, j)`` added to the mask at the block's row r, key j:
    the same block of the moved call, read by its own
    :class:`~exactattn.reference.reference.Reference`."""
    from ..call.inputs import Call
    from ..reference.reference import Reference
    _exact_loss(g)
    ref, b, hs, d_out, d_lse = g.source
    call, L = ref.exact_call, ref.L
    q, k, v = (getattr(call, n).copy() for n in ("query", "key", "value"))
    for r, row in enumerate(changes.get("queries", ())):
        q[b, hs[r // L], r % L] = row
    for a, n in ((k, "keys"), (v, "values")):
        if n in changes:
            a[b, ref.kv(hs[0])] = np.array(changes[n], dtype=object)
    policy, mask = call.policy.replace(sink=changes.get("sink", g.sink)), call.mask
    if delta is not None:
        def entry(c, h, i, j):
            d = delta(hs.index(h) * L + i, j) if c == b and h in hs else 0
            return (ref.offsets(c, h, i) or [0] * ref.S)[j] + d if ref.visible(c, h)[i][j] \
                else float("-inf")
        mask = np.array([[[[entry(c, h, i, j) for j in range(ref.S)] for i in range(L)]
                          for h in range(ref.Hq)] for c in range(ref.B)], dtype=object)
        policy = policy.replace(mask_kind="additive")
    moved = Call(q, k, v, mask, policy=policy, dropout_keep=call.dropout_keep)
    return type(g)(Reference(moved), b, hs, d_out, d_lse)


def _second_derivative_bound(g, wrt) -> Fraction:
    """A rational upper bound on ``|L''|`` along the perturbed entry (see the module doc)."""
    kind = wrt[0]
    if kind == "V":
        return Fraction(0)
    s2 = g.scale_rational ** 2 / (1 if g.irrational_scale is None else g.irrational_scale)
    keep = g.keep
    bound = Fraction(0)
    for i in range(g.R):
        vis = [j for j in range(g.S) if keep[i][j]]
        if not vis and g.sink is None:
            continue                             # constant rows do not move
        gs = [sum((g.d_out[i][c] * g.factor(i, j) * g.values[j][c] for c in range(g.Ev)),
                  Fraction(0)) for j in vis] + ([Fraction(0)] if g.sink is not None else [])
        spread = max(gs) - min(gs)
        if kind == "Q":
            if i != wrt[1]:
                continue
            a = [g.keys[j][wrt[2]] for j in vis] + ([Fraction(0)] if g.sink is not None else [])
            bound += spread * (max(a) - min(a)) ** 2 * s2 / 4
        elif kind == "K":
            if keep[i][wrt[1]]:
                bound += spread * g.queries[i][wrt[2]] ** 2 * s2 / 4
        elif kind == "sink" or (kind == "m" and i == wrt[1]):
            bound += spread / 4
    return bound


def check_finite_difference(g, wrt: tuple, h: Fraction = Fraction(1, 2 ** 32), *,
                            gradient: Callable | None = None, prec: int = 256,
                            places: int = 4) -> Check:
    """The certified central difference of the loss ``sum dO * O`` agrees with the gradient.

    ``wrt``: ``("Q", i, c)``, ``("K", j, c)``, ``("V", j, c)``, ``("m", i, j)`` (an
    additive offset of a pair query i sees) or ``("sink",)``.  ``gradient(g, wrt, prec)``
    (optional) returns the ``arb`` to test instead of the exact value (a backward under
    test).  Holds when ``|FD - gradient| <= h M2`` is certified; fails when ``> h M2`` is.

    Raises:
        InputError: an unknown ``wrt``, an offset of a hidden pair, a NaN row; a soft-cap,
            RoPE or d_lse block (its loss is not rebuilt exactly).
    """
    if not wrt or wrt[0] not in WRT:
        raise InputError(f"wrt must start with one of {', '.join(WRT)} (got {wrt!r})")
    if g.nan_rows:
        raise InputError("the call must have no NaN rows for a finite difference (got "
                         f"{len(g.nan_rows)}); use empty_row='zero' or 'uniform'")
    if wrt[0] == "m" and not g.keep[wrt[1]][wrt[2]]:
        raise InputError(f"wrt must be an offset of a pair the query sees (got {wrt!r})")
    h = Fraction(h)
    M2 = _second_derivative_bound(g, wrt)
    bound = h * M2 + Fraction(1, 2 ** 80)
    exact = g.dsink if wrt[0] == "sink" else \
        g.value({"Q": "dQ", "K": "dK", "V": "dV", "m": "dS"}[wrt[0]], *wrt[1:])

    def moved(sign):        # the loss sum_i D_i = sum_ic dO_ic O_ic at the moved input
        kind, name = wrt[0], {"Q": "queries", "K": "keys", "V": "values", "m": "offsets"}.get(wrt[0])
        if kind == "sink":
            return _moved(g, sink=g.sink + sign * h)
        if kind == "m":
            return _moved(g, delta=lambda r, j: sign * h if (r, j) == wrt[1:] else 0)
        M = [list(r) for r in getattr(g, name)]
        M[wrt[1]][wrt[2]] += sign * h
        return _moved(g, **{name: M})
    ends = moved(1), moved(-1)

    def fd_at(p):
        a, b = (sum(e.balls(p)["D"], arb(0)) for e in ends)
        return (a - b) / arb(fmpq_of(2 * h))

    grad_at = exact.ball if gradient is None else (lambda p: gradient(g, wrt, p))

    def step(p):
        d, b = abs(fd_at(p) - grad_at(p)), arb(fmpq_of(bound))
        return True if d <= b else False if d > b else None
    ok = bool(tighten(step, prec, max_prec=16 * prec))
    where = "dL/d" + ("sink" if wrt[0] == "sink" else wrt[0] + "".join(f"[{x}]" for x in wrt[1:]))
    shown = exact.decimal(places) if gradient is None else certify(grad_at, places)
    power = h.denominator.bit_length() - 1
    h_text = f"2^-{power}" if h.numerator == 1 and h.denominator == 1 << power else str(h)
    m2 = round_fraction(M2, places) if M2 else "0"
    line = (f"{where}: gradient {shown}, finite difference within {h_text} * {m2} + 2^-80 of "
            "it (certified)" if ok else
            f"{where}: gradient {shown}, finite difference {certify(fd_at, places)}: further "
            f"apart than {h_text} * {m2} + 2^-80 (certified)")
    return Check("gradient finite difference", "a finite difference at certified precision agrees "
                 "with the gradient", ok, [line])


def check_gradients(g, *, finite_differences: Sequence[tuple] = ()) -> list[Check]:
    """Every check on ``g`` (the Jacobian on at most 4 rows; the finite differences named).

    Raises:
        InputError: a soft-cap, RoPE or d_lse block (the statements are of the plain loss
            ``sum dO * O`` over exact logits).
    """
    _exact_loss(g)
    out = [check_rows_sum_to_zero(g), check_jacobian(g, _rows(g)[:4]), check_key_bias(g),
           check_gradient_shift_invariance(g)]
    return out + [check_finite_difference(g, w) for w in finite_differences]
