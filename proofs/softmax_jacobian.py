"""The softmax Jacobian diag(p) - p p^T is symmetric, and each of its rows sums to 0.

Claim: for real scores s_1..s_n and p = softmax(s), the Jacobian
J_jk = dp_j/ds_k equals p_j (delta_jk - p_k), i.e. diag(p) - p p^T; it is
symmetric, every row sums to 0 (the shares sum to 1 whatever s is), and the
backward pass of the softmax is J applied to the gradient w.r.t. the shares:
(J dP)_j = p_j (dP_j - sum_k p_k dP_k) = dS_j.

Assumptions: real scores (free symbols here); a row of visible keys.

Derivation: for n = 1..4 the shares come from exactattn's symbolic engine;
the Jacobian under test (by default
``exactattn.properties.gradients.softmax_jacobian``) is compared entry by entry
with sympy's ``diff`` of the shares, then J - J^T and each row sum are put
over one denominator and cancelled.  Then exactattn's exact gradients of
three concrete calls (the sink's column included) have, on every row, a
symmetric Jacobian whose rows sum to 0 and J dP = dS, exactly.

Reference: Vaswani et al. 2017, sec. 3.2.1 (softmax); Dao et al. 2022,
FlashAttention, sec. 3.1 and Algorithm 4 (dS = P * (dP - D)).
"""

from __future__ import annotations

import sympy

from exactattn.properties.gradients import check_jacobian, softmax_jacobian
from exactattn.proofs._gradients import calls
from exactattn.proofs._support import Report, decide_zero, exact_softmax, main

CLAIM = "the softmax Jacobian diag(p) - p p^T is symmetric and each of its rows sums to 0"


def run(jacobian=softmax_jacobian, *, out=None) -> bool:
    """Prove the claim for ``jacobian`` (a function: shares -> n x n matrix)."""
    report = Report(__file__, CLAIM, out)
    report.say("shares: exactattn's symbolic softmax of real symbols s_1..s_n")
    for n in range(1, 5):
        s = list(sympy.symbols(f"s1:{n + 1}", real=True))
        p = exact_softmax([s])[0]
        J = jacobian(p)
        checks = {
            "J = d p / d s": [J[j][k] - sympy.diff(p[j], s[k]) for j in range(n) for k in range(n)],
            "J = J^T": [J[j][k] - J[k][j] for j in range(n) for k in range(j + 1, n)],
            "rows sum to 0": [sympy.Add(*row) for row in J],
        }
        for label, residuals in checks.items():
            verdicts = [decide_zero(r) for r in residuals]
            bad = [why for ok, why in verdicts if not ok]
            report.check(f"n = {n}: {label}", not bad, bad[0] if bad else "residual 0")
    report.say("exactattn's exact gradients (exactattn.gradients) of concrete calls:")
    for label, g in calls():
        c = check_jacobian(g)
        report.check(label, c.holds, c.lines[0])
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
