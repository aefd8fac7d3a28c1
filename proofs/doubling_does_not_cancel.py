"""Doubling every score does not cancel: a softmax reads gaps, not sizes.

Claim: the ratio of two shares is share_i / share_j = exp(s_i - s_j); after
doubling every score it is exp(2 (s_i - s_j)), the square of the old ratio, so
it changes by the factor exp(s_i - s_j), which is 1 only when s_i = s_j.

Assumptions: real scores, n = 2..5 (the first two shares are compared; every
other score is a free symbol too).

Derivation: the softmax under test (exactattn's symbolic engine by default)
gives the shares of a symbolic row and of the doubled row; sympy cancels the
ratio share_1 / share_2 before and after, divides the two, and solves
(factor = 1) for s_1 over the reals.  On the chronicle example's row 2 the
ratio of the largest to the smallest share goes from exp(25/16) to exp(25/8).

Reference: Vaswani et al. 2017, sec. 3.2.1 (multiplying the scores by
1/sqrt(d_k) changes the shares for the same reason).
"""

from __future__ import annotations

import sympy

from exactattn import attend
from exactattn.examples import chronicle
from exactattn.proofs._support import Report, exact_softmax, main, rational, show

CLAIM = "doubling every score does not cancel: the ratio of two shares is squared"


def _ratio(shares, i, j):
    return sympy.powsimp(sympy.cancel(shares[i] / shares[j]))


def run(softmax=exact_softmax, *, out=None) -> bool:
    """Prove the claim for ``softmax`` (a function: matrix of scores -> matrix of shares)."""
    report = Report(__file__, CLAIM, out)
    for n in range(2, 6):
        s = list(sympy.symbols(f"s1:{n + 1}", real=True))
        before = _ratio(softmax([s])[0], 0, 1)
        after = _ratio(softmax([[2 * v for v in s]])[0], 0, 1)
        factor = sympy.powsimp(sympy.cancel(after / before))
        squared = sympy.cancel(after - before ** 2) == 0
        if factor == 1:
            report.check(f"n = {n}", False, f"share_1/share_2 = {before}, doubled {after}: "
                         "factor 1, doubling cancels for every row")
            continue
        solved = sympy.solve(sympy.Eq(factor, 1), s[0])
        report.check(f"n = {n}", squared and solved == [s[1]],
                     f"share_1/share_2 = {before}, doubled {after} (the square); "
                     f"factor {factor} = 1 only when s1 = "
                     f"{solved[0] if len(solved) == 1 else solved}")
    ex = chronicle()
    trace = attend(ex.head, ex.x, engine="pencil")
    scaled = [rational(v) for v in trace.scaled_scores[1]]
    hi, lo = max(scaled), min(scaled)
    rows = softmax([scaled, [2 * v for v in scaled]])
    top, bottom = scaled.index(hi), scaled.index(lo)
    r1, r2 = (sympy.powsimp(sympy.cancel(r[top] / r[bottom])) for r in rows)
    ok = r1.is_finite and sympy.cancel(r2 - r1 ** 2) == 0 and r1 != r2
    report.check("chronicle row 2", bool(ok),
                 f"scaled scores {[str(v) for v in scaled]}; largest/smallest share "
                 f"{show(r1)}, doubled {show(r2)}")
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main(run))
