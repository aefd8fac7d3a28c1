"""The gradient with respect to a key bias is exactly 0: the softmax cancels the bias.

Claim: a key bias b adds q . b to every score of a query's row, so the
loss does not depend on b, and the backward pass gives
dL/db = sum_j dK_j = scale sum_i q_i sum_j dS_ij = 0, because every row of
dS sums to 0.

Assumptions: real queries, keys, bias and dP (free symbols here); no sink:
a sink's logit does not move with the bias, so with a sink the gradient is
-scale sum_i q_i dS_i,sink instead (checked too, and not 0).

Derivation: for n = 1..4 keys of width 2, with scores s_j = q . (k_j + b),
the shares come from exactattn's symbolic engine, dS from the backward rule
under test (by default ``exactattn.properties.gradients.softmax_backward``) and
dL/db = sum_j dS_j q (each score moves by q along b); each component is
cancelled to 0, and sympy's ``diff`` of sum_j dP_j P_j by b agrees.  Then
exactattn's exact gradients of the concrete calls: sum_j dK_j = 0 exactly
without a sink, and with one it has the sign of -sum_i q_i dS_i,sink.

Reference: Vaswani et al. 2017, sec. 3.2.1; the ``projection_biases`` proof
(the key bias cancels in the shares).
"""

from __future__ import annotations

import sympy

from exactattn.properties.gradients import check_key_bias, softmax_backward
from exactattn.proofs._gradients import calls
from exactattn.proofs._support import Report, decide_zero, exact_softmax, main

CLAIM = "the gradient with respect to a key bias is exactly 0 (the softmax cancels the bias)"


def run(backward=softmax_backward, *, out=None) -> bool:
    """Prove the claim for ``backward`` (a function: shares, dP -> dS of one row)."""
    report = Report(__file__, CLAIM, out)
    q = sympy.symbols("q1:3", real=True)
    b = sympy.symbols("b1:3", real=True)
    report.say("query q = (q1, q2), key bias b = (b1, b2), keys k_j, dP: d_1..d_n")
    for n in range(1, 5):
        k = [sympy.symbols(f"k{j + 1}_1:3", real=True) for j in range(n)]
        d = list(sympy.symbols(f"d1:{n + 1}", real=True))
        scores = [sum(qc * (kc + bc) for qc, kc, bc in zip(q, kj, b)) for kj in k]
        P = exact_softmax([scores])[0]
        dS = backward(P, d)
        grad = [sympy.Add(*[x * q[c] for x in dS]) for c in range(2)]
        verdicts = [decide_zero(x) for x in grad]
        bad = [why for ok, why in verdicts if not ok]
        report.check(f"n = {n}: sum_j dS_j q", not bad, bad[0] if bad else "residual 0")
        if n <= 2:
            loss = sympy.Add(*[a * p for a, p in zip(d, P)])
            ok, why = decide_zero(sympy.diff(loss, b[0]))
            report.check(f"n = {n}: d/db1 of sum_j d_j P_j", ok, why)
    report.say("exactattn's exact gradients (exactattn.gradients) of concrete calls:")
    for label, g in calls():
        c = check_key_bias(g)
        report.check(label, c.holds, c.lines[0])
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
