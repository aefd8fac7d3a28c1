"""Adding the same constant to every logit of a row changes no gradient.

Claim: dS = P * (dP - D) depends on the scores only through the shares P,
and softmax(s + c) = softmax(s); so dS(s + c) = dS(s) for every real c, and
dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO do not change either.  With
a sink, the sink's logit must move by c too.

Assumptions: real scores, shift and dP (free symbols here).

Derivation: for n = 1..5 the backward under test (by default the shares
of exactattn's symbolic engine fed to
``exactattn.properties.gradients.softmax_backward``) is applied to a symbolic row
and to the same row plus c, and each difference is cancelled to 0.  Then
exactattn's exact gradients of the concrete calls, shifted by 7/3 (an
additive offset on every pair, the sink's logit too), equal the unshifted
ones exactly, entry by entry (as rational functions of the call's
exponentials).

Reference: Vaswani et al. 2017, sec. 3.2.1; the ``shift_invariance`` proof
(for the shares).
"""

from __future__ import annotations

import sympy

from exactattn.properties.gradients import check_gradient_shift_invariance, softmax_backward
from exactattn.proofs._gradients import calls
from exactattn.proofs._support import Report, decide_zero, exact_softmax, main

CLAIM = "adding the same constant to every logit of a row changes no gradient"


def exact_backward(scores, d_shares):
    """dS of one row: exactattn's symbolic shares of ``scores``, then softmax_backward."""
    return softmax_backward(exact_softmax([scores])[0], d_shares)


def run(backward=exact_backward, *, out=None) -> bool:
    """Prove the claim for ``backward`` (a function: scores, dP -> dS of one row)."""
    report = Report(__file__, CLAIM, out)
    c = sympy.Symbol("c", real=True)
    report.say("scores: real symbols s_1..s_n; shift: a real symbol c; dP: d_1..d_n")
    for n in range(1, 6):
        s = list(sympy.symbols(f"s1:{n + 1}", real=True))
        d = list(sympy.symbols(f"d1:{n + 1}", real=True))
        before = backward(s, d)
        after = backward([x + c for x in s], d)
        verdicts = [decide_zero(a - b) for a, b in zip(after, before)]
        bad = [why for ok, why in verdicts if not ok]
        report.check(f"n = {n}", not bad, "dS(s + c) - dS(s): " +
                     (bad[0] if bad else f"residual 0 for entries 1..{n}"))
    report.say("exactattn's exact gradients (exactattn.gradients) of concrete calls:")
    for label, g in calls():
        ch = check_gradient_shift_invariance(g)
        report.check(label, ch.holds, ch.lines[0])
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
