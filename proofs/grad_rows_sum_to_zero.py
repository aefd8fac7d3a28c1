"""Every row of the gradient w.r.t. the logits, dS = P * (dP - D), sums to exactly 0.

Claim: for real scores s_1..s_n, shares P = softmax(s) and any upstream
gradient dP w.r.t. the shares, the gradient w.r.t. the scores
dS_j = P_j (dP_j - sum_k P_k dP_k) sums to 0 over the row: sum_j dS_j =
D - D sum_j P_j = 0 with D = sum_k P_k dP_k, because the shares sum to 1.

Assumptions: real scores and real dP (free symbols here, not samples); a
row of visible keys (masked keys have P = 0 and drop out); a sink is one
more column with dP = 0.

Derivation: for n = 1..5 the row's shares come from exactattn's symbolic
engine and dS from the backward rule under test (by default
``exactattn.properties.gradients.softmax_backward``); the row sum is put over one
denominator and cancelled.  For n = 1..3 the rule is also checked to be the
gradient itself: dS_k = d/ds_k sum_j dP_j P_j (sympy's ``diff``).  Then
exactattn's exact gradients of three concrete calls (an irrational scale,
a causal mask, a sink, ALiBi with slope 2^(-1/2), dropout, an additive mask)
have every row of dS summing to exactly 0 (a polynomial identity in the
call's exponentials).

Reference: Dao et al. 2022, FlashAttention, Algorithm 4 (D_i = rowsum(dO * O));
Vaswani et al. 2017, sec. 3.2.1.
"""

from __future__ import annotations

import sympy

from exactattn.properties.gradients import check_rows_sum_to_zero, softmax_backward
from exactattn.proofs._gradients import calls
from exactattn.proofs._support import Report, decide_zero, exact_softmax, main

CLAIM = "every row of dS = P * (dP - D) sums to exactly 0, for any scores and any dP"


def run(backward=softmax_backward, *, out=None) -> bool:
    """Prove the claim for ``backward`` (a function: shares, dP -> dS of one row)."""
    report = Report(__file__, CLAIM, out)
    report.say("shares: exactattn's symbolic softmax of real symbols s_1..s_n; dP: d_1..d_n")
    for n in range(1, 6):
        s = list(sympy.symbols(f"s1:{n + 1}", real=True))
        d = list(sympy.symbols(f"d1:{n + 1}", real=True))
        dS = backward(exact_softmax([s])[0], d)
        ok, why = decide_zero(sympy.Add(*dS))
        report.check(f"n = {n}", ok, f"sum_j dS_j: {why}")
    for n in range(1, 4):
        s = list(sympy.symbols(f"s1:{n + 1}", real=True))
        d = list(sympy.symbols(f"d1:{n + 1}", real=True))
        P = exact_softmax([s])[0]
        dS = backward(P, d)
        loss = sympy.Add(*[a * b for a, b in zip(d, P)])
        verdicts = [decide_zero(dS[k] - sympy.diff(loss, s[k])) for k in range(n)]
        bad = [why for ok, why in verdicts if not ok]
        report.check(f"n = {n}: dS is the gradient", not bad,
                     "dS_k - d/ds_k sum_j d_j P_j: " + (bad[0] if bad else "residual 0"))
    report.say("exactattn's exact gradients (exactattn.gradients) of concrete calls:")
    for label, g in calls():
        c = check_rows_sum_to_zero(g)
        report.check(label, c.holds, c.lines[0])
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
