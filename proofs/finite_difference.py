"""A finite difference of the loss, at certified precision, agrees with the exact gradient.

Claim: for the loss L = sum dO * O of one call and an input x (an entry of
Q, K or V, an additive offset, the sink's logit), the central difference
(L(x + h) - L(x - h)) / 2h lies within h M2 of dL/dx as exactattn computes
it, where M2 bounds |L''| between x - h and x + h.

Assumptions: h = 2^-32; L is enclosed in ``arb`` from the forward pass alone
(logits, exponentials, normalisers with the sink, dropout factors, values),
never from the backward formulas; the gradient under test is by default
exactattn's exact value (``exactattn.gradients``).

Derivation: by the mean value theorem the central difference equals
L'(xi) for some xi within h of x, so it is off from L'(x) by at most
h sup |L''|.  Along x the logits of a row move as a x + b, so the row's
part of L is E_p[g] for a softmax p in x, and its second derivative is the
third joint cumulant E[(g - Eg)(a - Ea)^2], at most range(g) range(a)^2 / 4
(Popoviciu); V enters linearly (M2 = 0).  The check is certified: the ball of
difference minus gradient lies inside [-h M2 - 2^-80, h M2 + 2^-80] (it
holds) or outside it (it fails), the precision doubling until one is shown.

Reference: Higham, *Accuracy and Stability of Numerical Algorithms* (2002),
sec. 1.2 (finite differences); Popoviciu's inequality on variances (1935).
"""

from __future__ import annotations

from exactattn.properties.gradients import check_finite_difference
from exactattn.proofs._gradients import calls
from exactattn.proofs._support import Report, main

CLAIM = "a finite difference of the loss, at certified precision, agrees with the exact gradient"

#: the inputs perturbed in every call (row, column): Q, K, V entries and an offset
POINTS = [("Q", 1, 0), ("K", 0, 1), ("V", 2, 1), ("m", 2, 1)]


def run(gradient=None, *, out=None) -> bool:
    """Prove the claim for ``gradient`` (None: exactattn's exact values; or a function
    ``(gradients, wrt, prec) -> arb`` of the backward under test)."""
    report = Report(__file__, CLAIM, out)
    report.say("loss L = sum dO * O; h = 2^-32; forward enclosed in arb at 256 bits and up")
    for label, g in calls():
        points = POINTS + ([("sink",)] if g.sink is not None else [])
        for wrt in points:
            c = check_finite_difference(g, wrt, gradient=gradient)
            report.check(label, c.holds, c.lines[0])
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
